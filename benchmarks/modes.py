"""The ways of running a workload that the harness compares: eager, torch.compile and fastcomp.

Compilers are imported only when a mode is measured (`compiler_module`, timed as part of the cold start), so
a missing or half-written fastcomp fails that mode's measurement, which the harness records with its error,
instead of the import of the harness.

Each compiling mode also reports what it compiled (`start_stats`): graphs, graph breaks and the time the
compiler itself says it spent compiling frames ("trace" in the reports):
- fastcomp: a `fastcomp.testing.CompileCounter` held open for the whole process; graphs = graphs with at least
  one op (a frame that breaks compiles the graph before the break, its resume function the one after), breaks =
  graph breaks, each counted by the frame whose code holds it; trace = the sum of the records'
  `compile_time_s`.
- torch.compile: Dynamo's process-wide counters (`unique_graphs`, the `graph_break` reasons) and its timer
  `compilation_time_metrics["_compile.compile_inner"]`, the whole compile of each frame: Dynamo's capture and
  guards plus the backend (a no-op for `tc-eager`, so there it is Dynamo's trace; Inductor's code generation
  for `tc` and `tc-ro`). Dynamo's bytecode tracing alone is kept in the JSON as `dynamo_bytecode_tracing_s`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

# torch._dynamo.utils.compilation_time_metrics keys: the whole frame compile, and Dynamo's trace within it.
DYNAMO_COMPILE_TIMER = "_compile.compile_inner"
DYNAMO_TRACE_TIMER = "bytecode_tracing"
FASTCOMP_RECORD_KEYS = ("name", "status", "compile_time_s", "recompile_reasons", "break_code", "break_reason",
                        "user_loc", "user_error")


@dataclass(frozen=True)
class Mode:
    name: str
    description: str
    compiler_module: str | None  # imported before anything else of the mode, on the compile clock
    compile: Callable  # (fn, dynamic) -> compiled fn; raises if the compiler is missing
    disable: Callable  # () -> the compiler's decorator that keeps a function out of its graphs
    has_disk_cache: bool  # a warm start (second process, same cache dir) means something
    start_stats: Callable  # () -> CompileStats of this process (after compiler_module is imported)
    reset: Callable  # () -> None: forget every compiled function (torch._dynamo.reset / fastcomp.reset)
    caveat: str | None = None  # shown beside every row of the mode: what it does not do yet
    # () -> None: block until work the compiler does off the first call's path (fastcomp's background kernel
    # compiles) is finished, so steady-state timings measure the compiled code
    wait_ready: Callable = lambda: None


class CompileStats:
    """What a compiler compiled in this process so far; `snapshot()` may be taken any number of times."""

    def snapshot(self) -> dict | None:
        return None

    def close(self) -> None:
        pass


class FastcompStats(CompileStats):
    def __init__(self):
        from fastcomp.testing import CompileCounter
        self.counter = CompileCounter().__enter__()

    def snapshot(self) -> dict:
        records = self.counter.records
        return {"graphs": self.counter.graph_count, "graph_breaks": self.counter.break_count,
                "frames": self.counter.frame_count,
                "trace_s": sum(r.get("compile_time_s") or 0.0 for r in records),
                "records": [{k: r[k] for k in FASTCOMP_RECORD_KEYS if k in r} | {"n_ops": len(r.get("ops") or ()),
                                                                                 "n_guards": len(r.get("guards") or ())}
                            for r in records]}

    def close(self) -> None:
        self.counter.__exit__(None, None, None)


class DynamoStats(CompileStats):
    def snapshot(self) -> dict:
        from torch._dynamo.utils import compilation_time_metrics, counters
        compile_times = compilation_time_metrics.get(DYNAMO_COMPILE_TIMER)
        trace_times = compilation_time_metrics.get(DYNAMO_TRACE_TIMER)
        return {"graphs": int(counters["stats"]["unique_graphs"]),
                "graph_breaks": int(sum(counters["graph_break"].values())),
                "frames": int(counters["frames"]["total"]),
                "trace_s": sum(compile_times) if compile_times is not None else None,
                "dynamo_bytecode_tracing_s": sum(trace_times) if trace_times is not None else None,
                "trace_timer": DYNAMO_COMPILE_TIMER if compile_times is not None else "missing in this torch"}


def _torch_mode(name: str, description: str, has_disk_cache: bool, **options) -> Mode:
    def compile(fn, dynamic=None):
        return torch.compile(fn, dynamic=dynamic, **options)

    def reset():
        torch._dynamo.reset()
    return Mode(name, description, "torch._dynamo", compile, lambda: torch.compiler.disable, has_disk_cache,
                DynamoStats, reset)


def _fastcomp_mode(name: str, description: str, caveat: str | None = None, config: dict | None = None,
                   **options) -> Mode:
    def compile(fn, dynamic=None):
        import fastcomp
        for key, value in (config or {}).items():  # each row runs in its own processes: set for good
            setattr(fastcomp.config, key, value)
        return fastcomp.compile(fn, dynamic=dynamic, **options)

    def disable():
        import fastcomp
        return fastcomp.disable

    def reset():
        import fastcomp
        fastcomp.reset()

    def wait_ready():
        import fastcomp
        fastcomp.wait_for_compiles()
    return Mode(name, description, "fastcomp", compile, disable, True, FastcompStats, reset, caveat, wait_ready)


def _eager_mode() -> Mode:
    return Mode("eager", "plain PyTorch", None, lambda fn, dynamic=None: fn, lambda: (lambda fn: fn), False,
                CompileStats, lambda: None)


MODES: dict[str, Mode] = {m.name: m for m in [
    _eager_mode(),
    _torch_mode("tc", "torch.compile()", True),
    _torch_mode("tc-ro", 'torch.compile(mode="reduce-overhead")', True, mode="reduce-overhead"),
    _torch_mode("tc-eager", 'torch.compile(backend="eager"): Dynamo capture only', False, backend="eager"),
    _fastcomp_mode("fc", "fastcomp.compile()"),
    _fastcomp_mode("fc-ro", 'fastcomp.compile(mode="reduce-overhead")', mode="reduce-overhead"),
    # fastcomp.config.fused_attention off: the A/B of the attention kernels.
    _fastcomp_mode("fc-noattn", "fastcomp.compile() without fastcomp.config.fused_attention",
                   config={"fused_attention": False}),
    _fastcomp_mode("fc-ro-noattn", 'fastcomp.compile(mode="reduce-overhead") without fastcomp.config.fused_attention',
                   config={"fused_attention": False}, mode="reduce-overhead"),
    # fastcomp.config.small_matmul off: the A/B of the small-matmul kernels (every product through cuBLASLt).
    _fastcomp_mode("fc-lt", "fastcomp.compile() without fastcomp.config.small_matmul", config={"small_matmul": False}),
    _fastcomp_mode("fc-ro-lt", 'fastcomp.compile(mode="reduce-overhead") without fastcomp.config.small_matmul',
                   config={"small_matmul": False}, mode="reduce-overhead"),
]}
