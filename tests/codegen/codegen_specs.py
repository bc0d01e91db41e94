"""Kernel specs for the emitter tests (the dicts `_testing.emit_kernel` takes), the seed workloads' fused
kernels written as the lowering pass would write them, and a torch evaluator of a spec for the GPU tests."""


def contiguous(shape):
    strides, step = [], 1
    for n in reversed(shape):
        strides.insert(0, step)
        step *= n
    return strides


class Spec:
    """Builds one kernel spec; every method that makes an expression returns its index."""

    def __init__(self, name, shape, kind="pointwise", reduced=None):
        self.d = dict(name=name, kind=kind, shape=list(shape), inputs=[], outputs=[], exprs=[], stores=[])
        if reduced is not None:
            self.d["reduced"] = list(reduced)

    def input(self, dtype, strides=None, offset=0, valid=None):
        """`valid`: (dim, begin, end), the part of the space where the input may be read."""
        d = dict(dtype=dtype, strides=contiguous(self.d["shape"]) if strides is None else strides, offset=offset)
        if valid is not None:
            d["valid"] = list(valid)
        self.d["inputs"].append(d)
        return len(self.d["inputs"]) - 1

    def output(self, dtype, strides=None, offset=0):
        self.d["outputs"].append(dict(dtype=dtype, strides=contiguous(self.d["shape"]) if strides is None else strides,
                                      offset=offset))
        return len(self.d["outputs"]) - 1

    def _expr(self, **e):
        self.d["exprs"].append(e)
        return len(self.d["exprs"]) - 1

    def load(self, operand, dtype=None):
        return self._expr(op="load", dtype=dtype or self.d["inputs"][operand]["dtype"], operand=operand)

    def gather(self, operand, index, size, stride, dtype=None):
        """Input `operand` at the element's address plus `index`'s value (an expression) times `stride`, the index
        checked against `size`."""
        return self._expr(op="gather", dtype=dtype or self.d["inputs"][operand]["dtype"], operand=operand,
                          args=[index], gather=[size, stride])

    def const(self, value, dtype="f32"):
        return self._expr(op="constant", dtype=dtype, value=float(value))

    def row_index(self):
        return self._expr(op="row_index", dtype="i64")

    def in_range(self, dim, begin, end):
        return self._expr(op="in_range", dtype="bool", range=[dim, begin, end])

    def op(self, name, dtype, *args):
        return self._expr(op=name, dtype=dtype, args=list(args))

    def store(self, expr, output):
        self.d["stores"].append((expr, output))

    def pointwise_output(self, expr, dtype=None):
        """A contiguous output of the iteration space holding `expr`."""
        self.store(expr, self.output(dtype or self.d["exprs"][expr]["dtype"]))

    def per_row_output(self, expr, dtype=None):
        """An output of one value per row (stride 0 along the row)."""
        shape = self.d["shape"]
        strides = contiguous(shape[:-1]) + [0]
        self.store(expr, self.output(dtype or self.d["exprs"][expr]["dtype"], strides))

    def per_column_output(self, expr, dtype=None):
        """A column-reduce output of one value per column (stride 0 along the reduced dimensions), stored as the
        kept dimensions in order, contiguous."""
        shape, reduced = self.d["shape"], self.d["reduced"]
        kept = [n for d, n in enumerate(shape) if d not in reduced]
        dense = iter(contiguous(kept))
        strides = [0 if d in reduced else next(dense) for d in range(len(shape))]
        self.store(expr, self.output(dtype or self.d["exprs"][expr]["dtype"], strides))

    @property
    def spec(self):
        return self.d


# ---------------------------------------------------------------------------------------------------------
# The seed workloads' fused kernels


def w3_softmax(rows=4096, n=4096, dtype="f32", name="w3_softmax"):
    """exp(x) / sum(exp(x), -1, keepdim=True)."""
    s = Spec(name, [rows, n], "row_reduce")
    e = s.op("exp", dtype, s.load(s.input(dtype)))
    s.pointwise_output(s.op("div", dtype, e, s.op("reduce_sum", dtype, e)))
    return s.spec


def stable_softmax(rows=4096, n=4096, dtype="f32", name="stable_softmax"):
    """exp(x - max) / sum(exp(x - max)), with the row max and sum also written per row."""
    s = Spec(name, [rows, n], "row_reduce")
    x = s.load(s.input(dtype))
    m = s.op("reduce_max", dtype, x)
    e = s.op("exp", dtype, s.op("sub", dtype, x, m))
    total = s.op("reduce_sum", dtype, e)
    s.pointwise_output(s.op("div", dtype, e, total))
    s.per_row_output(m)
    s.per_row_output(total)
    return s.spec


def layer_norm(rows=16384, n=512, in_dtype="f16", out_dtype="f16", eps=1e-5, name="layer_norm"):
    """F.layer_norm(x, [n], w, b): f32 compute, mean then variance of (x - mean), affine, output cast."""
    s = Spec(name, [rows, n], "row_reduce")
    x = s.load(s.input(in_dtype), "f32")
    w = s.load(s.input(in_dtype, [0, 1]), "f32")
    b = s.load(s.input(in_dtype, [0, 1]), "f32")
    s.pointwise_output(s.op("cast", out_dtype, normalized(s, x, w, b, n, eps)))
    return s.spec


def normalized(s, x, w, b, n, eps):
    """layer_norm's f32 math on the row x of length n: mean, then variance of (x - mean), then the affine w, b."""
    inv_n = s.const(1.0 / n)
    mean = s.op("mul", "f32", s.op("reduce_sum", "f32", x), inv_n)
    centered = s.op("sub", "f32", x, mean)
    var = s.op("mul", "f32", s.op("reduce_sum", "f32", s.op("mul", "f32", centered, centered)), inv_n)
    rstd = s.op("rsqrt", "f32", s.op("add", "f32", var, s.const(eps)))
    return s.op("add", "f32", s.op("mul", "f32", s.op("mul", "f32", centered, rstd), w), b)


def w8_rmsnorm(rows=8192, n=4096, dtype="bf16", eps=1e-6, name="w8_rmsnorm"):
    """xf = x.float(); y = xf * rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps); (y * w).to(x.dtype)."""
    s = Spec(name, [rows, n], "row_reduce")
    xf = s.op("cast", "f32", s.load(s.input(dtype)))
    w = s.load(s.input(dtype, [0, 1]))
    sq = s.op("pow", "f32", xf, s.const(2))
    mean = s.op("mul", "f32", s.op("reduce_sum", "f32", sq), s.const(1.0 / n))  # torch's mean scales by 1/n
    y = s.op("mul", "f32", xf, s.op("rsqrt", "f32", s.op("add", "f32", mean, s.const(eps))))
    # torch: y (f32) * w (bf16) promotes to f32, then .to(bf16)
    s.pointwise_output(s.op("cast", dtype, s.op("mul", "f32", y, s.op("cast", "f32", w))))
    return s.spec


def w2_tiny_ops(n=1 << 24, name="w2_tiny_ops"):
    """x*2 -> +1 -> sigmoid -> x*x -> tanh -> x/(x.abs()+1)."""
    s = Spec(name, [n])
    x = s.load(s.input("f32"))
    x = s.op("sigmoid", "f32", s.op("add", "f32", s.op("mul", "f32", x, s.const(2)), s.const(1)))
    x = s.op("tanh", "f32", s.op("mul", "f32", x, x))
    s.pointwise_output(s.op("div", "f32", x, s.op("add", "f32", s.op("abs", "f32", x), s.const(1))))
    return s.spec


def w9_rope(rows=2048, d=1024, dtype="bf16", name="w9_rope"):
    """x * cos + cat((-x2, x1), -1) * sin with x1, x2 the halves of x's last dimension: each half of x read over
    the whole space with a validity range, the cat a where on the coordinate (the lowering's form)."""
    s = Spec(name, [rows, d])
    h = d // 2
    x, cos, sin = (s.op("cast", "f32", s.load(s.input(dtype))) for _ in range(3))
    x2 = s.op("cast", "f32", s.load(s.input(dtype, offset=h, valid=(1, 0, h))))      # x[..., h:] at [0, h)
    x1 = s.op("cast", "f32", s.load(s.input(dtype, offset=-h, valid=(1, h, d))))     # x[..., :h] at [h, d)
    rotated = s.op("where", "f32", s.in_range(1, 0, h), s.op("neg", "f32", x2), x1)
    y = s.op("add", "f32", s.op("mul", "f32", x, cos), s.op("mul", "f32", rotated, sin))
    s.pointwise_output(s.op("cast", dtype, y))
    return s.spec


def cat_rows(sizes=(3, 5), cols=7, dtype="f32", name="cat_rows"):
    """torch.cat of contiguous [n_i, cols] tensors along dim 0, plus 1: an outer-dimension cat."""
    total = sum(sizes)
    s = Spec(name, [total, cols])
    begin, pieces = 0, []
    for n in sizes:
        pieces.append((s.load(s.input(dtype, offset=-begin * cols, valid=(0, begin, begin + n))), begin, begin + n))
        begin += n
    value = pieces[-1][0]
    for load, b, e in reversed(pieces[:-1]):
        value = s.op("where", dtype, s.in_range(0, 0, e), load, value)
    s.pointwise_output(s.op("add", dtype, value, s.const(1, dtype)))
    return s.spec


def bias_add(shape=(32, 512, 512), dtype="f32", name="bias_add"):
    """x + b with b of shape [shape[-1]] broadcast over the leading dimensions."""
    s = Spec(name, shape)
    b_strides = [0] * (len(shape) - 1) + [1]
    s.pointwise_output(s.op("add", dtype, s.load(s.input(dtype)), s.load(s.input(dtype, b_strides))))
    return s.spec


# ---------------------------------------------------------------------------------------------------------
# Every op once, by the dtypes it takes

UNARY_FLOAT = ["neg", "abs", "exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh", "relu", "erf", "sin", "cos",
               "gelu_erf", "gelu_tanh", "silu"]
BINARY_ARITH = ["add", "sub", "mul", "div", "pow", "max", "min"]
COMPARISONS = ["lt", "le", "gt", "ge", "eq", "ne"]
FLOAT_DTYPES = ["f16", "bf16", "f32", "f64"]
INT_DTYPES = ["u8", "i8", "i16", "i32", "i64"]
ALL_DTYPES = ["bool"] + INT_DTYPES + FLOAT_DTYPES


def embedding(n=3, t=5, v=1000, d=64, dtype="f32", index="i64", weight_strides=None, name="embedding"):
    """emb(idx) * 2 + pos: a table [v, d] gathered by idx [n, t], with a positional table [t, d] added."""
    s = Spec(name, [n, t, d])
    ws = weight_strides or [d, 1]
    idx = s.load(s.input(index, [t, 1, 0]))
    row = s.gather(s.input(dtype, [0, 0, ws[1]]), idx, v, ws[0])
    acc = "f32" if dtype in ("f16", "bf16") else dtype
    scaled = s.op("mul", acc, s.op("cast", acc, row), s.const(2, acc))
    s.pointwise_output(s.op("cast", dtype, s.op("add", acc, scaled, s.op("cast", acc, s.load(s.input(dtype, [0, d, 1]))))))
    return s.spec


def embedding_layer_norm(n=3, t=5, v=50, d=64, dtype="f32", index="i64", eps=1e-5, name="embedding_layer_norm"):
    """F.layer_norm(emb(idx) + pos, [d], w, b) as one row reduce: the table [v, d] gathered by idx [n, t] (one
    index per row), f32 compute as layer_norm above. Inputs: idx, table, pos [t, d], w, b."""
    s = Spec(name, [n, t, d], "row_reduce")
    idx = s.load(s.input(index, [t, 1, 0]))
    row = s.op("cast", "f32", s.gather(s.input(dtype, [0, 0, 1]), idx, v, d))
    x = s.op("add", "f32", row, s.load(s.input(dtype, [0, d, 1]), "f32"))
    w = s.load(s.input(dtype, [0, 0, 1]), "f32")
    b = s.load(s.input(dtype, [0, 0, 1]), "f32")
    s.pointwise_output(s.op("cast", dtype, normalized(s, x, w, b, d, eps)))
    return s.spec


def unary(op, dtype, shape=(1025,), name=None):
    s = Spec(name or f"{op}_{dtype}", shape)
    s.pointwise_output(s.op(op, dtype, s.load(s.input(dtype))))
    return s.spec


def binary(op, dtype, shape=(1025,), b_strides=None, name=None):
    s = Spec(name or f"{op}_{dtype}", shape)
    a, b = s.load(s.input(dtype)), s.load(s.input(dtype, b_strides))
    s.pointwise_output(s.op(op, "bool" if op in COMPARISONS else dtype, a, b))
    return s.spec


def cast(src, dst, shape=(1025,)):
    s = Spec(f"cast_{src}_{dst}", shape)
    s.pointwise_output(s.op("cast", dst, s.load(s.input(src))))
    return s.spec


def mha_attention(b=16, h=8, t=64, d=64, batch_major=False, dtype="f32", name="mha_attention", causal=False,
                  rounding="every_step"):
    """The heads of nn.MultiheadAttention's self-attention as lowering writes them: q, k and v read straight from
    the input projection's [T*B, 3E] result (rows in t-major order, or b-major for a batch-first query), scaled
    by D^-1/2, and o written into [T, B, E]. Over [B, H, T, D]."""
    e = h * d
    row = 3 * e
    t_stride, b_stride = (b * row, row) if not batch_major else (row, t * row)
    s = Spec(name, [b, h, t, d], "attention")
    s.d.update(scale=(1.0 / d) ** 0.5, causal=causal, rounding=rounding)
    for part in range(3):
        s.input(dtype, [b_stride, d, t_stride, 1], offset=part * e)
    s.output(dtype, [e, d, b * e, 1])
    return s.spec


def sdpa_attention(b=2, h=3, t=33, d=48, causal=True, name="sdpa_attention"):
    """F.scaled_dot_product_attention's heads as lowering writes them, each operand its own tensor in its own
    layout: q contiguous [B, H, T, D], k a view of [B, T, H, D] (a projection split into heads), v of [B, H, D, T]
    (columns strided), o in [B, T, H, D] order (the GPU's fused kernels' output layout)."""
    s = Spec(name, [b, h, t, d], "attention")
    s.d.update(scale=0.3, causal=causal, rounding="probabilities")
    s.input("f32", [h * t * d, t * d, d, 1])
    s.input("f32", [t * h * d, d, h * d, 1], offset=5)
    s.input("f32", [h * d * t, d * t, 1, t])
    s.output("f32", [t * h * d, d, h * d, 1])
    return s.spec


def sdpa_masked_attention(b=2, h=4, t=5, s=7, d=8, kv_heads=2, mask="float", mask_dims=(0, 2, 3), dtype="f32",
                          causal=False, rounding="probabilities", name="sdpa_masked"):
    """F.scaled_dot_product_attention over [B, H, T, D] queries against S keys of `kv_heads` heads (grouped-query
    attention when fewer than H), with a mask over [B, H, T, S] ("bool", "float" or None) present along
    `mask_dims` and broadcast (stride 0) along the others, as HF's [B, 1, T, S] masks are. q and o in [B, T, H, D]
    memory (heads split from a projection), k and v contiguous. operand_shapes() gives each input's own shape."""
    sp = Spec(name, [b, h, t, d], "attention")
    sp.d.update(scale=0.25, causal=causal, rounding=rounding, keys=s, kv_heads=kv_heads)
    sp.input(dtype, [t * h * d, d, h * d, 1])
    sp.input(dtype, [kv_heads * s * d, s * d, d, 1])
    sp.input(dtype, [kv_heads * s * d, s * d, d, 1], offset=3)
    if mask:
        sizes = [b, h, t, s]
        present = [n if i in mask_dims else 1 for i, n in enumerate(sizes)]
        strides = contiguous(present)
        sp.input("bool" if mask == "bool" else dtype, [st if i in mask_dims else 0 for i, st in enumerate(strides)])
    sp.output(dtype, [t * h * d, d, h * d, 1])
    return sp.spec


def operand_shapes(spec):
    """Each input's shape: the space's for an attention kernel's q, [B, Hk, S, D] for k and v, [B, H, T, S] for the
    mask; the space's for other kernels."""
    shape = spec["shape"]
    if spec["kind"] != "attention":
        return [shape] * len(spec["inputs"])
    b, h, t, d = shape
    s, hk = spec.get("keys") or t, spec.get("kv_heads") or h
    return [shape, [b, hk, s, d], [b, hk, s, d], [b, h, t, s]][:len(spec["inputs"])]


def small_matmul(m=32, n=1024, k=512, dtype="f32", bias=True, a_row=None, w_row=None, a_offset=0,
                 name="small_matmul"):
    """F.linear of a few rows as lowering writes it: x [m, k] (rows a_row apart, from a_offset) and the weight
    [n, k] (rows w_row apart) read along k, the bias per column, D [m, n] row-major. Over [M, N, K]."""
    s = Spec(name, [m, n, k], "small_matmul")
    s.input(dtype, [k if a_row is None else a_row, 0, 1], offset=a_offset)
    s.input(dtype, [0, k if w_row is None else w_row, 1])
    if bias:
        s.input(dtype, [0, 1, 0])
    s.output(dtype, [n, 1, 0])
    return s.spec


# ---------------------------------------------------------------------------------------------------------
# Column reductions: the lowering's x.sum(0), x.var(0) and x.mean((0, 2)) kernels


def column_sum(shape=(300, 64), reduced=(0,), dtype="f32", strides=None, name="column_sum", scale=None):
    """x.sum(reduced) (times `scale` when given: a fused epilogue) in the accumulator of x's dtype, rounded once."""
    s = Spec(name, shape, "column_reduce", reduced)
    acc = "f32" if dtype in ("f16", "bf16", "f32") else dtype
    total = s.op("reduce_sum", acc, s.op("cast", acc, s.load(s.input(dtype, strides))))
    if scale is not None:
        total = s.op("mul", acc, total, s.const(scale, acc))
    s.per_column_output(s.op("cast", dtype, total))
    return s.spec


def column_var(shape=(300, 64), reduced=(0,), dtype="f32", correction=1, name="column_var"):
    """x.var(reduced, correction=...) in two passes (the mean, then squared deviations), plus x.amax(reduced)."""
    s = Spec(name, shape, "column_reduce", reduced)
    n = 1
    for d in reduced:
        n *= shape[d]
    x = s.op("cast", "f32", s.load(s.input(dtype)))
    mean = s.op("div", "f32", s.op("reduce_sum", "f32", x), s.const(n))
    d = s.op("sub", "f32", x, mean)
    var = s.op("div", "f32", s.op("reduce_sum", "f32", s.op("mul", "f32", d, d)), s.const(max(n - correction, 0)))
    s.per_column_output(s.op("cast", dtype, var))
    s.per_column_output(s.op("cast", dtype, s.op("reduce_max", "f32", x)))
    return s.spec


def column_prologue_epilogue(shape=(5, 96), dtype="f32", name="column_fused"):
    """y = x * w (stored too, element by element); (y.sum(0) + b) as one kernel; w and b vary along the columns."""
    s = Spec(name, shape, "column_reduce", [0])
    x = s.load(s.input(dtype))
    w = s.load(s.input(dtype, [0, 1]))
    b = s.load(s.input(dtype, [0, 1]))
    y = s.op("mul", dtype, x, w)
    s.pointwise_output(y)
    s.per_column_output(s.op("add", dtype, s.op("reduce_sum", dtype, y), b))
    return s.spec


def layout_copy(shape, in_strides, out_strides, src="f32", dst=None, name="layout_copy"):
    """A tensor copied from one layout into another (an NCHW weight into NHWC, x.t().contiguous()), cast on the
    way when `dst` differs."""
    s = Spec(name, shape)
    x = s.load(s.input(src, in_strides))
    s.store(s.op("cast", dst, x) if dst and dst != src else x, s.output(dst or src, out_strides))
    return s.spec


def nhwc_strides(shape):
    """Channels-last strides of an [N, C, H, W] shape."""
    n, c, h, w = shape
    return [h * w * c, 1, w * c, c]


def transposed_epilogue(rows=70, cols=33, dtype="f32", name="transposed_epilogue"):
    """relu(x.t() * scale[col] + y) over [rows, cols]: x.t() read across the output's order, y contiguous and
    the scale broadcast along the rows, with a second output of x.t() itself."""
    s = Spec(name, [rows, cols])
    acc = "f32" if dtype in ("f16", "bf16") else dtype
    xt = s.load(s.input(dtype, [1, rows]))
    y = s.load(s.input(dtype), acc)
    scale = s.load(s.input(dtype, [0, 1]), acc)
    v = s.op("relu", acc, s.op("add", acc, s.op("mul", acc, s.op("cast", acc, xt), scale), y))
    s.pointwise_output(s.op("cast", dtype, v))
    s.store(xt, s.output(dtype))
    return s.spec


TRANSPOSING = [
    layout_copy([64, 32, 3, 3], contiguous([64, 32, 3, 3]), nhwc_strides([64, 32, 3, 3]), name="weight_to_nhwc"),
    layout_copy([5, 7, 3, 3], contiguous([5, 7, 3, 3]), nhwc_strides([5, 7, 3, 3]), name="weight_to_nhwc_odd"),
    layout_copy([2, 3, 17, 19], contiguous([2, 3, 17, 19]), nhwc_strides([2, 3, 17, 19]), name="image_to_nhwc"),
    layout_copy([2, 40, 5, 6], nhwc_strides([2, 40, 5, 6]), contiguous([2, 40, 5, 6]), name="nhwc_to_nchw"),
    layout_copy([70, 33], [1, 70], [33, 1], name="t_contiguous"),
    layout_copy([3, 45, 50], [2250, 1, 45], [2250, 50, 1], src="f32", dst="f16", name="batched_t_to_f16"),
    layout_copy([4, 6, 5, 7], [210, 1, 42, 6], contiguous([4, 6, 5, 7]), src="i64", name="permute_i64"),
    transposed_epilogue(), transposed_epilogue(dtype="bf16", name="transposed_epilogue_bf16"),
]
