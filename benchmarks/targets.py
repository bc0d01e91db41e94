"""fastcomp's targets, checked against a run's rows: each check says met or missed, and by how much.

- `cpu` section (the tracker issue's CPU targets, no GPU needed), for the `fc` rows:
  W1 µs/call ≤ 1.3× eager's and ≥ 2× faster than torch.compile's; W5 and W7 trace ≤ 20 ms and ≥ 50× faster
  than torch.compile's trace. "torch.compile" is every `tc*` mode of the same section (`tc-eager` by default).
- `workloads` section on a GPU (shared/ANCHORS.md, "What fastcomp aims for"), for the `fc` rows: µs/call
  ahead of the best of eager, tc and tc-ro present in the run; W2, W3, W8 within 15% of the copy floor; W1
  under 8 µs; cold compile under 150 ms and warm under 20 ms; exactly 1 graph and 0 breaks.

A check whose numbers are missing (a failed row, a mode not in the run) is reported as not measured. The
verdict is on the cold numbers (a fresh process); the CPU trace checks also show the re-trace after the
compiler's reset() in the same process, which leaves out one-time start-up costs, for diagnosis only.
"""
from __future__ import annotations

CPU_W1_MAX_RATIO_TO_EAGER = 1.3
CPU_W1_MIN_SPEEDUP_VS_TC = 2.0
CPU_TRACE_WORKLOADS = ("W5", "W7")
CPU_TRACE_MAX_MS = 20.0
CPU_TRACE_MIN_SPEEDUP_VS_TC = 50.0
CPU_BREAK_CASE = "graph_break"  # one graph break, two graphs
CPU_BREAK_MAX_US_PER_GRAPH = 2.0  # µs/call ≤ eager + this per graph

GPU_PEERS = ("eager", "tc", "tc-ro")
GPU_MEMORY_BOUND_MAX_RATIO_TO_FLOOR = 1.15
GPU_W1_MAX_US = 8.0
GPU_COLD_MAX_MS = 150.0
GPU_WARM_MAX_MS = 20.0

FASTCOMP_MODE = "fc"
SOURCES = {"cpu": "the tracker issue's CPU targets", "workloads": "shared/ANCHORS.md, What fastcomp aims for"}


def _factor_text(factor: float) -> str:
    """1.15 -> '15%', 240 -> '240×': how far past (or short of) a limit, readable at any size."""
    return f"{(factor - 1) * 100:.0f}%" if factor < 2 else f"{factor:.3g}×"


def _verdict(value: float | None, bound: str, limit: float) -> tuple[bool | None, str]:
    """bound 'max': value ≤ limit is met; 'min': value ≥ limit is met; 'equal': value == limit."""
    if value is None:
        return None, "not measured"
    if bound == "equal":
        return (True, "met") if value == limit else (False, "missed")
    if bound == "max":
        met = value <= limit
        factor = (limit / value if value > 0 else float("inf")) if met else value / limit
    else:
        met = value >= limit
        factor = value / limit if met else (limit / value if value > 0 else float("inf"))
    if met:
        return True, f"met, {_factor_text(factor)} to spare"
    return False, f"missed: {_factor_text(factor)} " + ("over" if bound == "max" else "short")


def _check(section, case, mode, target, bound, limit, value, measured) -> dict:
    met, verdict = _verdict(value, bound, limit)
    return {"section": section, "case": case, "mode": mode, "target": target, "bound": bound, "limit": limit,
            "value": value, "measured": measured if value is not None else "—", "met": met, "verdict": verdict}


def _ratio(a, b):
    return a / b if a is not None and b else None


def _fmt_ms(ms):
    return "—" if ms is None else (f"{ms:.1f} ms" if ms < 100 else f"{ms:.0f} ms")


def _fmt_us(us):
    return "—" if us is None else f"{us:.1f} µs"


def _cpu_checks(section_rows: dict) -> list[dict]:
    checks = []
    peers = sorted({mode for (_, mode) in section_rows if mode.startswith("tc")})
    d = lambda case, mode: (section_rows.get((case, mode)) or {}).get("derived") or {}  # noqa: E731
    if ("W1", FASTCOMP_MODE) in section_rows:
        fc_us, eager_us = d("W1", FASTCOMP_MODE).get("us_per_call"), d("W1", "eager").get("us_per_call")
        ratio = _ratio(fc_us, eager_us)
        checks.append(_check("cpu", "W1", FASTCOMP_MODE, f"µs/call ≤ {CPU_W1_MAX_RATIO_TO_EAGER}× eager", "max",
                             CPU_W1_MAX_RATIO_TO_EAGER, ratio,
                             f"{ratio:.2f}× eager ({_fmt_us(fc_us)} vs {_fmt_us(eager_us)})" if ratio else None))
        for peer in peers:
            peer_us = d("W1", peer).get("us_per_call")
            speedup = _ratio(peer_us, fc_us)
            checks.append(_check("cpu", "W1", FASTCOMP_MODE, f"µs/call ≥ {CPU_W1_MIN_SPEEDUP_VS_TC:g}× faster than "
                                 f"{peer}", "min", CPU_W1_MIN_SPEEDUP_VS_TC, speedup,
                                 f"{speedup:.2f}× ({_fmt_us(fc_us)} vs {_fmt_us(peer_us)})" if speedup else None))
    if (CPU_BREAK_CASE, FASTCOMP_MODE) in section_rows:
        fc_us, eager_us = d(CPU_BREAK_CASE, FASTCOMP_MODE).get("us_per_call"), d(CPU_BREAK_CASE, "eager").get("us_per_call")
        graphs = 2
        over = fc_us - eager_us if fc_us is not None and eager_us is not None else None
        checks.append(_check("cpu", CPU_BREAK_CASE, FASTCOMP_MODE,
                             f"µs/call ≤ eager + {CPU_BREAK_MAX_US_PER_GRAPH:g} µs per graph ({graphs} graphs)", "max",
                             CPU_BREAK_MAX_US_PER_GRAPH * graphs, over,
                             f"{over:+.2f} µs ({_fmt_us(fc_us)} vs {_fmt_us(eager_us)})" if over is not None else None))
    for case in CPU_TRACE_WORKLOADS:
        if (case, FASTCOMP_MODE) not in section_rows:
            continue
        row = section_rows[(case, FASTCOMP_MODE)]
        scale = "" if row.get("scale") in (None, 1.0) else f", scale {row['scale']:g}"
        fc_trace = d(case, FASTCOMP_MODE).get("trace_ms")
        fc_retrace = d(case, FASTCOMP_MODE).get("retrace_ms")
        first_call = d(case, FASTCOMP_MODE).get("cold_compile_ms")
        retrace_text = "" if fc_retrace is None else f"; re-trace after reset() {_fmt_ms(fc_retrace)}"
        checks.append(_check("cpu", case, FASTCOMP_MODE, f"trace ≤ {CPU_TRACE_MAX_MS:g} ms", "max", CPU_TRACE_MAX_MS,
                             fc_trace, f"{_fmt_ms(fc_trace)} (first call {_fmt_ms(first_call)}{retrace_text}{scale})"))
        for peer in peers:
            peer_trace, peer_retrace = d(case, peer).get("trace_ms"), d(case, peer).get("retrace_ms")
            speedup = _ratio(peer_trace, fc_trace)
            retrace_speedup = _ratio(peer_retrace, fc_retrace)
            retrace_text = ("" if retrace_speedup is None else f"; re-traces {retrace_speedup:.3g}× "
                            f"({_fmt_ms(fc_retrace)} vs {_fmt_ms(peer_retrace)})")
            checks.append(_check("cpu", case, FASTCOMP_MODE, f"trace ≥ {CPU_TRACE_MIN_SPEEDUP_VS_TC:g}× faster than "
                                 f"{peer}'s", "min", CPU_TRACE_MIN_SPEEDUP_VS_TC, speedup,
                                 f"{speedup:.3g}× ({_fmt_ms(fc_trace)} vs {_fmt_ms(peer_trace)}{retrace_text})"
                                 if speedup else None))
    return checks


def _gpu_checks(section_rows: dict) -> list[dict]:
    checks = []
    cases = list(dict.fromkeys(case for (case, _) in section_rows))
    for case in cases:
        row = section_rows.get((case, FASTCOMP_MODE))
        if row is None:
            continue
        d = row.get("derived") or {}
        fc_us = d.get("us_per_call")
        peer_us = {m: (section_rows.get((case, m)) or {}).get("derived", {}).get("us_per_call") for m in GPU_PEERS}
        peer_us = {m: us for m, us in peer_us.items() if us}
        if peer_us:
            best = min(peer_us, key=peer_us.get)
            speedup = _ratio(peer_us[best], fc_us)
            checks.append(_check("workloads", case, FASTCOMP_MODE, f"µs/call ahead of the best of "
                                 f"{', '.join(peer_us)}", "min", 1.0, speedup,
                                 f"{speedup:.2f}× {best} ({_fmt_us(fc_us)} vs {_fmt_us(peer_us[best])})"
                                 if speedup else None))
        if row.get("memory_bound"):
            fraction = d.get("copy_fraction")
            over_floor = 1 / fraction if fraction else None
            checks.append(_check("workloads", case, FASTCOMP_MODE, f"µs/call ≤ {GPU_MEMORY_BOUND_MAX_RATIO_TO_FLOOR}× "
                                 "the copy floor", "max", GPU_MEMORY_BOUND_MAX_RATIO_TO_FLOOR, over_floor,
                                 f"{over_floor:.2f}× the floor ({fraction:.0%} of copy)" if over_floor else None))
        if case == "W1":
            checks.append(_check("workloads", case, FASTCOMP_MODE, f"µs/call < {GPU_W1_MAX_US:g} µs", "max",
                                 GPU_W1_MAX_US, fc_us, _fmt_us(fc_us)))
        # Judged on when the compiled kernels are in use ("ready"), not on the first call, which fastcomp answers
        # through torch while its kernels compile in the background.
        first, ready = d.get("cold_compile_ms"), d.get("cold_ready_ms")
        warm_first, warm_ready = d.get("warm_compile_ms"), d.get("warm_ready_ms")
        cold = ready if ready is not None else first
        warm = warm_ready if warm_ready is not None else warm_first
        checks.append(_check("workloads", case, FASTCOMP_MODE, f"cold compile < {GPU_COLD_MAX_MS:g} ms", "max",
                             GPU_COLD_MAX_MS, cold, f"{_fmt_ms(cold)} until kernels run (first call "
                             f"{_fmt_ms(first)}, trace {_fmt_ms(d.get('trace_ms'))})"))
        checks.append(_check("workloads", case, FASTCOMP_MODE, f"warm compile < {GPU_WARM_MAX_MS:g} ms", "max",
                             GPU_WARM_MAX_MS, warm, f"{_fmt_ms(warm)} until kernels run (first call "
                             f"{_fmt_ms(warm_first)})"))
        graphs, breaks = d.get("graphs"), d.get("graph_breaks")
        exact = None if graphs is None else float(graphs == 1 and breaks == 0)
        checks.append(_check("workloads", case, FASTCOMP_MODE, "1 graph, 0 breaks", "equal", 1.0, exact,
                             f"{graphs} / {breaks}"))
    return checks


def evaluate(rows: list[dict]) -> list[dict]:
    """Every check that the run's rows allow, in section order."""
    checks = []
    by_section: dict[str, dict] = {}
    for row in rows:
        by_section.setdefault(row["section"], {})[(row["case"], row["mode"])] = row
    if "cpu" in by_section:
        checks += _cpu_checks(by_section["cpu"])
    workloads = by_section.get("workloads", {})
    if workloads and all(str(r.get("device", "")).startswith("cuda") for r in workloads.values()):
        checks += _gpu_checks(workloads)
    return checks
