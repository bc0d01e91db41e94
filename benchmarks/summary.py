"""Numbers derived from the raw measurements: speed-up and overhead against eager, achieved bandwidth.

Both reports (markdown, chart) read these, and the JSON keeps them next to the raw numbers they come from.
"""
from __future__ import annotations


def _get(mapping: dict | None, *keys):
    for key in keys:
        if not isinstance(mapping, dict):
            return None
        mapping = mapping.get(key)
    return mapping


def us_per_call(row: dict) -> float | None:
    return _get(row, "cold", "steady", "us_per_call")


def derive(row: dict, eager_us: float | None, copy_gb_per_s: float | None) -> dict:
    """Derived numbers of one row; eager_us is the eager row of the same section and case."""
    us = us_per_call(row)
    is_eager = row["mode"] == "eager"
    derived = {
        "us_per_call": us,
        "speedup_vs_eager": eager_us / us if us and eager_us else None,
        "overhead_us_vs_eager": us - eager_us if us is not None and eager_us is not None else None,
        "cold_compile_ms": None if is_eager else _ms(_get(row, "cold", "compile_s")),
        "cold_ready_ms": None if is_eager else _ms(_get(row, "cold", "ready_s")),
        "trace_ms": _ms(_get(row, "cold", "trace_s")),
        "warm_compile_ms": _ms(_get(row, "warm", "compile_s")) if _get(row, "warm", "status") == "ok" else None,
        "warm_ready_ms": _ms(_get(row, "warm", "ready_s")) if _get(row, "warm", "status") == "ok" else None,
        "warm_trace_ms": _ms(_get(row, "warm", "trace_s")) if _get(row, "warm", "status") == "ok" else None,
        "retrace_ms": _ms(_get(row, "cold", "retrace", "trace_s")),
        "retrace_compile_ms": _ms(_get(row, "cold", "retrace", "compile_s")),
        "heavy_imports": _get(row, "cold", "imported_by_first_call", "heavy"),
        "latency_us": _get(row, "cold", "latency", "median_us"),
        "rel_err": _get(row, "cold", "accuracy", "rel_err"),
        "accurate": _get(row, "cold", "accuracy", "within_tolerance"),
        "graphs": _get(row, "cold", "graph_counts", "graphs"),
        "graph_breaks": _get(row, "cold", "graph_counts", "graph_breaks"),
        "gb_per_s": None,
        "copy_fraction": None,
    }
    moved = _get(row, "cold", "bytes_moved")
    if row.get("memory_bound") and row["section"] == "workloads" and us and moved:
        derived["gb_per_s"] = moved / us / 1e3
        if copy_gb_per_s:
            derived["copy_fraction"] = derived["gb_per_s"] / copy_gb_per_s
    return derived


def derive_all(results: dict) -> None:
    """Fills row["derived"] for every row of the results, and results["targets"] (targets.py)."""
    from benchmarks import targets
    eager = {(r["section"], r["case"]): us_per_call(r) for r in results["rows"] if r["mode"] == "eager"}
    copy_gb_per_s = _get(results, "copy_ceiling", "gb_per_s")
    for row in results["rows"]:
        row["derived"] = derive(row, eager.get((row["section"], row["case"])), copy_gb_per_s)
    results["targets"] = targets.evaluate(results["rows"])


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3
