"""Helpers for tests of code compiled with fastcomp."""
from fastcomp import _events


class CompileCounter:
    """Counts compiles while active::

        with CompileCounter() as cc:
            f(x)
        assert cc.frame_count == 1 and cc.graph_count == 1 and cc.break_count == 0
    """

    def __init__(self):
        self.records = []
        self._ctx = None

    def __enter__(self):
        self._ctx = _events.subscribe(self.records.append)
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc):
        return self._ctx.__exit__(*exc)

    @property
    def frame_count(self):
        """Compiles of frames (including ones that ended up running eagerly)."""
        return len(self.records)

    @property
    def graph_count(self):
        """Graphs with at least one op (a graph break ends one graph; the code after it starts another)."""
        return sum(r["graphs"] for r in self.records)

    @property
    def break_count(self):
        """Graph breaks, each counted by the frame whose own code holds it (see fastcomp.explain)."""
        return sum(r["breaks"] for r in self.records)

    @property
    def recompile_reasons(self):
        return [reason for r in self.records for reason in r["recompile_reasons"]]
