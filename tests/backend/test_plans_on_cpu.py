"""The CUDA backend's plans, run on the CPU: every op-suite case and seed workload is rehearsed (lowered and
emitted as for an H100), and each call's plan also runs through plan_on_cpu.py (its kernels on host threads, its
matrix products with torch) and must give the torch runner's result. So CI checks what the lowering computes,
not only its shape; f32 plans without extern steps (the others are counted, and must be the expected ones)."""
import pytest
import torch
import torch.nn.functional as F

import fastcomp
from fastcomp import _C
from tests.backend import plan_on_cpu
from tests.backend.op_suite import CASES
from tests.backend.test_dynamic_kernels import SdpaBlock

pytestmark = pytest.mark.skipif(plan_on_cpu.cpu_launch.compiler() is None, reason="no host C++ compiler")


@pytest.fixture
def observer(rehearse):
    seen = plan_on_cpu.Observer()
    _C.set_rehearsal_observer(seen)
    yield seen
    _C.set_rehearsal_observer(None)


TOLERANCE = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 2e-2}


def check_runs(seen, expect_runnable):
    assert seen.runs, "no rehearsed call was observed"
    ran = 0
    for plan, why, got, expected in seen.runs:
        if why:
            assert not expect_runnable, f"the plan did not run on the CPU: {why}"
            continue
        ran += 1
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            tol = TOLERANCE.get(e.dtype, 1e-5)
            scale = max(1.0, float(e.float().abs().max())) if e.is_floating_point() and e.numel() else 1.0
            torch.testing.assert_close(g, e, rtol=tol, atol=tol * scale, equal_nan=True)
    return ran


@pytest.mark.parametrize("case", [c for c in CASES if torch.float32 in c.dtypes], ids=lambda c: c.name)
def test_op_plan_computes_what_torch_does(case, observer):
    shape = case.shapes[1] if len(case.shapes) > 1 else case.shapes[0]
    with case.settings(), torch.no_grad():
        fastcomp.compile(case.fn)(*case.make(shape, torch.float32, "cpu"))
    check_runs(observer, expect_runnable=case.plan[2] == 0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", [c for c in CASES if torch.float16 in c.dtypes], ids=lambda c: c.name)
def test_half_op_plan_computes_what_torch_does(case, dtype, observer):
    """f16/bf16 plans: the kernels round where torch's ops do (the prelude's conversions run as host code)."""
    shape = case.shapes[1] if len(case.shapes) > 1 else case.shapes[0]
    args = case.make(shape, dtype, "cpu")
    try:
        case.fn(*args)
    except (RuntimeError, NotImplementedError) as e:  # torch has no CPU kernel of some op for this dtype
        pytest.skip(f"eager torch on the CPU: {e}")
    with case.settings(), torch.no_grad():
        fastcomp.compile(case.fn)(*args)
    check_runs(observer, expect_runnable=case.plan[2] == 0)


@pytest.mark.parametrize("wid, fused", [(f"W{i}", True) for i in range(1, 11)] + [("W7", False), ("W10", False)],
                         ids=lambda v: str(v))
def test_workload_plan_computes_what_torch_does(wid, fused, observer):
    from benchmarks.workloads import WORKLOADS

    w = WORKLOADS[wid]
    torch.manual_seed(0)
    model, make_inputs = w.make("cpu", w.quick_scale)

    def f32(args):  # the half workloads (W4, W8, W9) in f32: the CPU runs f32 kernels only
        return tuple(a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)

    if w.dtype != torch.float32 and isinstance(model, torch.nn.Module):
        model = model.float()
    with fastcomp.config.patch(fused_attention=fused), torch.no_grad():
        compiled = fastcomp.compile(model)
        for _ in range(2):  # fresh inputs on the second call, through the same plan
            compiled(*f32(make_inputs()))
    assert check_runs(observer, expect_runnable=True) == 2


def _cat(x, y):
    return torch.cat((x.sigmoid(), y * 2, x), -1) + 1


def _softmax_and_products(x, y):
    return torch.softmax(x * 2, -1) + y.sum(-1, keepdim=True), x.t() * 3, x @ y.t(), (x + 1).amax(-1)


def _column_stats(x):
    return x.sum(1) * 2 + x.amax(1), (x * x).sum((0, 2))


def _swiglu(x, wg, wu):
    return torch.nn.functional.silu(x @ wg) * (x @ wu)


def _mlp():
    from benchmarks.workloads import MLP
    return MLP(d=64, hidden=128).eval()


def _layer():
    from benchmarks.workloads import TransformerLayer
    return TransformerLayer().eval()


class _Embed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tokens, self.positions = torch.nn.Embedding(50, 33), torch.nn.Embedding(7, 33)

    def forward(self, idx, positions):
        return self.tokens(idx) * 2 + self.positions(positions)


def _ids(n):
    idx = torch.randint(0, 50, (n, 7))
    idx[0, 0], idx[-1, -1] = 49, 0
    return idx, torch.arange(7).expand(n, 7)


# Dynamic shapes: one plan with symbolic sizes serves every call; each call's run of it is checked.
@pytest.mark.parametrize("make_fn, make_inputs, sizes", [
    (lambda: _cat, lambda n: (torch.randn(3, n), torch.randn(3, n + 5)), (8, 13, 1, 6)),
    (lambda: _softmax_and_products, lambda n: (torch.randn(n, n + 2), torch.randn(n, n + 2)), (8, 13, 1)),
    (_mlp, lambda n: (torch.randn(n, 64),), (8, 1, 5, 17)),
    (lambda: _column_stats, lambda n: (torch.randn(n, 6, 40, 3),), (8, 13, 1)),
    (_layer, lambda n: (torch.randn(2, n, 512),), (16, 9, 3)),
    (_Embed, _ids, (8, 1, 13)),
    (lambda: lambda x, i: x.index_select(0, i) * 2, lambda n: (torch.randn(9, 5), torch.randint(0, 9, (n,))), (8, 1, 13)),
    # a group of products (plan/group_products.h): its second result lies m * n elements on, a symbolic offset
    (lambda: _swiglu, lambda n: (torch.randn(n, 16), torch.randn(16, 24), torch.randn(16, 24)), (8, 1, 13)),
], ids=["cat", "softmax_and_products", "mlp", "column_stats", "w7_layer", "embedding", "index_select", "pair"])
def test_dynamic_plan_computes_what_torch_does_at_every_size(make_fn, make_inputs, sizes, observer):
    torch.manual_seed(0)
    compiled = fastcomp.compile(make_fn(), dynamic=True)
    with torch.no_grad():
        for n in sizes:
            compiled(*make_inputs(n))
    assert check_runs(observer, expect_runnable=True) == len(sizes)
    assert all(plan["symbols"] for plan, *_ in observer.runs)


# A batch that changes between calls becomes a symbol (the second call recompiles): the attention kernels take it,
# their grids and the strides that follow it, as size parameters.
@pytest.mark.parametrize("make_fn, make_inputs", [
    (_layer, lambda b: (torch.randn(b, 16, 512),)),
    (SdpaBlock, lambda b: (torch.randn(b, 24, 256),)),
], ids=["w7_layer", "sdpa"])
def test_attention_plan_with_a_dynamic_batch_computes_what_torch_does(make_fn, make_inputs, observer):
    torch.manual_seed(0)
    compiled = fastcomp.compile(make_fn().eval())
    with torch.no_grad():
        for b in (2, 3, 5, 4):
            compiled(*make_inputs(b))
    assert check_runs(observer, expect_runnable=True) == 4
    assert [bool(plan["symbols"]) for plan, *_ in observer.runs] == [False, True, True, True]
    assert all("attention over [B, H, T, D]" in plan["program"] for plan, *_ in observer.runs)
    assert "attention over [B, H, T, D] = [s0, " in observer.runs[-1][0]["program"]


def test_grouped_linears_with_biases_compute_what_torch_does(observer):
    """BERT-style q, k and v nn.Linear layers as one batched call with a bias a batch (group_products.h)."""
    from tests.backend.test_lowering import _SeparateProjections

    torch.manual_seed(0)
    compiled = fastcomp.compile(_SeparateProjections().eval())
    with fastcomp.config.patch(small_matmul=False), torch.no_grad():
        for _ in range(2):
            compiled(torch.randn(40, 32))
    assert check_runs(observer, expect_runnable=True) == 2
    groups = [s for plan, *_ in observer.runs for s in plan["steps"] if s["kind"] == "matmul" and s["b_next"]]
    assert len(groups) == 2 and all(len(s["b_next"]) == len(s["bias_next"]) == 2 for s in groups), groups


# Inputs that start past their storage's first element (x[1:] passed in): the plan reads views of them at offsets
# from the input's own start (fuzz, CUDA seed 102 #4403, #1379: off by the input's offset).
@pytest.mark.parametrize("fn", [
    lambda x: (x[-1] * x[-1]).abs(),
    lambda x: x[1:].relu() - x[1:],
    lambda x: x.narrow(-1, 1, x.size(-1) - 1) * x[..., :1],
], ids=["select", "slice", "narrow"])
def test_plan_reads_views_of_an_input_with_a_storage_offset(fn, observer):
    torch.manual_seed(0)
    compiled = fastcomp.compile(fn)
    with torch.no_grad():
        for n in (7, 7):
            x = torch.randn(n + 3)[3:]
            assert x.storage_offset() == 3
            torch.testing.assert_close(compiled(x), fn(x))
    assert check_runs(observer, expect_runnable=True) == 2


def with_specials(x, n):
    """x with NaN at n random places and -inf at n others (or the same: either may win)."""
    x.view(-1)[torch.randperm(x.numel(), device=x.device)[:n]] = float("nan")
    x.view(-1)[torch.randperm(x.numel(), device=x.device)[:n]] = float("-inf")
    return x


def pooled_specials(device="cpu"):
    """[2, 3, 9, 9] values with NaN and -inf at scattered places, and one plane that is -inf throughout."""
    x = with_specials(torch.randn(2, 3, 9, 9, device=device), 12)
    x[1, 2] = float("-inf")
    return x


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_max_pool_propagates_nan_and_keeps_minus_inf(channels_last, observer):
    """Padding never wins (it is -inf and is not read), a NaN in a window makes its maximum NaN, as torch's."""
    fn = lambda x: torch.nn.functional.max_pool2d(x, 3, 2, 1)  # noqa: E731
    x = pooled_specials()
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        got, want = fastcomp.compile(fn)(x), fn(x)
    torch.testing.assert_close(got, want, equal_nan=True)
    assert want.isnan().any() and (want == float("-inf")).any()
    assert check_runs(observer, expect_runnable=True) == 1


def _pool_configs(n=16, seed=27):
    """n random but fixed max_pool2d configurations: window, stride, padding (at most half the window, as torch
    requires), dilation, ceil_mode, an input just large enough or larger, either layout."""
    rng = torch.Generator().manual_seed(seed)
    pick = lambda lo, hi: int(torch.randint(lo, hi + 1, (), generator=rng))  # noqa: E731
    configs = []
    for i in range(n):
        k = (pick(1, 4), pick(1, 4))
        s = (pick(1, 3), pick(1, 3))
        p = (pick(0, k[0] // 2), pick(0, k[1] // 2))
        d = (pick(1, 2), pick(1, 2))
        ceil = bool(pick(0, 1))
        shape = (pick(1, 3), pick(1, 5), d[0] * (k[0] - 1) + 1 + pick(0, 9), d[1] * (k[1] - 1) + 1 + pick(0, 9))
        configs.append((k, s, p, d, ceil, shape, bool(i % 2)))
    return configs


@pytest.mark.parametrize("k, s, p, d, ceil, shape, channels_last", _pool_configs())
def test_max_pool_configurations_compute_what_torch_does(k, s, p, d, ceil, shape, channels_last, observer):
    """Max pooling after a ReLU (its lazy input, recomputed at each tap) over a sweep of windows, strides,
    paddings, dilations and ceil_mode, in both layouts, on fresh random values with NaN and -inf among them."""
    fn = lambda x: F.max_pool2d(F.relu(x) - 0.5, k, s, p, dilation=d, ceil_mode=ceil)  # noqa: E731
    x = with_specials(torch.randn(shape), max(1, torch.Size(shape).numel() // 40))
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        got, want = fastcomp.compile(fn)(x), fn(x)
    torch.testing.assert_close(got, want, equal_nan=True)
    assert check_runs(observer, expect_runnable=True) == 1


@pytest.mark.parametrize("combined", [True, False], ids=["combined", "apart"])
def test_weight_casts_under_autocast_are_one_combo_kernel_and_their_products_one_call(combined, observer):
    """Under autocast (casts explicit) q, k and v cast the activation, their weights and their biases to bf16 on
    every call: nine kernels that read graph inputs alone. Combined (combine_kernels.h), the three casts of the
    activation are one, and the seven left run as one combo kernel before the first product, whose A is then one
    buffer and whose B's and biases are ready, for one batched call; apart, each cast runs before its product and
    the products stay three calls. Either way the plan computes what the torch runner does."""
    from tests.backend.test_lowering import _SeparateProjections

    torch.manual_seed(0)
    compiled = fastcomp.compile(_SeparateProjections().eval())
    with fastcomp.config.patch(small_matmul=False, explicit_autocast="all", combined_kernels=combined), \
            torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        for _ in range(2):
            compiled(torch.randn(40, 32))
    assert check_runs(observer, expect_runnable=True) == 2
    plan = observer.runs[0][0]
    combos = [line for line in plan["program"].splitlines() if "combo of" in line]
    products = [s for s in plan["steps"] if s["kind"] == "matmul"]
    if combined:
        assert combos == ["// k0: combo of 7 pointwise kernels, 7 blocks"], combos
        assert plan["steps"][0]["kind"] == "kernel" and plan["steps"][0]["name"] == "k0"
        assert len(products) == 3 and len(products[0]["b_next"]) == len(products[0]["bias_next"]) == 2, products
    else:
        assert not combos and len(products) == 5 and not any(s["b_next"] for s in products), products


class _NormedProjections(torch.nn.Module):
    """LLaMA's attention inputs: an RMS norm, then q, k and v projections without biases."""

    def __init__(self, d=32):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(d))
        self.q, self.k, self.v = (torch.nn.Linear(d, d, bias=False) for _ in range(3))

    def forward(self, x):
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight
        return self.q(h) + self.k(h) * self.v(h)


def test_an_activation_cast_once_for_each_product_is_cast_once_and_the_products_are_one_call(observer):
    """Under autocast each projection casts the normed activation to bf16: three casts of one tensor, which the
    graph computes once (graph/repeated_casts.h); the three products then share one A and run as one batched
    call, their weights' casts in one combo kernel before it."""
    torch.manual_seed(0)
    compiled = fastcomp.compile(_NormedProjections().eval())
    with fastcomp.config.patch(small_matmul=False, explicit_autocast="all"), torch.no_grad(), \
            torch.autocast("cpu", dtype=torch.bfloat16):
        for _ in range(2):
            compiled(torch.randn(40, 32))
    assert check_runs(observer, expect_runnable=True) == 2
    plan = observer.runs[0][0]
    products = [s for s in plan["steps"] if s["kind"] == "matmul"]
    assert len(products) == 1 and len(products[0]["b_next"]) == 2, products
    assert [line.split(": ")[1] for line in plan["program"].splitlines() if "combo of" in line] == [
        "combo of 3 pointwise kernels, 3 blocks"]


class _Conv1DMLP(torch.nn.Module):
    """GPT-2's MLP: a layer norm, then `addmm` on a 2-d view of it, gelu_new, `addmm` on a 2-d view of that. Under
    autocast the products cast the views to bf16."""

    def __init__(self, d=32):
        super().__init__()
        self.ln = torch.nn.LayerNorm(d)
        self.w1, self.b1 = torch.nn.Parameter(torch.randn(d, 4 * d) / 8), torch.nn.Parameter(torch.randn(4 * d))
        self.w2, self.b2 = torch.nn.Parameter(torch.randn(4 * d, d) / 8), torch.nn.Parameter(torch.randn(d))

    def forward(self, x):
        h = self.ln(x)
        h = torch.addmm(self.b1, h.view(-1, h.size(-1)), self.w1).view(h.size()[:-1] + (self.w1.size(-1),))
        g = 0.5 * h * (1.0 + torch.tanh(0.7978845608 * (h + 0.044715 * torch.pow(h, 3.0))))
        return torch.addmm(self.b2, g.view(-1, g.size(-1)), self.w2)


def test_a_cast_of_a_reshaping_view_joins_the_kernel_of_what_it_views(observer):
    """The cast autocast puts before each product reads a 2-d view of the layer norm's or the GELU's result: it is
    computed in their kernels (Lowerer::defer_reshape), so the plan is the norm, the weights' casts, a product,
    the GELU, a product: no kernel of its own for either cast, and no float32 copy of either activation."""
    torch.manual_seed(0)
    compiled = fastcomp.compile(_Conv1DMLP().eval())
    with fastcomp.config.patch(small_matmul=False, explicit_autocast="all"), torch.no_grad(), \
            torch.autocast("cpu", dtype=torch.bfloat16):
        for _ in range(2):
            compiled(torch.randn(2, 8, 32))
    assert check_runs(observer, expect_runnable=True) == 2
    plan = observer.runs[0][0]
    assert [s["kind"] for s in plan["steps"]] == ["kernel", "kernel", "matmul", "kernel", "matmul"], plan["steps"]
    assert not any(b["dtype"] == "f32" and b["sizes"] in ([2, 8, 32], [2, 8, 128], [16, 32], [16, 128]) for b in plan["buffers"]
                   if b["kind"] == "alloc"), plan["buffers"]


def _view_summed_and_cast(x):
    h = torch.tanh(x)
    v = h.view(-1, x.size(-1))
    return v.sum(0), (v * 2).to(torch.float16).float(), h.exp()


def _views_of_views(x):
    h = x.sigmoid().unsqueeze(0)
    return (h.reshape(-1) + 1).view(4, -1).flatten().cos() * 3


def _view_of_a_reshaped_result(x):
    g = torch.relu(x).view(-1) * 2
    return torch.softmax(g.view(x.size(0), -1), -1), g.view(2, -1).amax(-1)


@pytest.mark.parametrize("fn", [_view_summed_and_cast, _views_of_views, _view_of_a_reshaped_result],
                         ids=lambda f: f.__name__)
def test_reshaped_lazy_values_compute_what_torch_does(fn, observer):
    """A reshaping view of a lazy value read by a reduction, a chain of views, a view of a value computed on one:
    each reader gets its buffer or joins the kernel, and the plan computes what torch does."""
    with torch.no_grad():
        fastcomp.compile(fn)(torch.randn(8, 6, 16))
    assert check_runs(observer, expect_runnable=True) == 1
