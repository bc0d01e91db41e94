"""fastcomp.explain(fn)(*args): compile afresh, run, and report graphs, ops, guards and graph breaks."""
import dataclasses
import inspect

import torch

from fastcomp import _C, _events
from fastcomp.api import _target_code


@dataclasses.dataclass
class BreakReason:
    code: str          # stable id, e.g. "GB002"
    headline: str      # e.g. "data-dependent Python value"
    reason: str        # what exactly was not capturable
    user_loc: str      # "file.py:12"
    source_line: str   # the user's line of code
    hint: str          # what to change

    def __str__(self):
        return f"{self.code} {self.headline}: {self.reason}\n    at {self.user_loc}: {self.source_line}\n    hint: {self.hint}"


@dataclasses.dataclass
class ExplainOutput:
    graphs: list
    graph_count: int
    graph_break_count: int
    break_reasons: list
    ops_per_graph: list
    out_guards: list
    compile_times: list  # seconds per compiled frame
    backends: list = dataclasses.field(default_factory=list)  # per graph: what runs it (kernels, cuBLAS, externs)

    def __str__(self):
        lines = [f"Graph Count: {self.graph_count}", f"Graph Break Count: {self.graph_break_count}",
                 f"Op Count: {sum(len(ops) for ops in self.ops_per_graph)}"]
        if self.break_reasons:
            lines.append("Break Reasons:")
            for i, b in enumerate(self.break_reasons, 1):
                lines.append(f"  Break Reason {i}: {b}")
        for i, (graph, ops) in enumerate(zip(self.graphs, self.ops_per_graph), 1):
            backend = self.backends[i - 1] if i <= len(self.backends) else ""
            lines.append(f"Graph {i} ({len(ops)} ops){', runs on ' + backend if backend else ''}:")
            lines.extend("  " + line for line in graph.rstrip().splitlines())
        lines.append(f"Guards ({len(self.out_guards)}):")
        lines.extend("  " + g for g in self.out_guards)
        lines.append("Compile Times: " + ", ".join(f"{t * 1e3:.2f} ms" for t in self.compile_times))
        return "\n".join(lines)


def explain(fn):
    """Returns a callable: ``fastcomp.explain(fn)(*args, **kwargs) -> ExplainOutput``. It runs `fn` once."""

    def run(*args, **kwargs):
        records = []
        target = _target_code(fn)
        dispatcher = _C.make_dispatcher(fn, target, False, None, "default", "default", explain=True)
        with _events.subscribe(records.append):
            dispatcher(*args, **kwargs)
        graphs, ops, guards, times, breaks, backends = [], [], [], [], [], []
        for r in records:
            times.append(r["compile_time_s"])
            guards.extend(r["guards"])
            if r["status"] == "compiled":
                graphs.append(r["graph"])
                ops.append(r["ops"])
                backends.append(r.get("backend", ""))
            elif r["status"] == "unsupported":
                breaks.append(BreakReason(r["break_code"], r["break_headline"], r["break_reason"], r["user_loc"],
                                          r["source_line"], r["break_hint"]))
        return ExplainOutput(graphs, len(graphs), len(breaks), breaks, ops, guards, times, backends)

    return run
