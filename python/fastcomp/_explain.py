"""fastcomp.explain(fn)(*args): compile afresh, run, and report graphs, ops, guards and graph breaks."""
import dataclasses

from fastcomp import _C, _events
from fastcomp.api import _runs_as, _target_code, _unwrap_compiled


@dataclasses.dataclass
class BreakReason:
    code: str          # stable id, e.g. "GB002"
    headline: str      # e.g. "data-dependent Python value"
    reason: str        # what exactly was not capturable
    user_loc: str      # "file.py:12", the innermost user frame
    source_line: str   # the user's line of code there
    hint: str          # what to change
    explanation: str = ""  # why a graph cannot hold it
    user_stack: list = dataclasses.field(default_factory=list)  # [("file.py:12", "source line")], outermost first
    resumed: bool = True   # False: the frame ran eagerly instead
    rest_in_cpython: str = ""  # set when the graph before the break ran and CPython ran the rest of the frame: why

    def __str__(self):
        lines = [f"{self.code} {self.headline}: {self.reason}"]
        for loc, line in self.user_stack or [(self.user_loc, self.source_line)]:
            lines.append(f"    at {loc}: {line}")
        lines.append(f"    hint: {self.hint}")
        if not self.resumed:
            lines.append("    (not resumed: the frame ran eagerly)")
        elif self.rest_in_cpython:
            lines.append(f"    (the graph before it ran; CPython ran the rest of the frame: {self.rest_in_cpython})")
        return "\n".join(lines)


@dataclasses.dataclass
class ExplainOutput:
    graphs: list
    graph_count: int
    graph_break_count: int
    break_reasons: list
    ops_per_graph: list
    out_guards: list
    compile_times: list  # seconds per compiled frame
    op_count: int = 0  # ops in all graphs, as torch._dynamo's ExplainOutput.op_count
    backends: list = dataclasses.field(default_factory=list)  # per graph: what runs it (kernels, cuBLAS, externs)
    order: list = dataclasses.field(default_factory=list)  # ("graph", i) / ("break", i) in program order

    def __str__(self):
        lines = [f"Graph Count: {self.graph_count}", f"Graph Break Count: {self.graph_break_count}",
                 f"Op Count: {self.op_count}"]
        order = self.order or ([("graph", i) for i in range(len(self.graphs))] +
                               [("break", i) for i in range(len(self.break_reasons))])
        for kind, i in order:
            if kind == "graph":
                backend = self.backends[i] if i < len(self.backends) else ""
                lines.append(f"Graph {i + 1} ({len(self.ops_per_graph[i])} ops)"
                             f"{', runs on ' + backend if backend else ''}:")
                lines.extend("  " + line for line in self.graphs[i].rstrip().splitlines())
            else:
                lines.append(f"Break Reason {i + 1}: {self.break_reasons[i]}")
        lines.append(f"Guards ({len(self.out_guards)}):")
        lines.extend("  " + g for g in self.out_guards)
        lines.append("Compile Times: " + ", ".join(f"{t * 1e3:.2f} ms" for t in self.compile_times))
        return "\n".join(lines)


def explain(fn, mode=None):
    """Returns a callable: ``fastcomp.explain(fn)(*args, **kwargs) -> ExplainOutput``. It runs `fn` once.

    ``mode="reduce-overhead"`` compiles as that mode does: ``backends`` then says per graph whether it will
    replay as a CUDA graph (``"+ CUDA graph"``: captured after one warm-up call) or why not. Captures, their pool
    sizes and fallbacks happen on later calls and are logged under ``FASTCOMP_LOGS=cudagraphs``.

    `fn` may be what ``fastcomp.compile`` returned: it reports on the function or module that was compiled, as
    ``fastcomp.explain`` of the original would, with the ``dynamic`` and ``mode`` it was compiled with (``mode``
    given here wins). For a compile with default options that is exactly the original's report.

    Every frame that runs is compiled afresh: the compiled function, the resume functions after its graph
    breaks, and the functions its CPython parts call. ``graph_count`` counts graphs with at least one op;
    ``graph_break_count`` counts breaks, each by the frame whose own code holds it (a break inside a helper
    also ends the caller's graph, but it is one break), so it is not ``graph_count - 1``.
    """

    fn, compiled_with = _unwrap_compiled(fn)
    runs_as = compiled_with["mode"] if compiled_with and mode is None else _runs_as(mode, None)
    dynamic = compiled_with["dynamic"] if compiled_with else None

    def run(*args, **kwargs):
        records = []
        target = _target_code(fn)
        dispatcher = _C.make_dispatcher(fn, target, False, dynamic, runs_as, "default", explain=True)
        with _events.subscribe(records.append):
            dispatcher(*args, **kwargs)
        graphs, ops, guards, times, breaks, order, backends = [], [], [], [], [], [], []
        for r in records:
            times.append(r["compile_time_s"])
            guards.extend(r["guards"])
            if r["graphs"]:
                order.append(("graph", len(graphs)))
                graphs.append(r["graph"])
                ops.append(r["ops"])
                backends.append(r.get("backend", ""))
            if r["breaks"]:
                order.append(("break", len(breaks)))
                breaks.append(BreakReason(r["break_code"], r["break_headline"], r["break_reason"], r["user_loc"],
                                          r["source_line"], r["break_hint"], r["break_explanation"],
                                          list(r["user_stack"]), r["resumed"], r.get("rest_in_cpython", "")))
        return ExplainOutput(graphs, len(graphs), len(breaks), breaks, ops, guards, times,
                             op_count=sum(len(graph_ops) for graph_ops in ops), backends=backends, order=order)

    return run
