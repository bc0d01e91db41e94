"""The PNG chart: speed-up over eager per workload and mode, and compile time (cold bars, warm dots, log axis).

Charts the `workloads` section, or the `cpu` section when the run has no `workloads` rows.
"""
from __future__ import annotations

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
        cold = [_value(cell, case, mode, "cold_compile_ms") for case in cases]
        warm = [_value(cell, case, mode, "warm_compile_ms") for case in cases]
        speed_axis.bar(xs, speedups, width, label=mode, color=f"C{i}")
        compile_axis.bar(xs, cold, width, label=f"{mode} cold", color=f"C{i}")
        compile_axis.scatter(xs, warm, color="black", marker="o", s=12, zorder=3, label="warm" if i == 0 else None)
    speed_axis.axhline(1.0, color="gray", linewidth=0.8)
    speed_axis.set_yscale("log")
    speed_axis.set_ylabel("speed-up over eager (µs/call), log")
    compile_axis.set_yscale("log")
    compile_axis.set_ylabel("compile time ms (first call), log")
    for axis in (speed_axis, compile_axis):
        axis.set_xticks(range(len(cases)), cases)
        axis.legend(fontsize="small", ncol=len(compiled_modes))
        axis.grid(axis="y", which="both", alpha=0.3)
    env = results.get("environment") or {}
    speed_axis.set_title(f"{results['meta']['date']} {env.get('device_name', '')}, torch {env.get('torch', '')}, "
                         f"fastcomp {env.get('fastcomp') or 'n/a'}")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return None
