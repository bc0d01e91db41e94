"""Helpers for tests of code compiled with fastcomp."""
import struct

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


def elf_sections(elf: bytes, prefix: str = "") -> dict:
    """{name: bytes} of the sections of an ELF64 file (a cubin) whose names start with `prefix`; a cubin's machine
    code is in `.text.<kernel>`. Sections with no bytes in the file (SHT_NOBITS) map to b"". For comparing the
    machine code of two compiles (tests, scripts/nvrtc_compile_time.py)."""
    table, = struct.unpack_from("<Q", elf, 0x28)
    entry, count, names_at = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", elf, table + i * entry) for i in range(count)]
    names = headers[names_at][4]
    out = {}
    for name_at, kind, _, _, offset, size, *_ in headers:
        name = elf[names + name_at:elf.index(b"\0", names + name_at)].decode()
        if name.startswith(prefix):
            out[name] = b"" if kind == 8 else elf[offset:offset + size]  # 8: SHT_NOBITS
    return out
