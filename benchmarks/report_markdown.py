"""The markdown report: what was measured on, one table per section, then every failure with its error."""
from __future__ import annotations

from typing import Callable

from benchmarks.modes import MODES

NONE = "—"


def _fmt(value, spec: str) -> str:
    return NONE if value is None else format(value, spec)


def _status(row: dict) -> str:
    cold = row.get("cold") or {}
    if cold.get("status") == "failed":
        return f"failed: {cold.get('step', '?')}"
    if cold.get("status") != "ok":
        return cold.get("status", "?")
    if row.get("warm") and row["warm"].get("status") != "ok":
        return "ok, warm failed"
    return "ok"


def _rel_err(d: dict) -> str:
    text = _fmt(d["rel_err"], ".1e")
    return text + " ✗" if d["accurate"] is False else text


def _mode(row: dict) -> str:
    mode = MODES.get(row["mode"])
    return row["mode"] + ("†" if mode and mode.caveat else "")


def _graphs(d: dict) -> str:
    return NONE if d["graphs"] is None else f"{d['graphs']} / {d['graph_breaks']}"


def _percent(fraction) -> str:
    return NONE if fraction is None else f"{fraction:.0%}"


Column = tuple[str, Callable[[dict, dict], str]]  # (header, cell(row, derived))

CASE_AND_MODE: list[Column] = [("case", lambda r, d: r["case"]), ("mode", lambda r, d: _mode(r)),
                               ("status", lambda r, d: _status(r))]
COLUMNS: dict[str, list[Column]] = {
    "workloads": CASE_AND_MODE + [
        ("cold ms", lambda r, d: _fmt(d["cold_compile_ms"], ".0f")),
        ("ready ms", lambda r, d: _fmt(d.get("cold_ready_ms"), ".0f")),
        ("trace ms", lambda r, d: _fmt(d["trace_ms"], ".1f")),
        ("warm ms", lambda r, d: _fmt(d["warm_compile_ms"], ".0f")),
        ("warm ready ms", lambda r, d: _fmt(d.get("warm_ready_ms"), ".0f")),
        ("µs/call", lambda r, d: _fmt(d["us_per_call"], ".1f")),
        ("× eager", lambda r, d: _fmt(d["speedup_vs_eager"], ".2f")),
        ("latency µs", lambda r, d: _fmt(d["latency_us"], ".1f")),
        ("rel err", lambda r, d: _rel_err(d)),
        ("GB/s", lambda r, d: _fmt(d["gb_per_s"], ".0f")),
        ("% of copy", lambda r, d: _percent(d["copy_fraction"])),
        ("graphs / breaks", lambda r, d: _graphs(d)),
    ],
    "cpu": CASE_AND_MODE + [
        ("trace ms", lambda r, d: _fmt(d["trace_ms"], ".1f")),
        ("first call ms", lambda r, d: _fmt(d["cold_compile_ms"], ".1f")),
        ("re-trace ms", lambda r, d: _fmt(d["retrace_ms"], ".1f")),
        ("µs/call", lambda r, d: _fmt(d["us_per_call"], ".1f")),
        ("overhead µs vs eager", lambda r, d: _fmt(d["overhead_us_vs_eager"], "+.1f")),
        ("rel err", lambda r, d: _rel_err(d)),
        ("graphs / breaks", lambda r, d: _graphs(d)),
    ],
    "overhead": CASE_AND_MODE + [
        ("first compile ms", lambda r, d: _fmt(d["cold_compile_ms"], ".1f")),
        ("trace ms", lambda r, d: _fmt(d["trace_ms"], ".1f")),
        ("µs/call", lambda r, d: _fmt(d["us_per_call"], ".2f")),
        ("overhead µs vs eager", lambda r, d: _fmt(d["overhead_us_vs_eager"], "+.2f")),
        ("latency µs", lambda r, d: _fmt(d["latency_us"], ".1f")),
        ("graphs / breaks", lambda r, d: _graphs(d)),
    ],
}

TITLES = {
    "workloads": "Workloads (ANCHORS.md W1–W9)",
    "cpu": "CPU: trace time and per-call overhead",
    "overhead": "Guard and dispatch overhead",
}
TRACE_LEGEND = ("trace: the time the compiler reports for its own frame compiles during the first call — "
                "fastcomp: the sum of its CompileCounter records' compile_time_s; torch.compile: Dynamo's "
                "`_compile.compile_inner` timer (capture + guards + backend: Dynamo's trace alone for tc-eager, "
                "with Inductor's code generation for tc/tc-ro); none for eager. graphs / breaks: over the whole "
                "cold process — fastcomp: graphs with ops / breaks (CompileCounter); Dynamo: unique graphs / "
                "graph-break reasons.")
LEGENDS = {
    "workloads": "cold/warm ms: import of the compiler + compile() + first call, with empty / reused compiler "
                 "caches, each in a fresh process. ready ms: cold ms + the wait until the compiled kernels run "
                 "(fastcomp compiles them on a background thread and answers the first calls through torch "
                 "meanwhile; the cold-compile target is judged on it); warm ready ms likewise for the warm start "
                 "(cuBLASLt's first plan of a dtype in a process is made on that thread too), which the "
                 "warm-compile target is judged on. " + TRACE_LEGEND + " µs/call: back-to-back calls then one "
                 "synchronize, median of repeats. latency: one call on an idle device. rel err: ‖out − ref‖/‖ref‖ "
                 "against float64 eager (✗: outside tolerance). GB/s: minimal bytes moved / µs/call, memory-bound "
                 "workloads only.",
    "cpu": "first call: import of the compiler + compile() + the first call on an empty cache, in a fresh "
           "process. " + TRACE_LEGEND + " re-trace: the trace again in the same process after the compiler's "
           "reset() (so without one-time start-up costs such as lazy imports). overhead: µs/call minus eager's "
           "µs/call on the same inputs.",
    "overhead": "inputsN_entriesE: N fp32[8+i] inputs added together, calls rotating through E compiled "
                "shapes; graph_break: one call to a disabled function between two graphs. Overhead is µs/call "
                "minus eager's. first compile: import + compile() + first call; trace: the compiler's own time "
                "for the first call's frames.",
}


def _where(rows: list[dict]) -> str:
    """'cuda, full size' / 'cpu, reduced size (scale per row in the JSON)' / 'cpu' for fixed-size cases."""
    devices = ", ".join(dict.fromkeys(r["device"] for r in rows))
    scales = {r["scale"] for r in rows if r["scale"] is not None}
    if not scales:
        return devices
    return f"{devices}, full size" if scales == {1.0} else f"{devices}, reduced size (scale per row in the JSON)"


def _table(section: str, rows: list[dict]) -> list[str]:
    columns = COLUMNS[section]
    lines = ["| " + " | ".join(h for h, _ in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r, r["derived"]) for _, cell in columns) + " |" for r in rows]
    return lines


def _header(results: dict) -> list[str]:
    env, meta = results.get("environment") or {}, results["meta"]
    commit = meta.get("git") or {}
    fastcomp = (f"{env.get('fastcomp')} ({env.get('fastcomp_file')})" if env.get("fastcomp_file")
                else f"not importable: {env.get('fastcomp_error', 'unknown')}")
    ceiling = results.get("copy_ceiling") or {}
    ceiling_text = (f"{ceiling['gb_per_s']:.0f} GB/s (device-to-device copy, bytes read + written)"
                    if "gb_per_s" in ceiling else ceiling.get("error", "not measured"))
    device = env.get("device_name", meta["device"])
    if env.get("capability"):
        device += f" (sm {env['capability']}, {env['device_memory_gib']} GiB), driver {env.get('driver')}"
    return [
        f"# fastcomp benchmarks: {meta['date']}, {env.get('device_name', meta['device'])}", "",
        "| | |", "|---|---|",
        f"| device | {device} |",
        f"| host | {env.get('cpu')}, {env.get('cpu_count')} cores, torch threads: {env.get('torch_threads')}"
        f"{_load(env)} |",
        f"| torch | {env.get('torch')}, CUDA {env.get('cuda')}, triton {env.get('triton')} |",
        f"| Python | {env.get('python')} |",
        f"| fastcomp | {fastcomp} |",
        f"| commit | {commit.get('commit') or 'unknown'}{' (uncommitted changes)' if commit.get('dirty') else ''} |",
        f"| copy ceiling | {ceiling_text} |",
        f"| modes | {'; '.join(_mode_text(m) for m in modes_in(results) if m in MODES)} |",
        f"| command | `{meta['command']}` |",
        "",
    ]


def _mode_text(name: str) -> str:
    mode = MODES[name]
    return f"{name}: {mode.description}" + (f" († {mode.caveat})" if mode.caveat else "")


def _load(env: dict) -> str:
    load = env.get("load_average")
    return f", load average {load[0]:g} / {load[1]:g} / {load[2]:g} (1 / 5 / 15 min) at the start" if load else ""


def modes_in(results: dict) -> list[str]:
    return list(dict.fromkeys(mode for _, _, mode in results["meta"]["plan"]))


def _failures(rows: list[dict]) -> list[str]:
    lines = []
    for row in rows:
        for phase in ("cold", "warm"):
            result = row.get(phase) or {}
            if result.get("status") not in (None, "ok"):
                error = " ".join(str(result.get("error", "")).split())[:400]
                where = result.get("step", result["status"])
                lines.append(f"- {row['section']} {row['case']} {row['mode']} ({phase}, {where}): {error}")
    return ["## Failures", ""] + lines + [""] if lines else []


def _caveats(rows: list[dict]) -> list[str]:
    modes = [MODES[m] for m in dict.fromkeys(r["mode"] for r in rows) if m in MODES and MODES[m].caveat]
    return [f"† {mode.name}: {mode.caveat}." for mode in modes]


def _import_notes(rows: list[dict]) -> list[str]:
    """fastcomp rows whose first call imported heavy modules: seconds that belong to no trace of their own."""
    notes = []
    for row in rows:
        heavy, imported = row["derived"].get("heavy_imports"), (row.get("cold") or {}).get("imported_by_first_call")
        if row["mode"].startswith("fc") and heavy:
            notes.append(f"{row['case']} {row['mode']}: its first call imported {', '.join(heavy)} "
                         f"({imported['modules']} modules in all); that time is inside its trace and first call.")
    return ["Imports during fastcomp's first call:", "", *[f"- {n}" for n in notes], ""] if notes else []


def _targets(section: str, checks: list[dict]) -> list[str]:
    from benchmarks.targets import SOURCES
    checks = [c for c in checks if c["section"] == section]
    if not checks:
        return []
    met = sum(c["met"] is True for c in checks)
    lines = [f"### Targets ({SOURCES[section]}): {met} of {len(checks)} met", "",
             "| case | mode | target | measured | verdict |", "|---|---|---|---|---|"]
    for c in checks:
        mark = {True: "✓ ", False: "✗ ", None: ""}[c["met"]]
        lines.append(f"| {c['case']} | {c['mode']} | {c['target']} | {c['measured']} | {mark}{c['verdict']} |")
    return lines + [""]


def _skipped(results: dict) -> list[str]:
    skipped = results["meta"].get("skipped") or []
    if not skipped:
        return []
    return ["## Not measured", "", f"{len(skipped)} planned rows were left out (or cut short) for the budget; "
            "`python -m benchmarks --redo-skipped <this JSON>` measures them: " +
            "; ".join(f"{s['section']} {s['case']} {s['mode']} ({s['reason']})" for s in skipped), ""]


def render(results: dict) -> str:
    lines = _header(results)
    for note in results["meta"].get("notes", []):
        lines += [f"> {note}", ""]
    checks = results.get("targets") or []
    for section in results["meta"]["sections"]:
        rows = [r for r in results["rows"] if r["section"] == section]
        if rows:
            lines += [f"## {TITLES[section]}: {_where(rows)}", "", *_table(section, rows), "", LEGENDS[section], ""]
            lines += [line for caveat in _caveats(rows) for line in (caveat, "")]
            lines += _import_notes(rows)
            lines += _targets(section, checks)
    lines += _skipped(results)
    lines += _failures(results["rows"])
    return "\n".join(lines)
