"""The PNG chart: speed-up over eager per workload and mode (bars from 1×), and compile time (cold bars,
warm dots), both on log axes.

Charts the `workloads` section, or the `cpu` section when the run has no `workloads` rows.
"""
from __future__ import annotations

import math
from pathlib import Path


def _chart_rows(results: dict) -> list[dict]:
    for section in ("workloads", "cpu"):
        rows = [r for r in results["rows"] if r["section"] == section]
        if rows:
            return rows
    return []


def _value(cell: dict, case: str, mode: str, key: str) -> float:
    """The derived number, or NaN (an empty slot) for a missing or failed row."""
    value = (cell.get((case, mode)) or {}).get(key)
    return float("nan") if value is None else value


def _first_number(*values: float) -> float:
    """The first value that is not NaN (a row written before `warm_ready_ms` existed has only the first call)."""
    return next((v for v in values if not math.isnan(v)), float("nan"))


def _log_limits(values: list[float]) -> tuple[float, float]:
    """Axis limits with room on both sides, so bars never start at the edge of a log axis."""
    present = [v for v in values if v > 0 and not math.isnan(v)] or [1.0]
    return min(present) / 3, max(present) * 3


def write(results: dict, path: Path) -> str | None:
    """Writes the chart; returns why not when it cannot (no matplotlib, nothing to chart)."""
    rows = _chart_rows(results)
    if not rows:
        return "no workload rows to chart"
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed, so there is no PNG chart"

    cases = list(dict.fromkeys(r["case"] for r in rows))
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    compiled_modes = [m for m in modes if m != "eager"]
    cell = {(r["case"], r["mode"]): r["derived"] for r in rows}
    width = 0.8 / max(1, len(compiled_modes))

    figure, (speed_axis, compile_axis) = plt.subplots(2, 1, figsize=(max(8, 1.2 * len(cases)), 8))
    for i, mode in enumerate(compiled_modes):
        xs = [c + (i - (len(compiled_modes) - 1) / 2) * width for c in range(len(cases))]
        speedups = [_value(cell, case, mode, "speedup_vs_eager") for case in cases]
        # until the compiled code runs: fastcomp answers its first calls through torch while kernels compile
        cold = [_value(cell, case, mode, "cold_ready_ms") for case in cases]
        warm = [_first_number(_value(cell, case, mode, "warm_ready_ms"), _value(cell, case, mode, "warm_compile_ms"))
                for case in cases]
        speed_axis.bar(xs, [s - 1 for s in speedups], width, bottom=1, label=mode, color=f"C{i}")  # up or down from 1×
        for x, speedup in zip(xs, speedups):
            if math.isnan(speedup):
                speed_axis.annotate("failed", (x, 1), ha="center", va="bottom", rotation=90, fontsize="x-small")
        compile_axis.bar(xs, cold, width, label=f"{mode} cold", color=f"C{i}")
        compile_axis.scatter(xs, warm, color="black", marker="o", s=12, zorder=3, label="warm" if i == 0 else None)
    speed_axis.set_ylim(*_log_limits([_value(cell, c, m, "speedup_vs_eager") for c in cases for m in modes] + [1]))
    compile_axis.set_ylim(*_log_limits([_value(cell, c, m, k) for c in cases for m in modes
                                        for k in ("cold_ready_ms", "warm_ready_ms", "warm_compile_ms")]))
    speed_axis.axhline(1.0, color="gray", linewidth=0.8)
    speed_axis.set_yscale("log")
    speed_axis.set_ylabel("speed-up over eager (µs/call), log")
    compile_axis.set_yscale("log")
    compile_axis.set_ylabel("ms until compiled code runs, log\n(bars: cold, dots: warm)")
    for axis in (speed_axis, compile_axis):
        axis.set_xticks(range(len(cases)), cases)
        axis.set_xlim(-0.5, len(cases) - 0.5)  # failed rows draw nothing, so autoscaling would cut their slots
        axis.legend(fontsize="small", ncol=len(compiled_modes))
        axis.grid(axis="y", which="both", alpha=0.3)
    env = results.get("environment") or {}
    speed_axis.set_title(f"{results['meta']['date']} {env.get('device_name', '')}, torch {env.get('torch', '')}, "
                         f"fastcomp {env.get('fastcomp') or 'n/a'}")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return None
