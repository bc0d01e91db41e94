"""Guard and dispatch overhead: tiny functions whose cost is the compiler's per-call work.

`inputs{N}_entries{E}` adds N fp32 tensors of length 8+i (so the guards have N tensors to check) after E compiles
of E different lengths (so the cache holds E entries). Calls rotate through the E shapes: a cache kept in
most-recently-used order then checks the most entries on every call, the worst case. With one entry, calls
still rotate through a few sets of fresh tensors, so no per-object shortcut is timed. `graph_break` puts one
call to a function the compiler must leave out of its graph (`torch.compiler.disable` / `fastcomp.disable`)
between two tiny graphs. Compiles are static (`dynamic=False`) so that each shape really is its own entry.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

BASE_LENGTH = 8
MIN_SETS = 4


@dataclass(frozen=True)
class OverheadCase:
    id: str
    description: str
    n_inputs: int
    cache_entries: int
    graph_break: bool = False
    dynamic: bool = False

    def make(self, device: str | torch.device, disable: Callable) -> tuple[Callable, Callable[[], list]]:
        """(fn, make_input_sets): input tuples cycling through `cache_entries` shapes, at least MIN_SETS of them."""
        device = torch.device(device)
        fn = _function_with_one_break(disable()) if self.graph_break else add_inputs

        def make_input_sets():
            return [tuple(torch.randn(BASE_LENGTH + i % self.cache_entries, device=device)
                          for _ in range(self.n_inputs))
                    for i in range(max(MIN_SETS, self.cache_entries))]
        return fn, make_input_sets


def add_inputs(*xs):
    out = xs[0] + 1
    for x in xs[1:]:
        out = out + x
    return out


def _function_with_one_break(disable: Callable) -> Callable:
    @disable
    def scale_outside_graph(y):
        return y * 2

    def one_break(x):
        y = x + 1
        y = scale_outside_graph(y)
        return y - 1
    return one_break


OVERHEAD_CASES: dict[str, OverheadCase] = {c.id: c for c in [
    *(OverheadCase(f"inputs{n}_entries{e}", f"add {n} tensor inputs, {e} cache entries", n, e)
      for e in (1, 8) for n in (1, 8, 64)),
    OverheadCase("graph_break", "x + 1, a disabled function, - 1: one graph break", 1, 1, graph_break=True),
]}
