"""A generated program as data: its pieces (so the minimizer can drop them) and the source text they render to.

The rendered source defines `fn(<inputs>)` and `make_inputs(sizes, seed, dtypes, grad)`, which builds the inputs
from the size symbols (`N`, `M`, `K`) of one step: the same text runs in the worker, in the generator's checks
and in a repro file.
"""
import dataclasses
import textwrap

HEADER = """\
import io
import math
import torch
import torch.nn.functional as F
DEVICE = {device!r}
"""

# Size symbols of the inputs' dimensions: a step gives each a value, a new-size step changes some of them.
SYMBOLS = ("N", "M", "K")


@dataclasses.dataclass
class InputSpec:
    name: str
    kind: str = "tensor"  # "tensor", "int" or "float"
    dims: tuple = ()  # each a size symbol ("N") or a fixed int
    dtype: str = "float32"
    layout: tuple = ("contiguous",)  # ("transpose", i, j), ("step", i), ("offset", i), ("expand", i), ("permute", p)

    def creation(self):
        """Source of the expression that builds this input inside make_inputs."""
        if self.kind == "int":
            return "2 + seed % 3"
        if self.kind == "float":
            return "0.5 + seed % 4 / 4"
        dims = [str(d) for d in self.dims]
        how = self.layout[0]
        if how == "transpose":
            i, j = self.layout[1:]
            dims[i], dims[j] = dims[j], dims[i]
        elif how == "permute":
            perm = self.layout[1]
            made = [None] * len(dims)
            for k, p in enumerate(perm):  # made.permute(perm) has dims[k] at k: made[perm[k]] = dims[k]
                made[p] = dims[k]
            dims = made
        elif how == "step":
            dims[self.layout[1]] = f"{dims[self.layout[1]]} * 2"
        elif how == "offset":
            dims[self.layout[1]] = f"{dims[self.layout[1]]} + 1"
        elif how == "expand":
            dims[self.layout[1]] = "1"
        text = f'new(dtypes.get("{self.name}", torch.{self.dtype}){"".join(", " + d for d in dims)})'
        if how == "transpose":
            text += f".transpose({self.layout[1]}, {self.layout[2]})"
        elif how == "permute":
            text += f".permute{tuple(self.layout[1])}"
        elif how in ("step", "offset"):
            index = ", ".join([":"] * self.layout[1] + ["::2" if how == "step" else "1:"])
            text += f"[{index}]"
        elif how == "expand":
            text += f".expand({', '.join(str(d) for d in self.dims)})"
        return text


MAKE_INPUTS = '''
def make_inputs(sizes, seed, dtypes={{}}, grad=False):
    g = torch.Generator().manual_seed(seed)
    leaves = []

    def new(dtype, *shape):
        if dtype.is_floating_point:
            t = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
        elif dtype == torch.bool:
            t = torch.rand(shape, generator=g) > 0.5
        else:
            t = torch.randint(-4, 9, shape, generator=g).to(dtype)
        t = t.to(DEVICE)
        if grad and dtype.is_floating_point:
            leaves.append(t.requires_grad_())
            t = t.clone()
        return t

{body}
    return [{names}], leaves
'''


@dataclasses.dataclass
class Stmt:
    kind: str  # the grammar rule that made it, e.g. "reduce.softmax"; minimized programs are signed by these
    text: str


@dataclasses.dataclass
class Program:
    seed: int
    index: int
    device: str = "cpu"
    inputs: list = dataclasses.field(default_factory=list)
    prelude: list = dataclasses.field(default_factory=list)  # module-level Stmts: helpers, submodules, buffers
    body: list = dataclasses.field(default_factory=list)
    returns: list = dataclasses.field(default_factory=list)  # expressions
    ret_form: str = "tuple"  # "single", "tuple", "list" or "dict"
    sizes: list = dataclasses.field(default_factory=list)  # [first, new size, new size 2]: {symbol: size}
    new_dtypes: dict = dataclasses.field(default_factory=dict)
    grad: bool = False  # whether a variant with inputs that require grad runs
    steps_override: dict = None  # {variant name: steps} once the minimizer has cut the steps

    def copy(self, **changes):
        return dataclasses.replace(self, **changes)

    def kinds(self):
        """The grammar rules this program is made of (a minimized program's kinds sign its failure)."""
        kinds = {s.kind for s in self.body} | {s.kind for s in self.prelude if s.kind != "buf"}
        return sorted(kinds | ({"return.buffer"} if any("BUF" in r for r in self.returns) else set()))

    def return_text(self):
        rs = self.returns
        if not rs:
            return "return None"
        if self.ret_form == "single" or len(rs) == 1 and self.ret_form != "list":
            return f"return {rs[0]}"
        if self.ret_form == "list":
            return f"return [{', '.join(rs)}]"
        if self.ret_form == "dict":
            return "return {" + ", ".join(f'"r{i}": {r}' for i, r in enumerate(rs)) + "}"
        return f"return {', '.join(rs)}"

    def fn_text(self):
        params = ", ".join(i.name for i in self.inputs)
        body = "".join(textwrap.indent(s.text.rstrip() + "\n", "    ") for s in self.body)
        return f"def fn({params}):\n{body}    {self.return_text()}\n"

    def make_inputs_text(self):
        used = sorted({d for i in self.inputs for d in i.dims if isinstance(d, str)})
        lines = []
        if used:
            lines.append(f"    {', '.join(used)} = {', '.join(f'sizes[{s!r}]' for s in used)}")
        lines += [f"    {i.name} = {i.creation()}" for i in self.inputs]
        return MAKE_INPUTS.format(body="\n".join(lines), names=", ".join(i.name for i in self.inputs))

    def source(self):
        prelude = "".join(s.text.rstrip() + "\n\n" for s in self.prelude)
        return HEADER.format(device=self.device) + "\n" + prelude + "\n" + self.fn_text() + self.make_inputs_text()

    def variants(self):
        """[(name, dynamic, steps)]: the calls each compiled version of fn gets, compared with eager one by one."""
        s = 1000 * self.index + 7
        first, new1, new2 = self.sizes

        def step(name, sizes, seed, dtypes=None, grad=False):
            return {"name": name, "sizes": dict(sizes), "seed": seed, "dtypes": dict(dtypes or {}), "grad": grad}

        auto = [step("first", first, s), step("same inputs again", first, s), step("new values", first, s + 1),
                step("new size", new1, s + 2), step("new size again", new2, s + 3)]
        if self.new_dtypes:
            auto.append(step("new dtype", first, s + 4, self.new_dtypes))
        out = [("auto", None, auto),
               ("dynamic", True, [step("first", first, s), step("new size", new1, s + 2),
                                  step("new size again", new2, s + 3)])]
        if self.grad:
            out.append(("grad", None, [step("first", first, s, grad=True), step("new values", first, s + 1, grad=True),
                                       step("new size", new1, s + 2, grad=True)]))
        if self.steps_override is not None:
            out = [(n, d, self.steps_override[n]) for n, d, _ in out if n in self.steps_override]
        return out
