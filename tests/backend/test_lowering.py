"""CPU rehearsal of the CUDA backend: every op-suite case and seed workload is traced on CPU tensors, lowered
to a fusion plan as if it ran on a GPU, its CUDA C compiled to PTX with NVRTC, and the plan's shape (kernels,
cuBLAS calls, extern ops) checked exactly. The graph itself runs through torch, so results still equal eager."""
import contextlib
import re
import warnings

import pytest
import torch

import fastcomp
from fastcomp.testing import CompileCounter
from tests.backend.op_suite import CASES
from tests.helpers import assert_same



@pytest.fixture(autouse=True)
def rehearsed(rehearse):  # every test here rehearses (conftest.py)
    yield


def plan_counts(record):
    m = re.match(r"rehearsal: (\d+) kernels, (\d+) cuBLAS calls, (\d+) extern ops", record["backend"])
    assert m, record["backend"]
    return tuple(int(g) for g in m.groups())


def compile_and_check(fn, args):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an NVRTC or lowering failure warns: make it fail the test
        with CompileCounter() as cc, torch.no_grad():
            out = fastcomp.compile(fn)(*args)
            assert_same(out, fn(*args), rtol=1e-5, atol=1e-5)
    assert cc.graph_count == 1 and cc.break_count == 0, cc.records
    return cc.records[0]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_op_plan(case):
    # The first shape is often the degenerate one (all 1s), where fusion decisions have edge cases.
    dtype = torch.float32 if torch.float32 in case.dtypes else case.dtypes[0]
    for shape in dict.fromkeys((case.shapes[0], case.shapes[1] if len(case.shapes) > 1 else case.shapes[0],
                                case.shapes[-1])):
        with case.settings():
            fastcomp.reset()
            record = compile_and_check(case.fn, case.make(shape, dtype, "cpu"))
        assert plan_counts(record) == case.plan, (shape, record["plan"])
    if case.plan[0]:
        assert 'extern "C" __global__' in record["cuda_source"]


# Seed workloads: (kernels, cuBLAS calls, extern ops). W7's heads are one attention kernel between the QKV and
# output projections (then the FF's two GEMMs and three kernels: add+norm, GELU, add+norm); nn.MultiheadAttention's
# mask/dtype helpers are computed while tracing (constant arguments), so no extern op is left. W9's rotary line,
# cat included, is one kernel (test_w9_rope_line_is_one_kernel), then its two projections of x as one batched
# cuBLAS call (test_two_products_of_one_activation_are_one_batched_call) and the SwiGLU kernel; W6's q, k and v
# projections are one such call too. W10 is four W7-like layers. At
# these test sizes W5's batch is 8 rows and W10's 32 tokens, so their F.linear products are small-matmul kernels
# (all four of each W10 layer, its attention projections included).
WORKLOAD_PLANS = {
    "W1": (1, 0, 0),
    "W2": (1, 0, 0),
    "W3": (1, 0, 0),
    "W4": (2, 1, 0),
    "W5": (3, 0, 0),
    "W6": (1, 3, 0),
    "W7": (4, 4, 0),
    "W8": (1, 0, 0),
    "W9": (2, 1, 0),
    "W10": (32, 0, 0),
}
ATTENTION_KERNELS = {"W7": 1, "W10": 4}


# With fastcomp.config.fused_attention off, each layer's heads are 2 kernels (heads apart, softmax) and 4 cuBLAS
# calls (scores and values, two batched GEMMs each way round the head split).
UNFUSED_ATTENTION_PLANS = {"W7": (5, 6, 0), "W10": (36, 8, 0)}


@pytest.mark.parametrize("wid", sorted(UNFUSED_ATTENTION_PLANS))
def test_workload_plan_without_fused_attention(wid):
    with fastcomp.config.patch(fused_attention=False):
        record = workload_record(wid)
    assert plan_counts(record) == UNFUSED_ATTENTION_PLANS[wid], record["plan"]
    assert "attention shape" not in record["plan"]


@pytest.mark.parametrize("wid", sorted(WORKLOAD_PLANS))
def test_workload_plan(wid):
    record = workload_record(wid)
    assert plan_counts(record) == WORKLOAD_PLANS[wid], record["plan"]
    assert len(re.findall(r"kernel k\d+ attention shape", record["plan"])) == ATTENTION_KERNELS.get(wid, 0)


def workload_record(wid):
    from benchmarks.workloads import WORKLOADS

    w = WORKLOADS[wid]
    model, make_inputs = w.make("cpu", w.quick_scale)
    args = make_inputs()
    if w.dtype != torch.float32:  # CPU half kernels are incomplete in torch; the plan is what matters here
        model = model.float() if isinstance(model, torch.nn.Module) else model
        args = tuple(a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)
    fastcomp.reset()
    return compile_and_check(model, args)


# With fastcomp.config.small_matmul off every product is a cuBLASLt call again: W5's two and W10's sixteen.
@pytest.mark.parametrize("wid,plan", [("W5", (1, 2, 0)), ("W10", (16, 16, 0))])
def test_workload_plan_without_small_matmul(wid, plan):
    with fastcomp.config.patch(small_matmul=False):
        record = workload_record(wid)
    assert plan_counts(record) == plan, record["plan"]
    assert "small_matmul" not in record["plan"]


def test_w5_products_are_small_matmul_kernels_with_their_bias():
    plan = workload_record("W5")["plan"]
    m = int(re.match(r"b0 = input 0 f32\[(\d+), 512\]", plan)[1])  # the batch at the test's scale
    # A [m, k] and W [n, k] read along k, the bias per column, D row-major: kernel_ir.h's layout over [M, N, K].
    for n, k, kernel in ((1024, 512, "k0"), (512, 1024, "k2")):
        assert (f"kernel {kernel} small_matmul shape=[{m},{n},{k}]\n  in0 f32 strides=[{k},0,1]\n"
                f"  in1 f32 strides=[0,{k},1]\n  in2 f32 strides=[0,1,0]\n  out0 f32 strides=[{n},1,0]\n") in plan, plan
    assert "gelu_erf" in plan  # the GELU between them is its own pointwise kernel


def test_plan_text_names_buffers_and_steps():
    def f(x, w, b):
        return torch.nn.functional.gelu(torch.nn.functional.linear(x, w, b)) + x

    with fastcomp.config.patch(small_matmul=False):  # a cuBLASLt step, as larger products get
        record = compile_and_check(f, (torch.randn(8, 16), torch.randn(16, 16), torch.randn(16)))
    plan = record["plan"]
    assert "matmul f32 m=8 n=16 k=16" in plan and "epilogue=bias" in plan, plan
    assert re.search(r"kernel k0\(b\d+, b\d+, b\d+\)", plan), plan


def test_w9_rope_line_is_one_kernel():
    from benchmarks.workloads import rope_swiglu

    x, cos, sin = (torch.randn(8, 64) for _ in range(3))
    w = torch.randn(64, 96)
    record = compile_and_check(rope_swiglu, (x, cos, sin, w, w))
    kernel = record["plan"].split("kernel k0 pointwise shape=[8,64]\n")[1].split("\n\n")[0]
    # x (whole, then each half over the other half's place), cos and sin; -x2 and the cat are never written
    assert kernel.count("  in") == 5 and kernel.count("  out") == 1, kernel
    assert "offset=32 valid d1=[0,32)" in kernel and "offset=-32 valid d1=[32,64)" in kernel, kernel
    assert "in_range bool d1=[0,32)" in kernel and "neg f32" in kernel, kernel
    assert "torch.cat" not in record["plan"]


# ---- products of one activation (plan/group_products.h) ------------------------------------------------------


def _swiglu(x, wg, wu):
    return torch.nn.functional.silu(x @ wg) * (x @ wu)


def test_two_products_of_one_activation_are_one_batched_call():
    x, wg, wu = torch.randn(24, 32), torch.randn(32, 40), torch.randn(32, 40)
    plan = compile_and_check(_swiglu, (x, wg, wu))["plan"]
    # One call, batch 2: A shared (batch stride 0), the second weight named (its distance is read per call), both
    # results batches of one buffer that the SwiGLU kernel reads at 0 and at 24 * 40.
    call = re.search(r"matmul f32 m=24 n=40 k=32 batch=2 a=b0\(32, 1, 0\) b=b1\(40, 1\)\+b\d+ -> b(\d+)\n", plan)
    assert call, plan
    assert re.search(rf"b{call[1]} = view b(\d+) f32\[24, 40\]", plan), plan
    assert re.search(r"b\d+ = alloc f32\[2, 24, 40\]\n", plan), plan
    assert "offset=960" in plan.split("kernel k0 pointwise")[1], plan
    assert plan.count("matmul ") == 1, plan


class _GatedMLP(torch.nn.Module):
    """LLaMA's MLP: down(silu(gate(x)) * up(x)), bias-free nn.Linear layers."""

    def __init__(self, d=32, hidden=48):
        super().__init__()
        self.gate = torch.nn.Linear(d, hidden, bias=False)
        self.up = torch.nn.Linear(d, hidden, bias=False)
        self.down = torch.nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        return self.down(torch.nn.functional.silu(self.gate(x)) * self.up(x))


def test_gate_and_up_linears_of_a_gated_mlp_are_one_batched_call():
    with fastcomp.config.patch(small_matmul=False):  # 2 x 20 rows would be small-matmul kernels otherwise
        record = compile_and_check(_GatedMLP().eval(), (torch.randn(2, 20, 32),))
    assert plan_counts(record) == (1, 2, 0), record["plan"]
    assert re.search(r"matmul f32 m=40 n=48 k=32 batch=2 a=b\d+\(32, 1, 0\) b=b\d+\(1, 32\)\+b\d+ ", record["plan"])


class _SeparateProjections(torch.nn.Module):
    """BERT's self-attention projections: q, k and v as nn.Linear layers with biases."""

    def __init__(self, d=32):
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(d, d) for _ in range(3))

    def forward(self, x):
        return torch.softmax(self.q(x) @ self.k(x).transpose(-2, -1), -1) @ self.v(x)


def test_linears_with_biases_of_one_activation_are_one_batched_call():
    with fastcomp.config.patch(small_matmul=False):
        record = compile_and_check(_SeparateProjections().eval(), (torch.randn(40, 32),))
    plan = record["plan"]
    assert re.search(r"matmul f32 m=40 n=32 k=32 batch=3 .* epilogue=bias bias=b\d+\+b\d+\+b\d+\n", plan), plan


def test_grouped_products_off_keeps_a_call_each():
    with fastcomp.config.patch(grouped_products=False):
        plan = compile_and_check(_swiglu, (torch.randn(24, 32), torch.randn(32, 40), torch.randn(32, 40)))["plan"]
    assert plan.count("matmul ") == 2 and "batch=2" not in plan, plan


def _linear_and_product(x, w1, w2, b):
    return torch.nn.functional.linear(x, w1, b) * (x @ w2)


def _second_weight_written_between(x, w1, w2):
    y = x @ w1
    w2.mul_(2)  # an extern step: the second product must see the doubled weight
    return y * (x @ w2)


def _pair_as_outputs(x, w1, w2):
    return x @ w1, x @ w2


def _two_shapes(x, w1, w2):
    return (x @ w1).sum(-1) * (x @ w2).sum(-1)


def _different_activations(x, w1, w2):
    return (x @ w1) * ((x + 1) @ w2)


@pytest.mark.parametrize("fn, args, why", [
    (_linear_and_product, (torch.randn(24, 32), torch.randn(40, 32), torch.randn(32, 40), torch.randn(40)),
     "a bias on one of them only"),
    (_second_weight_written_between, (torch.randn(24, 32), torch.randn(32, 40), torch.randn(32, 40)),
     "an in-place op between them"),
    (_pair_as_outputs, (torch.randn(24, 32), torch.randn(32, 40), torch.randn(32, 40)), "graph outputs"),
    (_different_activations, (torch.randn(24, 32), torch.randn(32, 40), torch.randn(32, 40)), "two activations"),
    (_two_shapes, (torch.randn(24, 32), torch.randn(32, 40), torch.randn(32, 48)), "two shapes"),
    (_swiglu, (torch.randn(4100, 4), torch.randn(4, 2048), torch.randn(4, 2048)), "8 Mi elements a result"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_products_that_do_not_pair(fn, args, why):
    expected = fn(*(a.clone() for a in args))
    with fastcomp.config.patch(small_matmul=False), CompileCounter() as cc, torch.no_grad():
        assert_same(fastcomp.compile(fn)(*(a.clone() for a in args)), expected, rtol=1e-5, atol=1e-4)
    assert cc.graph_count == 1 and cc.break_count == 0, cc.records
    plan = cc.records[0]["plan"]
    assert "batch=2" not in plan and plan.count("matmul ") == 2, (why, plan)


# ---- indirect loads ---------------------------------------------------------------------------------------------


def ids(shape, n):
    idx = torch.randint(0, n, shape)
    idx.view(-1)[0], idx.view(-1)[-1] = n - 1, 0
    return idx


def kernels_of(plan):
    """{name: text} of each kernel in a plan."""
    return {m.group(1): m.group(0) for m in re.finditer(r"kernel (k\d+) \w+ shape=.*?(?=\n\n|\Z)", plan, re.S)}


def test_embedding_module_is_one_kernel_with_its_epilogue():
    emb = torch.nn.Embedding(100, 24, padding_idx=0)

    def f(idx, pos):
        return emb(idx) * 8**0.5 + pos

    record = compile_and_check(f, (ids((4, 6), 100), torch.randn(6, 24)))
    assert plan_counts(record) == (1, 0, 0), record["plan"]
    assert "gather f32 in1 size=100 stride=24 e0" in record["plan"]
    assert "if (a0[w] < 0 || a0[w] >= 100) __trap();" in record["cuda_source"]  # per group of 4 elements
    assert re.search(r"fc_load<4, kVector>\(in1 \+ c\d \+ \(idx_t\)a0\[w\] \* 24, g\d\[w\]\);", record["cuda_source"])


@pytest.mark.parametrize("fn", [
    lambda i, w: torch.nn.functional.embedding(i, w, max_norm=1.0) * 2,
    lambda i, w: torch.nn.functional.embedding(i, w, None, 2.0) * 2,
], ids=["keyword", "positional"])
def test_embedding_with_max_norm_stays_a_torch_call(fn):
    record = compile_and_check(fn, (ids((5,), 10), torch.randn(10, 8)))
    assert plan_counts(record) == (1, 0, 1), record["plan"]
    assert "= torch.nn.functional.embedding" in record["plan"] and "gather" not in record["plan"]


@pytest.mark.parametrize("fn, error", [
    (lambda x, i: x[i] * 2, "index is out of bounds for dimension with size 0"),
    (lambda x, i: x.index_select(0, i) * 2, "index_select"),
], ids=["getitem", "index_select"])
@pytest.mark.parametrize("shape", [(0, 3), (0, 0)], ids=["rows", "empty_result"])
def test_indexing_an_empty_dimension_raises_as_torch_does(fn, error, shape):
    """Every index is out of range of a dimension of size 0; torch raises on the host (catchable), where the
    gather kernel's check would be a device-side trap: torch runs the op, even where the result is empty too
    (fuzz, CUDA seed 102 #1302, #9393; seed 103 #2296)."""
    x, i = torch.randn(shape), torch.tensor([0, -1])
    with pytest.raises((IndexError, RuntimeError), match=error):
        fn(x, i)
    with CompileCounter() as counter, pytest.raises((IndexError, RuntimeError), match=error):
        fastcomp.compile(fn)(x, i)
    assert "through torch: %2 (indexing into a dimension of size 0)" in counter.records[0]["backend"]


@pytest.mark.parametrize("fn", [
    lambda i, w: torch.nn.functional.layer_norm(torch.nn.functional.embedding(i, w) * 2, w.shape[-1:]),
    lambda i, w: torch.softmax(torch.nn.functional.embedding(i, w), -1),
    lambda i, w: torch.nn.functional.embedding(i, w).exp().sum(-1),
    lambda i, w: torch.softmax(w[:6] * 2, -1) + torch.nn.functional.embedding(i, w),
], ids=["layer_norm", "softmax", "row_sum", "softmax_epilogue"])
def test_embedding_rows_join_a_row_reduction(fn):
    record = compile_and_check(fn, (ids((6,), 30), torch.randn(30, 40)))
    assert plan_counts(record) == (1, 0, 0), record["plan"]
    (text,) = kernels_of(record["plan"]).values()
    assert " row_reduce " in text and "gather" in text, record["plan"]


@pytest.mark.parametrize("fn, args", [
    (lambda i, w: torch.nn.functional.embedding(i, w).sum(0) + 1, lambda: (ids((6,), 30), torch.randn(30, 40))),
    (lambda x, i: torch.softmax(x.gather(-1, i), -1), lambda: (torch.randn(6, 40), ids((6, 40), 40))),
], ids=["column_sum", "index_along_the_row"])
def test_gathered_values_are_written_before_other_reductions(fn, args):
    record = compile_and_check(fn, args())
    assert plan_counts(record) == (2, 0, 0), record["plan"]
    gathering = [text for text in kernels_of(record["plan"]).values() if "gather" in text]
    assert len(gathering) == 1 and " pointwise " in gathering[0], record["plan"]


def test_two_gathers_of_one_table_stay_out_of_a_row_reduction():
    # The row-reduce kernel moves a gathered input's row by its gather's index: two indices into one table would
    # need the same input at two rows.
    def f(i, j, w):
        return torch.nn.functional.layer_norm(torch.nn.functional.embedding(i, w) + torch.nn.functional.embedding(j, w),
                                              w.shape[-1:])

    record = compile_and_check(f, (ids((6,), 30), ids((6,), 30), torch.randn(30, 40)))
    assert plan_counts(record) == (2, 0, 0), record["plan"]


def test_a_gathered_cat_piece_is_written_first():
    def f(i, w, x):
        return torch.cat((torch.nn.functional.embedding(i, w), x), -1) * 2

    record = compile_and_check(f, (ids((6,), 30), torch.randn(30, 8), torch.randn(6, 5)))
    assert plan_counts(record) == (2, 0, 0), record["plan"]


def test_gather_with_an_index_computed_over_its_space_is_one_kernel():
    def f(x, i):
        return x.gather(1, (i * 2).clamp(max=8)) * 2

    record = compile_and_check(f, (torch.randn(4, 9), ids((4, 3), 9)))
    assert plan_counts(record) == (1, 0, 0), record["plan"]
    assert re.search(r"gather f32 in\d size=9 stride=1 e\d", record["plan"]), record["plan"]


def test_embedding_of_a_computed_index_reads_it_from_memory():
    def f(i, w):
        return torch.nn.functional.embedding(i.clamp(max=5), w) + 1

    record = compile_and_check(f, (ids((4, 3), 9), torch.randn(9, 16)))
    assert plan_counts(record) == (2, 0, 0), record["plan"]


def test_gather_of_a_lazy_source_materialises_it_first():
    def f(x, i):
        return torch.index_select(x.exp(), 1, i) + 1

    record = compile_and_check(f, (torch.randn(4, 9), ids((11,), 9)))
    assert plan_counts(record) == (2, 0, 0), record["plan"]
    assert "index_select" not in record["plan"]


def test_pointwise_kernels_walk_channels_last_tensors_in_memory_order():
    """A kernel over channels-last tensors walks C innermost (one collapsed dimension, vector accesses): in row-major
    order of [N, C, H, W] consecutive threads would step by C elements."""
    import torch.nn.functional as F

    def tail(x, mean, var, w, b):
        y = F.batch_norm(x, mean, var, w, b, False, 0.1, 1e-5)
        y += x
        return F.relu(y, inplace=True)

    x = torch.randn(4, 32, 14, 14).contiguous(memory_format=torch.channels_last)
    stats = [torch.randn(32), torch.rand(32) + 0.5, torch.randn(32), torch.randn(32)]
    record = compile_and_check(tail, [x, *stats])
    assert plan_counts(record) == (1, 0, 0), record["plan"]
    # the statistics, one per channel, keep N*H*W and C apart
    assert "// k0: pointwise over [784, 32] (iteration space [4, 14, 14, 32]), groups of 4" in record["cuda_source"]


def test_convolution_bias_is_added_by_the_next_kernel():
    """torch adds a convolution's bias in a kernel of its own: the plan calls the convolution without it and the
    GELU's kernel adds it (a bias by keyword keeps torch's call whole)."""
    import torch.nn.functional as F

    x, w, b = torch.randn(2, 8, 10, 10), torch.randn(16, 8, 3, 3) / 9, torch.randn(16)
    record = compile_and_check(lambda x, w, b: F.gelu(F.conv2d(x, w, b, 1, 1)) * 2, [x, w, b])
    assert plan_counts(record) == (1, 0, 1)
    assert re.search(r"extern %\d+ = torch.conv2d without its bias -> b\d+", record["plan"]), record["plan"]
    fastcomp.reset()
    record = compile_and_check(lambda x, w, b: F.gelu(F.conv2d(x, w, bias=b, padding=1)), [x, w, b])
    assert plan_counts(record) == (1, 0, 1) and "without its bias" not in record["plan"], record["plan"]


def test_views_handed_to_torch_are_made_by_as_strided_only_of_planned_tensors():
    """A view of a tensor fastcomp allocates is made by one as_strided call on it; a view of a torch result is made
    by its own op on that result, which may be laid out otherwise than planned (and must be aliased, not copied)."""
    record = compile_and_check(lambda x: torch.cumsum((x * 2).t()[1:], 0), [torch.randn(6, 5)])
    assert re.search(r"extern %\d+ = as_strided\(b\d+\)  # Tensor.__getitem__", record["plan"]), record["plan"]
    fastcomp.reset()
    record = compile_and_check(lambda x: torch.cumsum(torch.cumsum(x, 0).t(), 0), [torch.randn(6, 5)])
    assert "as_strided" not in record["plan"] and re.search(r"extern %\d+ = Tensor.t\n", record["plan"]), record["plan"]


def _conv_results(plan):
    """The plan's convolution results ([2, 8, 10, 10] extern buffers), in order."""
    return re.findall(r"^b\d+ = extern f32\[2, 8, 10, 10\].*$", plan, re.M)


def test_values_between_convolutions_are_planned_channels_last():
    """cuDNN transposes NCHW tensors around each convolution: the values only convolutions, elementwise ops and
    pooling read are planned NHWC, the first convolution reads an NHWC copy of the NCHW input, and each reads an
    NHWC copy of its weight (made by a kernel of the plan, not inside torch's call)."""
    from tests.backend import conv_chains

    nhwc = conv_chains.nhwc_strides()
    record = compile_and_check(conv_chains.basic_block, conv_chains.inputs())
    plan = record["plan"]
    assert [nhwc in r for r in _conv_results(plan)] == [True, True], plan
    assert re.search(r"^extern %\d+ = torch.conv2d taking b\d+ as 0, b\d+ as 1$", plan, re.M), plan
    assert len(re.findall(r"^extern %\d+ = torch.conv2d.* b\d+ as 1$", plan, re.M)) == 2, plan
    # the input's copy, the batch norm and ReLU between the convolutions; the residual sum and ReLU are the
    # global average pooling's prologue (one row-reduce kernel reading the second convolution's NHWC result)
    assert len(re.findall(r"^b\d+ = alloc f32\[2, 8, 10, 10\] " + re.escape(nhwc), plan, re.M)) == 2, plan
    assert "adaptive_avg_pool2d" not in plan and re.search(r"row_reduce shape=\[2,8,100\]", plan), plan
    fastcomp.reset()
    with fastcomp.config.patch(channels_last=False):
        record = compile_and_check(conv_chains.basic_block, conv_chains.inputs())
    assert nhwc not in record["plan"], record["plan"]


@pytest.mark.parametrize("name", ["viewed", "returned", "declined"])
def test_layouts_something_observes_stay_as_traced(name):
    """A view of a convolution's result, or a value the caller gets, keeps the traced layout, and with it the
    convolution before it (a lone convolution gains nothing); an op that runs through torch on a replanned value is
    found while lowering, which then plans the whole graph as traced."""
    from tests.backend import conv_chains

    record = compile_and_check(getattr(conv_chains, name), conv_chains.inputs())
    assert conv_chains.nhwc_strides() not in record["plan"], record["plan"]


def masked_attention(q, k, v, mask):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask) * 2


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_masked_half_attention_rounds_as_the_kernel_torch_picks(dtype):
    """A masked f16 or bf16 head is an attention kernel rounded as the kernel torch runs it on: the
    memory-efficient one (the probabilities rounded) first by default, the math path (everything in f32, the
    output rounded) when only that is enabled; where torch would pick cuDNN's (a row the mask leaves no key: the
    mean of the values, not 0) the call stays torch's. Rehearsal models torch's pick from the SDPA settings."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = (torch.randn(2, 4, 16, 32, dtype=dtype) for _ in range(3))
    mask = torch.randn(2, 1, 16, 16, dtype=dtype)
    expected = {None: ((2, 0, 0), "rounding=probabilities"), (SDPBackend.MATH,): ((2, 0, 0), "rounding=output"),
                (SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH): ((1, 0, 1), "scaled_dot_product_attention")}
    for backends, (counts, text) in expected.items():
        fastcomp.reset()
        with contextlib.ExitStack() as stack:
            if backends:
                stack.enter_context(sdpa_kernel(list(backends), set_priority=True))
            record = compile_and_check(masked_attention, (q, k, v, mask))
        assert plan_counts(record) == counts, (backends, record["plan"])
        assert text in record["plan"], (backends, record["plan"])


def _two_heads_on_one_causal_mask(q, k, v):
    """GPT-2's attention under transformers' sdpa path: a boolean causal mask built once, expanded to the batch,
    passed to every layer's F.scaled_dot_product_attention."""
    t = q.size(2)
    i = torch.arange(t, device=q.device)
    mask = (i[None, None, None, :] <= i[None, None, :, None]).expand(q.size(0), -1, t, t)
    a = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.125)
    return torch.nn.functional.scaled_dot_product_attention(a, k, v, attn_mask=mask)


@contextlib.contextmanager
def _sdp_kernels(mem_efficient, math):
    saved = torch.backends.cuda.mem_efficient_sdp_enabled(), torch.backends.cuda.math_sdp_enabled()
    torch.backends.cuda.enable_mem_efficient_sdp(mem_efficient)
    torch.backends.cuda.enable_math_sdp(math)
    try:
        yield
    finally:
        torch.backends.cuda.enable_mem_efficient_sdp(saved[0])
        torch.backends.cuda.enable_math_sdp(saved[1])


def test_a_boolean_mask_torch_runs_on_cudnn_is_passed_as_one_bias_the_plan_makes():
    """Where torch runs a masked bf16 head on cuDNN (rehearsal's model: the first kernel enabled in its priority
    order), the call stays torch's, but its boolean mask is passed as the additive bias torch would make of it:
    one kernel of the plan, shared by both heads on the mask, instead of three launches inside each call."""
    q, k, v = (torch.randn(2, 4, 16, 8, dtype=torch.bfloat16) for _ in range(3))
    with _sdp_kernels(mem_efficient=False, math=False), fastcomp.config.patch(attention_mask_bias=True):
        record = compile_and_check(_two_heads_on_one_causal_mask, (q, k, v))
        plan = record["plan"]
        takes = re.findall(r"^extern %\d+ = torch._C._nn.scaled_dot_product_attention taking b(\d+) as attn_mask$",
                           plan, re.M)
        # Both take the one bias buffer (the second kernel, the same as the first, left out), not a view of it: a
        # view has no tensor of its own to pass.
        assert len(takes) == 2 and takes[0] == takes[1], plan
        assert re.search(rf"^b{takes[0]} = alloc bf16\[2, 1, 16, 16\]$", plan, re.M), plan
        assert plan.count("= where bf16") == 1 and "constant f32 -65504" in plan, plan
        # Where torch's kernel takes the mask itself (the memory-efficient one), nothing is passed. (Rehearsal adds
        # no guards on the SDPA settings: other sizes make the second compile.)
        with _sdp_kernels(mem_efficient=True, math=True):
            record = compile_and_check(_two_heads_on_one_causal_mask, tuple(t[:1] for t in (q, k, v)))
        assert " taking " not in record["plan"], record["plan"]
    # Off, torch's call converts the mask.
    with _sdp_kernels(mem_efficient=False, math=False), fastcomp.config.patch(attention_mask_bias=False):
        record = compile_and_check(_two_heads_on_one_causal_mask, tuple(t[:, :2] for t in (q, k, v)))
    assert " taking " not in record["plan"], record["plan"]
