"""The ways of running a workload that the harness compares: eager, torch.compile and fastcomp.

Compilers are imported only when a mode is measured (`compiler_module`, timed as part of the cold start), so
a missing or half-written fastcomp fails that mode's measurement, which the harness records with its error,
instead of the import of the harness.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch


@dataclass(frozen=True)
class Mode:
    name: str
    description: str
    compiler_module: str | None  # imported before anything else of the mode, on the compile clock
    compile: Callable  # (fn, dynamic) -> compiled fn; raises if the compiler is missing
    disable: Callable  # () -> the compiler's decorator that keeps a function out of its graphs
    has_disk_cache: bool  # a warm start (second process, same cache dir) means something


def _torch_mode(name: str, description: str, has_disk_cache: bool, **options) -> Mode:
    def compile(fn, dynamic=None):
        return torch.compile(fn, dynamic=dynamic, **options)
    return Mode(name, description, "torch._dynamo", compile, lambda: torch.compiler.disable, has_disk_cache)


def _fastcomp_mode(name: str, description: str, **options) -> Mode:
    def compile(fn, dynamic=None):
        import fastcomp
        return fastcomp.compile(fn, dynamic=dynamic, **options)

    def disable():
        import fastcomp
        return fastcomp.disable
    return Mode(name, description, "fastcomp", compile, disable, has_disk_cache=True)


def _eager_mode() -> Mode:
    return Mode("eager", "plain PyTorch", None, lambda fn, dynamic=None: fn, lambda: (lambda fn: fn), False)


MODES: dict[str, Mode] = {m.name: m for m in [
    _eager_mode(),
    _torch_mode("tc", "torch.compile()", True),
    _torch_mode("tc-ro", 'torch.compile(mode="reduce-overhead")', True, mode="reduce-overhead"),
    _torch_mode("tc-eager", 'torch.compile(backend="eager"): Dynamo capture only', False, backend="eager"),
    _fastcomp_mode("fc", "fastcomp.compile()"),
    _fastcomp_mode("fc-ro", 'fastcomp.compile(mode="reduce-overhead")', mode="reduce-overhead"),
]}


def graph_counts(mode: Mode) -> dict | None:
    """Graphs and graph breaks the compiler reports for this process, where it reports them."""
    if not mode.name.startswith("tc"):
        return None  # fastcomp has no counters API yet
    from torch._dynamo.utils import counters
    return {"graphs": int(counters["stats"]["unique_graphs"]),
            "graph_breaks": int(sum(counters["graph_break"].values()))}
