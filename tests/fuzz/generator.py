"""Random programs over the op and Python-feature space fastcomp's tracer claims to support.

A grammar of statement kinds, each a small method returning source text. Types are tracked by running: every
statement is executed as it is chosen, in one namespace per step size (the first sizes and the new ones), so
operands are picked by their real dtype and shape and a statement that raises is mostly thrown away. A program
is deterministic for (seed, index).
"""
import random
import time
import warnings

import torch

from tests.fuzz.ops import (ATTENTION, BINARY, CASTS, COMBINE, FACTORIES, INDEX, MATMUL, REDUCE, SLICES, UNARY,
                            VIEW)
from tests.fuzz.program import HEADER, SYMBOLS, InputSpec, Program, Stmt


class Reject(Exception):
    """The chosen rule has no operands here; try another."""


MAX_NUMEL = 20000  # generated tensors stay small: the fuzzer is after semantics, not throughput


class Generator:
    def __init__(self, seed, index, device="cpu"):
        self.rng = random.Random(f"fastcomp-fuzz:{seed}:{index}")
        self.p = Program(seed=seed, index=index, device=device)
        self.dk = "" if device == "cpu" else ", device=DEVICE"
        self.names = []  # the live locals of fn, oldest first
        self.counter = 0
        self.ns = []
        self.uses_buf = False

    # ----- picking -----------------------------------------------------------------------------------------------

    def chance(self, p):
        return self.rng.random() < p

    def fresh(self, prefix="v"):
        self.counter += 1
        return f"{prefix}{self.counter}"

    def val(self, name):
        return self.ns[0][name]

    def live(self, pred):
        ns = self.ns[0]
        return [n for n in self.names if n in ns and pred(ns[n])]

    def recent(self, names):
        if not names:
            raise Reject
        if len(names) > 3 and self.chance(0.6):
            return self.rng.choice(names[-3:])
        return self.rng.choice(names)

    def tensor(self, pred=None):
        return self.recent(self.live(lambda v: isinstance(v, torch.Tensor) and (pred is None or pred(v))))

    def other_tensor(self, t, same_dtype=False):
        """A tensor that broadcasts with `t` (at the first sizes), else a scalar literal."""
        a = self.val(t)

        def fits(v):
            if not isinstance(v, torch.Tensor) or v.device != a.device or (same_dtype and v.dtype != a.dtype):
                return False
            try:
                torch.broadcast_shapes(a.shape, v.shape)
                return True
            except RuntimeError:
                return False

        names = self.live(fits)
        if names and self.chance(0.8):
            return self.recent(names)
        return self.rng.choice(["2", "0.5", "-1", "3", "1.5"] + ([self.int_expr()] if self.chance(0.3) else []))

    def dim(self, t, avoid=None):
        r = self.val(t).dim()
        if r == 0:
            return self.rng.choice([0, -1])
        choices = [d for d in range(-r, r) if avoid is None or d % r != avoid % r] or [0]
        return self.rng.choice(choices)

    def literal(self):
        return self.rng.choice(["0.5", "2", "-1", "1.5", "3", "0.25", "-0.75", "1"])

    def int_expr(self):
        ints = self.live(lambda v: type(v) is int and -20 < v < 20)
        tensors = self.live(lambda v: isinstance(v, torch.Tensor) and v.dim() > 0)
        r = self.rng.random()
        if ints and r < 0.35:
            n = self.recent(ints)
            return self.rng.choice([n, f"{n} + 1", f"max({n}, 1)", f"{n} // 2 + 1", f"abs({n})"])
        if tensors and r < 0.8:
            t = self.recent(tensors)
            d = self.dim(t)
            return self.rng.choice([f"{t}.shape[{d}]", f"{t}.size({d})", f"{t}.shape[{d}] + 1", f"len({t})",
                                    f"{t}.dim()", f"{t}.shape[{d}] // 2"])
        return str(self.rng.randint(1, 4))

    def fields(self, t):
        """Template fields for an operand `t`: dims, literals, a permutation, an int expression."""
        r = self.val(t).dim() if t else 0
        d = self.dim(t) if t else 0
        perm = list(range(r))
        self.rng.shuffle(perm)
        lo = self.rng.choice(["-1", "-0.5", "0"])
        return dict(t=t, d=d, d2=self.dim(t, avoid=d) if t else 0, a=self.literal(), lo=lo, hi="1", n=self.int_expr(),
                    m=self.int_expr(), perm=", ".join(map(str, perm)) if perm else "()", dk=self.dk)

    # ----- tensor expressions (pure: they create, never change) --------------------------------------------------

    def x_unary(self):
        kind, tmpl, need_float = self.rng.choice(UNARY)
        t = self.tensor((lambda v: v.is_floating_point()) if need_float else None)
        return "unary." + kind, tmpl.format(**self.fields(t))

    def x_binary(self):
        kind, tmpl = self.rng.choice(BINARY)
        t = self.tensor()
        return "binary." + kind, tmpl.format(t=t, o=self.other_tensor(t))

    def x_reduce(self):
        kind, tmpl, need_float = self.rng.choice(REDUCE)
        # torch's median along a dimension of an expanded tensor reads uninitialised memory (eager differs from
        # itself): it gets tensors without broadcast dimensions where generation can tell, and only its values are
        # used (an input expanded from size 1 has no stride 0 at generation sizes; the index among equal values
        # differed between two eager runs, seed 6 #48303).
        dense = (lambda v: 0 not in v.stride()) if kind == "median" else (lambda v: True)
        t = self.tensor((lambda v: v.is_floating_point() and dense(v)) if need_float else dense)
        return "reduce." + kind, tmpl.format(**self.fields(t))

    def x_view(self):
        kind, tmpl = self.rng.choice(VIEW)
        return "view." + kind, tmpl.format(**self.fields(self.tensor()))

    def x_slice(self):
        t = self.tensor(lambda v: v.dim() > 0)
        parts = [self.rng.choice(SLICES) for _ in range(self.rng.randint(1, max(1, self.val(t).dim())))]
        if self.chance(0.2):
            parts.insert(self.rng.randint(0, len(parts)), "...")
        n = self.int_expr()
        index = ", ".join(p.format(n=n) for p in parts)
        kind = "slice." + ("negative" if "-" in index else "step" if "::" in index else "basic")
        return kind, f"{t}[{index}]"

    def x_index(self):
        kind, tmpl = self.rng.choice(INDEX)
        t = self.tensor(lambda v: v.dim() > 0)
        f = self.fields(t)
        if "{m}" in tmpl:
            f["m"] = self.tensor(lambda v: v.dtype == torch.bool and v.shape == self.val(t).shape)
        if "{i}" in tmpl:
            f["i"] = self.tensor(lambda v: v.dtype == torch.int64)
        return "index." + kind, tmpl.format(**f)

    def x_cast(self):
        kind, tmpl = self.rng.choice(CASTS)
        t = self.tensor()
        return "cast." + kind, tmpl.format(t=t, o=self.tensor())

    def x_factory(self):
        kind, tmpl = self.rng.choice(FACTORIES)
        t = self.tensor() if "{t}" in tmpl else None
        return "factory." + kind, tmpl.format(**self.fields(t))

    def x_matmul(self):
        kind, tmpl = self.rng.choice(MATMUL)
        t = self.tensor(lambda v: v.is_floating_point() and v.dim() >= 1)
        a = self.val(t)
        o = self.tensor(lambda v: v.dtype == a.dtype and v.dim() >= 1 and (a.shape[-1] in v.shape))
        return "matmul." + kind, tmpl.format(t=t, o=o)

    def x_attention(self):
        kind, tmpl = self.rng.choice(ATTENTION)
        t = self.tensor(lambda v: v.is_floating_point() and v.dim() in (3, 4) and v.shape[-1] > 0)
        return "attention." + kind, tmpl.format(t=t)

    def x_combine(self):
        kind, tmpl = self.rng.choice(COMBINE)
        t = self.tensor()
        f = self.fields(t)
        f["o"] = self.tensor(lambda v: v.dim() == self.val(t).dim())
        if "{m}" in tmpl:
            f["m"] = self.tensor(lambda v: v.dtype == torch.bool)
        return "combine." + kind, tmpl.format(**f)

    def x_module(self):
        """A call of a small nn.Module submodule defined at module level."""
        mod = self.submodule()
        t = self.tensor(lambda v: v.is_floating_point())
        return "module." + mod[1], self.rng.choice([f"{mod[0]}({t})", f"{mod[0]}({t}) + {t}"])

    def x_helper(self):
        """A call of a small module-level helper function."""
        name, kind, call = self.helper()
        return "helper." + kind, call

    TENSOR_EXPRS = ((10, x_unary), (10, x_binary), (8, x_reduce), (9, x_view), (6, x_slice), (4, x_index), (3, x_cast),
                    (3, x_factory), (3, x_matmul), (3, x_combine), (2, x_module), (2, x_helper), (2, x_attention))

    def tensor_expr(self, families=None):
        table = [(w, f) for w, f in self.TENSOR_EXPRS if families is None or f.__name__ in families]
        for _ in range(20):
            f = self.rng.choices([f for _, f in table], [w for w, _ in table])[0]
            try:
                return f(self)
            except Reject:
                continue
        raise Reject

    # ----- module-level definitions (prelude) --------------------------------------------------------------------

    def add_prelude(self, kind, text):
        self.p.prelude.append(Stmt(kind, text))
        for ns in self.ns:
            if ns is not None:
                exec(text, ns)

    def submodule(self):
        existing = [s for s in self.p.prelude if s.kind.startswith("module.")]  # not "module_base"
        if existing and self.chance(0.5):
            s = self.rng.choice(existing)
            return s.text.split("\n")[-1].split(" =")[0], s.kind[len("module."):]
        name = f"sub{sum(1 for s in self.p.prelude if s.kind.startswith('module.'))}"
        cls = name.capitalize()
        style = self.rng.choice(["affine", "counter", "sequential", "training", "param_vector", "call_override",
                                 "super_method"])
        init = ["        super().__init__()", "        self.scale = torch.nn.Parameter(torch.tensor(1.5))"]
        if style == "affine":
            init.append('        self.register_buffer("shift", torch.tensor(0.25))')
            body = [f"        return {self.rng.choice(['torch.tanh(z)', 'z.relu()', 'z * z', 'F.gelu(z)'])} * self.scale + self.shift"]
        elif style == "counter":
            init.append("        self.calls = 0")
            body = ["        self.calls += 1", "        return z * self.scale + self.calls"]
        elif style == "sequential":
            init.append("        self.seq = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Dropout(0.0), torch.nn.Tanh())")
            body = ["        return self.seq(z) * self.scale"]
        elif style == "training":
            body = ["        if self.training:", "            return z * self.scale", "        return z - self.scale"]
        elif style == "param_vector":
            init.append("        self.bias = torch.nn.Parameter(torch.linspace(-1, 1, 1))")
            body = ["        return (z + self.bias).sigmoid() * self.scale"]
        elif style == "call_override":
            body = ["        return z * self.scale", "", "    def __call__(self, z):",
                    "        return super().__call__(z) + 1"]
        else:
            body = ["        return z * super().factor() + self.scale"]
        base = "torch.nn.Module"
        if style == "super_method":
            base = f"{cls}Base"
            self.add_prelude("module_base", f"class {base}(torch.nn.Module):\n    def factor(self):\n        return 2.0")
        text = "\n".join([f"class {cls}({base}):", "    def __init__(self):", *init, "",
                          "    def forward(self, z):", *body, "", "", f"{name} = {cls}().to(DEVICE)"])
        self.add_prelude("module." + style, text)
        return name, style

    def helper(self):
        """(name, kind, call text) of a helper function at module level, made for an operand here."""
        t = self.tensor()
        name = f"helper{sum(1 for s in self.p.prelude if s.kind.startswith('helper.'))}"
        style = self.rng.choice(["plain", "default_arg", "kwargs", "varargs", "tuple", "breaks", "nested", "box_varargs"])
        if style == "plain":
            text, call = f"def {name}(a, b):\n    return a * b + a", f"{name}({t}, {self.other_tensor(t)})"
        elif style == "default_arg":
            text, call = f"def {name}(a, scale=2):\n    return a * scale", f"{name}({t}, scale={self.int_expr()})"
        elif style == "kwargs":
            text = f"def {name}(a, **kwargs):\n    return a + kwargs.get('shift', 1)"
            call = f"{name}({t}, shift={self.literal()})"
        elif style == "varargs":
            text = f"def {name}(a, *args):\n    out = a\n    for x in args:\n        out = out + x\n    return out"
            call = f"{name}({t}, {self.other_tensor(t)}, 1)"
        elif style == "tuple":
            text, call = f"def {name}(a):\n    return a.sum(), a.shape", f"{name}({t})[0]"
        elif style == "breaks":
            self.need_buf()
            text = f"def {name}(a):\n    print('in {name}', a.shape, file=BUF)\n    return a + 1"
            call = f"{name}({t})"
        elif style == "nested":
            text = f"def {name}(a):\n    def inner(b):\n        return b * 2\n    return inner(a) + inner(1)"
            call = f"{name}({t})"
        else:
            self.need_buf()
            self.once("box", "class Box:\n    def __init__(self, t):\n        self.t = t")
            text = (f"def {name}_inner(a, box):\n    print('break', file=BUF)\n    return a + box.t\n\n\n"
                    f"def {name}(a, *args, **kwargs):\n    return {name}_inner(a, *args, **kwargs)")
            call = f"{name}({t}, Box({self.other_tensor(t)}))"
        self.add_prelude("helper." + style, text)
        return name, style, call

    def once(self, kind, text):
        """A module-level definition the program needs once (a class, a global)."""
        if not any(s.kind == kind for s in self.p.prelude):
            self.add_prelude(kind, text)

    def need_buf(self):
        if not self.uses_buf:
            self.uses_buf = True
            self.add_prelude("buf", "BUF = io.StringIO()")

    # ----- statements --------------------------------------------------------------------------------------------

    def s_assign(self):
        kind, expr = self.tensor_expr()
        return kind, f"{self.fresh()} = {expr}"

    def s_inplace(self):
        inputs = [i.name for i in self.p.inputs if i.kind == "tensor"]
        pool = inputs if inputs and self.chance(0.4) else None
        t = self.recent(self.live(lambda v: isinstance(v, torch.Tensor))) if pool is None else self.rng.choice(pool)
        if not isinstance(self.val(t), torch.Tensor):
            raise Reject
        f = self.fields(t)
        o = self.other_tensor(t)
        ops = [("add_", f"{t}.add_({o})"), ("mul_", f"{t}.mul_({f['a']})"), ("sub_", f"{t}.sub_(1)"),
               ("div_", f"{t}.div_(2)"), ("clamp_", f"{t}.clamp_(min={f['lo']})"), ("clamp_2", f"{t}.clamp_({f['lo']}, 1)"),
               ("zero_", f"{t}.zero_()"), ("fill_", f"{t}.fill_({f['a']})"), ("relu_", f"{t}.relu_()"),
               ("neg_", f"{t}.neg_()"), ("copy_", f"{t}.copy_({o})"), ("masked_fill_", f"{t}.masked_fill_({t} > 0, {f['a']})"),
               ("iadd", f"{t} += {o}"), ("imul", f"{t} *= {f['a']}"), ("isub", f"{t} -= {o}"),
               ("setitem", f"{t}[{self.index_text(t)}] = {self.rng.choice([f['a'], o])}"),
               ("setitem_add", f"{t}[{self.index_text(t)}] += {f['a']}"), ("setitem_mask", f"{t}[{t} > 0] = {f['a']}"),
               ("view_mul_", f"{t}[{self.index_text(t)}].mul_(2)"), ("select_add_", f"{t}.select({f['d']}, 0).add_(1)"),
               ("index_fill_", f"{t}.index_fill_({f['d']}, torch.tensor([0]{self.dk}), {f['a']})"),
               ("unsqueeze_", f"{t}.unsqueeze_(0)"), ("t_", f"{t}.t_()"), ("transpose_", f"{t}.transpose_(0, -1)"),
               ("squeeze_", f"{t}.squeeze_()"), ("sigmoid_", f"{t}.sigmoid_()"), ("exp_", f"{t}.exp_()"),
               ("resize_", f"{t} = {t}.clone()\n{t}.resize_({t}.numel() // 2)"),
               ("identity", f"{self.fresh('b')} = {t}.add_(1) is {t}")]
        kind, text = self.rng.choice(ops)
        return ("inplace_input." if t in inputs else "inplace.") + kind, text

    def index_text(self, t):
        r = max(1, self.val(t).dim())
        parts = [self.rng.choice([":", "0", "-1", "1:", "::2", ":-1", "..."]) for _ in range(self.rng.randint(1, r))]
        if parts.count("...") > 1:
            parts = [p for p in parts if p != "..."] or [":"]
        return ", ".join(parts)

    def s_python_int(self):
        t = self.tensor()
        d = self.dim(t)
        n = self.fresh("n")
        exprs = [f"{t}.shape[{d}]", f"{t}.size({d})", f"{t}.numel()", f"len({t})", f"{t}.dim()", f"{t}.ndim",
                 f"{self.int_expr()} * 2 + 1", f"max({self.int_expr()}, {self.int_expr()})", f"{self.int_expr()} % 3",
                 f"-{self.int_expr()}", f"sum({t}.shape)", f"math.prod({t}.shape)", f"{self.int_expr()} - {self.int_expr()}",
                 f"{t}.shape[-1] if {t}.dim() > 0 else 1", f"{self.int_expr()} // 2"]
        return "python.int", f"{n} = {self.rng.choice(exprs)}"

    def s_python_other(self):
        t = self.tensor()
        n = self.int_expr()
        d = self.dim(t)
        kinds = [("float", f"{n} / 2"), ("float", f"math.sqrt({n} + 1)"), ("float", f"float({n}) * 0.5"),
                 ("bool", f"{t}.shape[{d}] > 3"), ("bool", f"{t}.is_contiguous()"), ("bool", f"{t}.is_floating_point()"),
                 ("bool", f"{t}.dtype == torch.float32"), ("bool", f"isinstance({t}, torch.Tensor)"),
                 ("size", f"{t}.shape"), ("size", f"{t}.size()"), ("size", f"{t}.shape[1:]"), ("size", f"tuple({t}.shape)"),
                 ("size", f"list({t}.shape)"), ("size", f"{t}.shape + (1,)"), ("size", f"torch.Size([{n}, 2])"),
                 ("stride", f"{t}.stride()"), ("divmod", f"divmod({n}, 2)"), ("chained", f"1 < {n} <= 5"),
                 ("and_or", f"{t}.dim() > 1 and {t}.shape[0] > 2 or {n}"), ("round", f"round({n} / 3, 2)"), ("dtype", f"{t}.dtype"), ("str", f"f'{{{n}}}-{{{t}.dim()}}'"),
                 ("str", f"str({t}.shape)"), ("type", f"type({t}).__name__"), ("device", f"{t}.device.type")]
        kind, expr = self.rng.choice(kinds)
        return "python." + kind, f"{self.fresh('p')} = {expr}"

    def s_container(self):
        t = self.tensor()
        o = self.other_tensor(t)
        lists = self.live(lambda v: type(v) is list)
        tensor_lists = self.live(lambda v: type(v) is list and v and all(isinstance(x, torch.Tensor) for x in v))
        dicts = self.live(lambda v: type(v) is dict)
        tuples = self.live(lambda v: type(v) is tuple and len(v) == 2)
        v = self.fresh("c")
        ops = [("list", f"{v} = [{t}, {o}]"), ("tuple", f"{v} = ({t}, {self.int_expr()})"),
               ("dict", f"{v} = {{'a': {t}, 'b': {self.int_expr()}}}"),
               ("listcomp", f"{v} = [{t} * i for i in range({self.rng.randint(1, 3)})]"),
               ("dictcomp", f"{v} = {{f'k{{i}}': {t} + i for i in range(2)}}"),
               ("tensor_key", f"{v} = {{{t}: 3}}\n{self.fresh()} = {t} + {v}[{t}]"),
               ("extend_map", f"{v} = [{t}]\n{v}.extend(map(lambda i: {v}[-1] + i, range(3)))"),
               ("sum_start", f"{v} = sum([{t}, 1.5, 2], start={self.literal()})"),
               ("sorted", f"{v} = sorted({t}.shape, reverse=True)"),
               ("namedtuple", f"{v} = Pair({t}, {self.int_expr()})")]
        pairs = self.live(lambda x: type(x).__name__ == "Pair")
        if pairs:
            P = self.recent(pairs)
            ops += [("namedtuple_attr", f"{v} = {P}.a * {P}.b"), ("namedtuple_asdict", f"{v} = {P}._asdict()"),
                    ("namedtuple_hasattr", f"{v} = {t} + 1 if hasattr({P}, '_fields') else {t} - 1"),
                    ("namedtuple_replace", f"{v} = {P}._replace(b=0)")]
        if lists:
            L = self.recent(lists)
            ops += [("append", f"{L}.append({t})"), ("extend", f"{L}.extend([{t}, {o}])"), ("insert", f"{L}.insert(0, {t})"),
                    ("pop", f"{v} = {L}.pop()"), ("last", f"{v} = {L}[-1]"), ("reverse", f"{v} = {L}[::-1]"),
                    ("len", f"{v} = len({L})"), ("to_tuple", f"{v} = tuple({L})"), ("star", f"{v}, *rest = {L}")]
        if tensor_lists:
            L = self.recent(tensor_lists)
            ops += [("sum", f"{v} = sum({L})"), ("stack", f"{v} = torch.stack({L})"), ("cat", f"{v} = torch.cat({L})"),
                    ("map", f"{v} = list(map(lambda z: z * 2, {L}))"), ("comp", f"{v} = [z + 1 for z in {L}]"),
                    ("zip", f"{v} = [a * i for i, a in enumerate({L})]")]
        if dicts:
            D = self.recent(dicts)
            ops += [("setitem", f"{D}['c'] = {t}"), ("getitem", f"{v} = {D}['a']"), ("get", f"{v} = {D}.get('a')"),
                    ("get_default", f"{v} = {D}.get('zz', {t})"), ("update", f"{D}.update(d={t})"),
                    ("contains", f"{v} = 'a' in {D}"), ("keys", f"{v} = list({D}.keys())"),
                    ("items", f"{v} = [k for k, _ in {D}.items()]"), ("len", f"{v} = len({D})"),
                    ("values_view", f"{v} = {D}.values()\n{D}['new'] = {t}\n{v} = len({v})")]
        if tuples:
            T = self.recent(tuples)
            ops += [("unpack", f"{v}, {self.fresh('c')} = {T}"), ("index", f"{v} = {T}[0]")]
        kind, text = self.rng.choice(ops)
        if kind == "namedtuple":
            self.once("namedtuple", "import collections\nPair = collections.namedtuple('Pair', 'a b')")
        return "container." + kind, text

    def s_if_shape(self):
        t = self.tensor()
        d = self.dim(t)
        ints = self.live(lambda v: type(v) is int)
        conds = [f"{t}.shape[{d}] > {self.rng.randint(1, 5)}", f"{t}.dim() == {self.val(t).dim()}",
                 f"{t}.numel() > {self.rng.randint(2, 20)}", f"{t}.is_contiguous()", f"{t}.dtype == torch.float32",
                 f"{t}.size({d}) == 1", f"{t}.numel() == 0"]
        if ints:
            conds.append(f"{self.recent(ints)} % 2 == 0")
        return "control.if_shape", self.branches(self.rng.choice(conds))

    def s_if_data(self):
        t = self.tensor()
        conds = [f"{t}.sum() > 0", f"({t} > 0).any()", f"{t}.float().mean() < 0", f"bool({t}.all())",
                 f"{t}.sum().item() > 0", f"{t}.max() > 0.5" if self.val(t).numel() else f"{t}.sum() >= 0"]
        return "break.if_data", self.branches(self.rng.choice(conds))

    def branches(self, cond):
        """An if/else whose branches both assign the same new name (checked on their own before)."""
        v = self.fresh()
        then = self.checked_expr()
        other = self.checked_expr()
        return f"if {cond}:\n    {v} = {then}\nelse:\n    {v} = {other}"

    def checked_expr(self):
        """A tensor expression that runs at every size being tracked (it may sit in a branch not taken)."""
        for _ in range(10):
            try:
                _, expr = self.tensor_expr(("x_unary", "x_binary", "x_reduce", "x_view", "x_slice", "x_cast"))
            except Reject:
                continue
            if all(self.evaluates(ns, expr) for ns in self.ns if ns is not None):
                return expr
        raise Reject

    def evaluates(self, ns, expr):
        try:
            v = eval(expr, dict(ns))
            return not isinstance(v, torch.Tensor) or v.numel() <= MAX_NUMEL
        except Exception:  # noqa: BLE001
            return False

    def s_loop(self):
        t = self.tensor()
        acc = self.fresh("acc")
        n = self.rng.choice([str(self.rng.randint(1, 4)), f"{t}.shape[0]" if self.val(t).dim() else "2",
                             f"min({self.int_expr()}, 3)"])
        lists = self.live(lambda v: type(v) is list and v and all(isinstance(x, torch.Tensor) for x in v))
        forms = [("range", f"{acc} = {t} * 0\nfor i in range({n}):\n    {acc} = {acc} + {t} * i"),
                 ("range_inplace", f"{acc} = torch.zeros_like({t})\nfor i in range({n}):\n    {acc} += {t}"),
                 ("range_list", f"{acc} = []\nfor i in range({n}):\n    {acc}.append({t} + i)"),
                 ("while", f"{acc} = {t}\nj = {n}\nwhile j > 1:\n    j = j // 2\n    {acc} = {acc} * 2"),
                 ("rows", f"{acc} = 0\nfor row in {t}:\n    {acc} = {acc} + row.sum()" if self.val(t).dim() else
                  f"{acc} = {t}"),
                 ("break_in_loop", f"{acc} = {t}\nfor i in range(2):\n    {acc} = {acc} + 1\n    if i == {n}:\n        break")]
        if lists:
            L = self.recent(lists)
            forms.append(("over_list", f"{acc} = 0\nfor z in {L}:\n    {acc} = {acc} + z.sum()"))
            forms.append(("enumerate", f"{acc} = 0\nfor i, z in enumerate({L}):\n    {acc} = {acc} + z * i"))
        kind, text = self.rng.choice(forms)
        return "control.loop_" + kind, text

    def s_try(self):
        t = self.tensor()
        v = self.fresh()
        k = self.rng.randint(2, 7)
        forms = [("view", f"try:\n    {v} = {t}.view(-1, {k})\nexcept RuntimeError:\n    {v} = {t}.reshape(-1)"),
                 ("index", f"try:\n    {v} = {t}[{k}]\nexcept IndexError:\n    {v} = {t}"),
                 ("broadcast", f"try:\n    {v} = {t} + {self.tensor()}\nexcept RuntimeError:\n    {v} = {t}"),
                 ("raise", f"try:\n    raise ValueError({t}.shape[0] if {t}.dim() else 0)\nexcept ValueError as e:\n    {v} = {t} + e.args[0]")]
        kind, text = self.rng.choice(forms)
        return "control.try_" + kind, text

    def s_grad_mode(self):
        v = self.fresh()
        mode = self.rng.choice(["no_grad", "enable_grad"])
        return "control." + mode, f"with torch.{mode}():\n    {v} = {self.checked_expr()}"

    def s_autocast(self):
        """An autocast block: matrix products and attention cast to bf16, the rest as the device's lists say; some
        nest a block that turns it off again."""
        families = ("x_matmul", "x_attention", "x_binary", "x_reduce", "x_unary", "x_combine")
        v, form = self.fresh(), self.rng.choice(["bf16", "bf16", "off", "nested"])
        if form == "off":
            return "control.autocast_off", f"with torch.autocast(DEVICE, enabled=False):\n    {v} = {self.tensor_expr(families)[1]}"
        text = f"with torch.autocast(DEVICE, dtype=torch.bfloat16):\n    {v} = {self.tensor_expr(families)[1]}"
        if form == "nested":
            w = self.fresh()
            text += f"\n    with torch.autocast(DEVICE, enabled=False):\n        {w} = {self.tensor_expr(families)[1]}"
        return "control.autocast_" + form, text

    def s_raise(self):
        t = self.tensor()
        return "control.raise", f"if {t}.shape[0] > {self.rng.randint(3, 8)} if {t}.dim() else False:\n    raise ValueError('too big')"

    def s_closure(self):
        t = self.tensor()
        g, v = self.fresh("g"), self.fresh()
        c = self.other_tensor(t)
        body = self.rng.choice(["z * 2 + {c}", "z.relu() - {c}", "(z + {c}).sum({d})", "z[..., :1] * {c}"]).format(
            c=c, d=self.dim(t))
        forms = [("def", f"def {g}(z):\n    return {body}\n{v} = {g}({t})"),
                 ("lambda", f"{g} = lambda z: {body}\n{v} = {g}({t})"),
                 ("lambda_inline", f"{v} = (lambda z: {body})({t})"),
                 ("default_arg", f"def {g}(z, k={self.int_expr()}):\n    return z * k\n{v} = {g}({t})"),
                 ("late_binding", f"def {g}():\n    return {t} + 1\n{t} = {t} * 2\n{v} = {g}()"),
                 ("nested", f"def {g}(z):\n    def h(w):\n        return w + {c}\n    return h(z) * 2\n{v} = {g}({t})")]
        kind, text = self.rng.choice(forms)
        return "closure." + kind, text

    def s_random(self):
        t = self.tensor()
        f = self.fields(t)
        v = self.fresh("r")
        seed = f"torch.manual_seed({self.rng.randint(0, 99)})\n" if self.chance(0.75) else ""
        ops = [("rand", f"torch.rand({f['n']}, {f['m']}{self.dk})"), ("randn_like", f"torch.randn_like({t}.float())"),
               ("randint", f"torch.randint(0, 10, ({f['n']},){self.dk})"), ("randperm", f"torch.randperm({f['n']}{self.dk})"),
               ("dropout", f"F.dropout({t}.float(), 0.5)"), ("bernoulli", f"torch.bernoulli(torch.full_like({t}, 0.5, dtype=torch.float32))"),
               ("noise", f"{t} + torch.randn({t}.shape{self.dk})"), ("rand_like_mask", f"torch.rand_like({t}, dtype=torch.float32) < 0.5"),
               ("normal", f"torch.normal(0.0, 1.0, ({f['n']},){self.dk})")]
        kind, expr = self.rng.choice(ops)
        return ("random." if seed else "random_unseeded.") + kind, f"{seed}{v} = {expr}"

    def s_break(self):
        t = self.tensor()
        v = self.fresh("b")
        self.need_buf()
        ops = [("print", f"print({t}, file=BUF)"), ("print_local", f"buf = io.StringIO()\nprint({t}, {t}.shape, file=buf)\n{v} = buf.getvalue()"), ("print_shape", f"print({t}.shape, {t}.dtype, file=BUF)"),
               ("item", f"{v} = {t}.sum().item()"), ("item_max", f"{v} = {t}.float().max().item()"),
               ("tolist", f"{v} = {t}.tolist()"), ("float", f"{v} = float({t}.float().mean())"),
               ("int_argmax", f"{v} = int({t}.argmax())" if self.val(t).numel() else f"{v} = int({t}.numel())"),
               ("bool", f"{v} = bool(({t} > 0).any())"), ("str", f"{v} = str({t})"),
               ("global_append", f"LOG.append({t}.sum())")]
        if self.p.device == "cpu":
            ops.append(("numpy", f"{v} = torch.from_numpy({t}.detach().numpy() * 2)"))
        kind, text = self.rng.choice(ops)
        if kind == "global_append":
            self.once("log", "LOG = []")
        return "break." + kind, text

    def s_del(self):
        names = [n for n in self.names[:-1] if n not in {i.name for i in self.p.inputs}]
        if not names:
            raise Reject
        return "python.del", f"del {self.rng.choice(names)}"

    STATEMENTS = ((30, s_assign), (8, s_inplace), (4, s_python_int), (4, s_python_other), (5, s_container),
                  (3, s_if_shape), (2, s_if_data), (3, s_loop), (1, s_try), (1, s_grad_mode), (3, s_closure),
                  (2, s_random), (4, s_break), (1, s_del), (0.3, s_raise), (1.5, s_autocast))

    # ----- running what is generated ------------------------------------------------------------------------------

    def namespace(self, k):
        ns = {"__name__": "fuzz_gen"}
        # Statements are tried on the CPU whatever the program's device: an index out of range is an IndexError
        # there, while on CUDA it is a device-side assert that ends the generating process's CUDA context.
        exec(HEADER.format(device="cpu"), ns)
        for s in self.p.prelude:
            exec(s.text, ns)
        exec(self.p.make_inputs_text(), ns)
        args, _ = ns["make_inputs"](self.p.sizes[k], 1, {}, False)
        for spec, a in zip(self.p.inputs, args):
            ns[spec.name] = a
        for s in self.p.body:
            exec(s.text, ns)
        return ns

    def rebuild(self, alive):
        torch.manual_seed(0)
        self.ns = [self.namespace(k) if ok else None for k, ok in enumerate(alive)]

    def accept(self, kind, text):
        """Runs a statement at every tracked size; keeps it if it runs at the first sizes. Returns whether kept."""
        alive = [ns is not None for ns in self.ns]
        before = set(self.ns[0])
        for k, ns in enumerate(self.ns):
            if ns is None:
                continue
            try:
                start = time.perf_counter()
                exec(text, ns)
                if time.perf_counter() - start > 0.5 or any(
                        isinstance(v, torch.Tensor) and v.numel() > MAX_NUMEL for v in ns.values()):
                    raise Reject
            except (Exception, Reject) as e:  # noqa: BLE001 - eager refused it: not a statement for this program
                # Keep a few that raise at a new size: then compiled must raise too (on CUDA not a bad index, which
                # asserts on the device instead of raising).
                if k > 0 and self.chance(0.1) and not (self.p.device != "cpu" and isinstance(e, IndexError)):
                    alive[k] = False
                    continue
                self.rebuild(alive)
                return False
        self.p.body.append(Stmt(kind, text))
        if not all(alive):
            self.rebuild(alive)
        deleted = {n for n in self.names if n not in self.ns[0]}
        self.names = [n for n in self.names if n not in deleted]
        new = (set(self.ns[0]) - before) - {"rest", "j", "row", "i", "z", "e", "buf"}
        self.names += sorted(n for n in new if not n.startswith("_"))  # not __warningregistry__ and such
        return True

    # ----- the whole program --------------------------------------------------------------------------------------

    def make_inputs(self):
        rng = self.rng
        symbols = list(SYMBOLS[:rng.randint(1, 3)])
        base = [rng.choice(symbols) if rng.random() < 0.65 else rng.choice([1, 2, 3, 4]) for _ in range(rng.randint(1, 4))]
        dtypes = ["float32"] * 10 + ["float64"] * 2 + ["int64"] * 3 + ["bool"] + ["float16"] * 2
        for i in range(rng.choice([1, 1, 2, 2, 2, 3])):
            rank = rng.randint(0, len(base))
            dims = tuple(1 if rng.random() < 0.15 else d for d in base[len(base) - rank:])
            layouts = [("contiguous",)] * 6
            if rank >= 1:
                layouts += [("step", rng.randrange(rank)), ("offset", rng.randrange(rank)), ("expand", rng.randrange(rank))]
            if rank >= 2:
                a, b = rng.sample(range(rank), 2)
                layouts += [("transpose", min(a, b), max(a, b))] * 2
            if rank >= 3:
                perm = list(range(rank))
                rng.shuffle(perm)
                layouts.append(("permute", tuple(perm)))
            self.p.inputs.append(InputSpec(f"x{i}" if i else "x", "tensor", dims, rng.choice(dtypes), rng.choice(layouts)))
        if rng.random() < 0.15:
            self.p.inputs.append(InputSpec("k", "int"))
        if rng.random() < 0.08:
            self.p.inputs.append(InputSpec("alpha", "float"))
        first = {s: rng.choice([2, 3, 4, 5, 6, 7]) if rng.random() < 0.85 else rng.choice([0, 1, 1]) for s in SYMBOLS}
        changed = [s for s in symbols if rng.random() < 0.5] or [rng.choice(symbols)]
        new1 = dict(first, **{s: rng.choice([v for v in range(2, 10) if v != first[s]]) for s in changed})
        new2 = dict(new1, **{s: rng.choice([0, 1, 1] if rng.random() < 0.3 else
                                           [v for v in range(2, 10) if v not in (first[s], new1[s])]) for s in changed})
        self.p.sizes = [first, new1, new2]
        floats = [i for i in self.p.inputs if i.kind == "tensor" and i.dtype.startswith("float")]
        for i in self.p.inputs:
            if i.kind == "tensor" and rng.random() < 0.6:
                swap = {"float32": ["float64", "float16", "bfloat16"], "float64": ["float32"], "float16": ["float32"],
                        "int64": ["int32", "float32"], "bool": ["int64"]}[i.dtype]
                self.p.new_dtypes[i.name] = rng.choice(swap)
        self.p.grad = bool(floats) and all(i.dtype in ("float32", "float64") for i in floats)
        self.names = [i.name for i in self.p.inputs]

    def returns(self):
        rng = self.rng
        names = [n for n in self.names if not callable(self.ns[0].get(n)) or isinstance(self.ns[0].get(n), torch.Tensor)]
        if not names:
            return
        count = min(len(names), rng.choice([1, 1, 2, 2, 3, 4]))
        recent = names[-4:]
        picked = []
        for _ in range(count):
            n = rng.choice(recent if rng.random() < 0.7 else names)
            if n not in picked:
                picked.append(n)
        if self.uses_buf and rng.random() < 0.5:
            picked.append("BUF.getvalue()")
        self.p.returns = picked
        self.p.ret_form = rng.choice(["single", "tuple", "tuple", "list", "dict"])

    def generate(self):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.make_inputs()
            self.rebuild([True, True])
            length = self.rng.randint(2, 12)
            rules = [f for _, f in self.STATEMENTS]
            weights = [w for w, _ in self.STATEMENTS]
            attempts = 0
            while len(self.p.body) < length and attempts < 8 * length:
                attempts += 1
                try:
                    kind, text = self.rng.choices(rules, weights)[0](self)
                except Reject:
                    continue
                self.accept(kind, text)
            if self.rng.random() < 0.03:
                self.raising_statement()
            self.returns()
        return self.p

    def raising_statement(self):
        """Ends the program with a statement eager raises on: compiled must raise the same type."""
        for _ in range(20):
            try:
                kind, expr = self.tensor_expr()
            except Reject:
                return
            try:
                eval(expr, dict(self.ns[0]))
            except Exception:  # noqa: BLE001
                self.p.body.append(Stmt("raises." + kind, f"{self.fresh()} = {expr}"))
                return


def generate(seed, index, device="cpu"):
    """The program `index` of the run with `seed`."""
    return Generator(seed, index, device).generate()
