"""The CUDA backend on a GPU: every op-suite case, at every shape and float dtype, equals eager on fresh random
inputs and runs as the plan says (generated kernels, cuBLASLt calls, extern torch ops); the seed workloads too."""
import contextlib
import logging
import os
import re

import pytest
import torch

import fastcomp
from fastcomp.testing import CompileCounter
from tests.backend.op_suite import CASES
from tests.helpers import assert_same

pytestmark = pytest.mark.gpu

TOLERANCE = {torch.float32: (1e-5, 1e-5), torch.float16: (1e-2, 1e-2), torch.bfloat16: (1e-2, 2e-2)}


@contextlib.contextmanager
def perf_hints(caplog):
    """FASTCOMP_LOGS=perf_hints for the block; yields a function giving the hint messages logged so far."""
    caplog.set_level(logging.DEBUG, logger="fastcomp")
    fastcomp.set_logs(perf_hints=True)
    try:
        yield lambda: [r.getMessage() for r in caplog.records if r.name == "fastcomp.perf_hints"]
    finally:
        fastcomp.set_logs()


def plan_counts(record):
    m = re.match(r"cuda: (\d+) kernels, (\d+) cuBLAS calls, (\d+) extern ops", record["backend"])
    assert m, record["backend"]
    return tuple(int(g) for g in m.groups())


def as_close_to_exact(fn, args, i, actual, expected):
    """Whether output i of fn(*args), computed in float64, is at most twice as far from `actual` as from eager's
    `expected` (plus a few float32 ulps): fastcomp's error is no worse than eager's own."""
    if not expected.is_floating_point():
        return False
    exact = fn(*[a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args])
    exact = exact[i] if isinstance(exact, tuple) else exact
    ours, theirs = (actual.double() - exact).abs(), (expected.double() - exact).abs()
    return bool((ours <= 2 * theirs + 4 * torch.finfo(expected.dtype).eps * exact.abs()).all())


def check(fn, make_args, dtype, calls=2):
    compiled = fastcomp.compile(fn)
    rtol, atol = TOLERANCE[dtype]
    with CompileCounter() as cc, torch.no_grad():
        for _ in range(calls):
            args = make_args()
            expected = fn(*args)
            actual = compiled(*args)
            if isinstance(expected, torch.Tensor):
                expected, actual = (expected,), (actual,)
            assert isinstance(actual, tuple) and len(actual) == len(expected), type(actual)
            for i, (a, e) in enumerate(zip(actual, expected)):
                # Sums of thousands of terms differ from torch's in summation order: the absolute tolerance
                # scales with the result's magnitude (an element near 0 cannot be within 1e-5 of itself).
                scale = e.abs().max().item() if e.is_floating_point() and e.numel() else 1.0
                try:
                    assert_same(a, e, rtol=rtol, atol=atol * max(1.0, scale))
                except AssertionError:
                    # A sum that cancels (2.4 from 131072 terms of size 1) is ill-conditioned: then fastcomp's value
                    # must be as close to the float64 result as eager's is.
                    if not as_close_to_exact(fn, args, i, a, e):
                        raise
    assert cc.graph_count == 1 and cc.break_count == 0, cc.records
    return cc.records[0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_op_matches_eager(case, dtype):
    if dtype not in case.dtypes:
        pytest.skip("dtype not in the case")
    for shape in case.shapes:
        fastcomp.reset()
        with case.settings():
            record = check(case.fn, lambda: case.make(shape, dtype, "cuda"), dtype)
        assert plan_counts(record) == case.plan, (shape, record["plan"])


def test_non_default_stream_orders_with_eager_work():
    def f(x):
        return torch.softmax(x * 2.0, -1) + 1.0

    compiled = fastcomp.compile(f)
    side = torch.cuda.Stream()
    x = torch.randn(512, 4096, device="cuda")
    side.wait_stream(torch.cuda.current_stream())  # x is written on the default stream
    with torch.no_grad(), torch.cuda.stream(side):
        y = x.mul(3.0)  # queued on the side stream just before the compiled call reads it
        out = compiled(y)
    side.synchronize()
    torch.testing.assert_close(out, f(x * 3.0), rtol=1e-5, atol=1e-5)


def test_graph_needing_gradients_runs_through_torch():
    lin = torch.nn.Linear(16, 16).cuda()
    compiled = fastcomp.compile(lin)
    x = torch.randn(4, 16, device="cuda")
    with CompileCounter() as cc:
        out = compiled(x)
    assert "torch runner" in cc.records[0]["backend"] and "gradients" in cc.records[0]["backend"]
    out.sum().backward()
    assert lin.weight.grad is not None


def test_graph_with_views_of_parameters_under_no_grad_runs_on_the_cuda_backend():
    # Under no_grad a view of a parameter still requires grad (ViT's cls_token.expand(B, -1, -1)), yet nothing
    # records gradients: the graph is the CUDA backend's, and its outputs' requires_grad are eager's.
    token = torch.nn.Parameter(torch.randn(1, 1, 8, device="cuda"))

    def f(x):
        t = token.expand(x.shape[0], -1, -1)
        return torch.cat((t, x), dim=1).relu() * 2, t, token[0]

    compiled = fastcomp.compile(f)
    x = torch.randn(4, 3, 8, device="cuda")
    with torch.no_grad(), CompileCounter() as cc:
        expected = f(x)
        compiled(x)  # runs through torch while the kernels compile
        fastcomp.wait_for_compiles()
        out = compiled(x)
    assert cc.records[0]["backend"].startswith("cuda:"), cc.records[0]["backend"]
    assert [t.requires_grad for t in out] == [t.requires_grad for t in expected] == [False, True, True]
    assert_same(out, expected)


def _views_made_under_no_grad(x):
    with torch.no_grad():
        v = x[-2:, ::2]
    return v[1:, 1::2]


def _in_place_on_a_view_made_under_no_grad(x):
    with torch.no_grad():
        v = x[None]
    v.clamp_(min=0)  # eager: RuntimeError, a view made under no_grad modified in place with grad mode on
    return v


def _outcome(fn):
    """What autograd makes of fn's result: the error it raises, or (requires_grad, the gradient reaching x)."""
    x = torch.randn(3, 6, device="cuda", requires_grad=True)
    try:
        out = fn(x.clone())
    except RuntimeError as e:
        return str(e).split(".")[0]
    grad = torch.autograd.grad(out.sum(), x, allow_unused=True)[0] if out.requires_grad else None
    return out.requires_grad, None if grad is None else grad.tolist()


@pytest.mark.parametrize("f", [_views_made_under_no_grad, _in_place_on_a_view_made_under_no_grad])
def test_views_made_under_no_grad_inside_a_grad_mode_graph_keep_eagers_autograd(f):
    # Fuzz seed 104 #859, #6903, #11012: where grad mode switches inside a graph, torch makes its views.
    compiled = fastcomp.compile(f)
    expected = _outcome(f)
    for _ in range(2):
        assert _outcome(compiled) == expected


def test_output_memory_is_torch_allocated():
    def f(x):
        return torch.exp(x) + 1

    compiled = fastcomp.compile(f)
    x = torch.randn(1 << 20, device="cuda")
    with torch.no_grad():
        compiled(x)
        before = torch.cuda.memory_allocated()
        out = compiled(x)
        assert torch.cuda.memory_allocated() == before + out.numel() * 4
        del out
        assert torch.cuda.memory_allocated() == before


def test_background_compile_answers_through_torch_then_switches_to_kernels():
    from fastcomp import _C

    def f(x):
        return torch.sigmoid(x * 3.0 + 0.25) * x  # a program no other test compiles: a kernel-cache miss

    compiled = fastcomp.compile(f)
    before = _C._testing.kernel_cache_stats()["misses"]
    with fastcomp.config.patch(background_compile=True), torch.no_grad():
        x = torch.randn(3, 77, device="cuda")
        with CompileCounter() as cc:
            torch.testing.assert_close(compiled(x), f(x))  # answered while NVRTC runs on its thread
        assert cc.graph_count == 1
        assert fastcomp.wait_for_compiles(timeout=60)
        assert _C._testing.kernel_cache_stats()["misses"] == before + 1
        for _ in range(3):
            x = torch.randn(3, 77, device="cuda")
            torch.testing.assert_close(compiled(x), f(x), rtol=1e-5, atol=1e-6)


WARM_START = """
    import logging, torch, fastcomp
    from fastcomp._C import _testing as T
    lines = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    logging.getLogger("fastcomp").addHandler(handler)
    fastcomp.set_logs(compile=logging.DEBUG)
    torch.manual_seed(0)
    # f32 products with a kernel after each (erf-GELU and tanh are no cuBLASLt epilogue), so each graph has a
    # program for NVRTC.
    mlp = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256)).cuda()
    other = torch.nn.Linear(256, 384).cuda()

    def other_fn(x):
        return torch.tanh(other(x))

    def run(name, fn, x):
        compiled = fastcomp.compile(fn)
        torch.testing.assert_close(compiled(x), fn(x), rtol=1e-5, atol=1e-5)
        print(name, "first call loaded:", sum("cuda executable: loaded" in line for line in lines))
        fastcomp.wait_for_compiles(timeout=120)
        for _ in range(2):
            x = torch.randn_like(x)
            torch.testing.assert_close(compiled(x), fn(x), rtol=1e-5, atol=1e-5)
        print(name, "later calls loaded:", sum("cuda executable: loaded" in line for line in lines))

    # small_matmul off: these products are small enough for fastcomp's own kernel, which needs no cuBLASLt.
    with fastcomp.config.patch(background_compile=True, small_matmul=False), torch.no_grad():
        run("mlp", mlp, torch.randn(32, 256, device="cuda"))
        run("other", other_fn, torch.randn(32, 256, device="cuda"))
    print("nvrtc misses:", T.kernel_cache_stats()["misses"])
"""


def test_cublaslt_is_planned_in_the_background_until_it_is_warm(tmp_path):
    """cuBLASLt's first plan of a dtype in a process costs 30-110 ms, so it is made on the background thread (beside
    NVRTC on a cold start; alone on a warm one, whose cubin comes from the disk cache) while the first calls run
    through torch; once f32 is warm in the process, another graph's f32 product is planned at once, and with its
    cubin cached its first call runs the kernels."""
    from tests.runtime.test_cublaslt import run_python

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {"FASTCOMP_CACHE_DIR": str(tmp_path), "PYTHONPATH": root}
    cold = run_python(WARM_START, **env).splitlines()
    assert cold == ["mlp first call loaded: 0", "mlp later calls loaded: 1", "other first call loaded: 1",
                    "other later calls loaded: 2", "nvrtc misses: 2"], cold
    warm = run_python(WARM_START, **env).splitlines()
    assert warm == ["mlp first call loaded: 0", "mlp later calls loaded: 1", "other first call loaded: 2",
                    "other later calls loaded: 2", "nvrtc misses: 0"], warm


def test_a_view_starting_mid_vector_runs_the_kernels_compiled_for_any_alignment(caplog):
    """The program holds each kernel once, with 16-byte accesses; a call whose pointer is not aligned for them
    (here a view one float into its storage) launches the same kernels from a second program with scalar
    accesses, compiled on first need; aligned calls keep the vector kernels."""
    def f(x):
        return torch.softmax(x, -1) * 2.0 + torch.exp(x)  # a row kernel and a pointwise kernel

    compiled = fastcomp.compile(f)
    with perf_hints(caplog) as hints, torch.no_grad(), CompileCounter() as cc:
        aligned = torch.randn(64, 96, device="cuda")
        assert_same(compiled(aligned), f(aligned), rtol=1e-5, atol=1e-5)
        assert not any("not aligned" in h for h in hints())
        for _ in range(2):
            storage = torch.randn(64 * 96 + 1, device="cuda")
            shifted = storage[1:].view(64, 96)  # same sizes and strides: the guards pass
            assert shifted.data_ptr() % 16 == 4
            assert_same(compiled(shifted), f(shifted), rtol=1e-5, atol=1e-5)
            aligned = torch.randn(64, 96, device="cuda")
            assert_same(compiled(aligned), f(aligned), rtol=1e-5, atol=1e-5)
    assert cc.graph_count == 1
    assert sum("not aligned for its vector accesses" in h for h in hints()) == 1, hints()


def check_grouped_products(qkv, weights, mode, calls, caplog, plan_has):
    """Compiles `qkv(x, *weights)` in `mode`, checks four calls on fresh x against eager, that its three products of
    x are one grouped step (plan text `plan_has`), and that the step said once it made `calls` cuBLASLt calls
    when it could not make one."""
    compiled = fastcomp.compile(qkv, mode=mode)
    with perf_hints(caplog) as hints, torch.no_grad(), CompileCounter() as cc:
        for _ in range(4):
            x = torch.randn(192, 256, dtype=torch.bfloat16, device="cuda") / 4
            expected = qkv(x, *weights)
            assert_same(compiled(x, *weights), expected, rtol=2e-2, atol=2e-2 * expected.abs().max().item())
    assert cc.graph_count == 1 and cc.break_count == 0, cc.records
    assert all(text in cc.records[0]["plan"] for text in plan_has), cc.records[0]["plan"]
    split = [h for h in hints() if "do not lie at equal steps" in h]
    assert len(split) == (calls > 1), hints()
    assert calls == 1 or f"run as {calls} cuBLASLt calls" in split[0], split


@pytest.mark.parametrize("mode", [None, "reduce-overhead"], ids=["default", "reduce-overhead"])
@pytest.mark.parametrize("order, calls", [((0, 1, 2), 1), ((2, 1, 0), 3), ((0, 2, 1), 2), ((0, 1, 3), 2)],
                         ids=["in order", "reversed", "last two swapped", "unequal steps"])
def test_products_of_one_activation_match_eager_wherever_their_weights_lie(order, calls, mode, caplog):
    """x @ wq, x @ wk and x @ wv are one batched cuBLASLt call (plan/group_products.h) whose B batch stride is the
    distance between the weights when they lie at equal steps, first to last; otherwise the same step makes as
    few calls as the weights' places allow, says so once, and computes the same."""

    def qkv(x, wq, wk, wv):
        return torch.softmax((x @ wq) @ (x @ wk).transpose(-2, -1) / 16.0, -1) @ (x @ wv)

    slices = torch.randn(4, 256, 352, dtype=torch.bfloat16, device="cuda")  # slices at known places
    check_grouped_products(qkv, tuple(slices[i] for i in order), mode, calls, caplog, ["batch=3"])


@pytest.mark.parametrize("mode", [None, "reduce-overhead"], ids=["default", "reduce-overhead"])
@pytest.mark.parametrize("bias_order, calls", [((0, 1, 2), 1), ((2, 1, 0), 3), ((0, 2, 1), 2)],
                         ids=["biases in order", "biases reversed", "last two biases swapped"])
def test_linears_of_one_activation_with_biases_match_eager(bias_order, calls, mode, caplog):
    """F.linear's q, k and v with their biases: one batched call with a bias batch stride when weights and biases
    both lie at equal steps, else as few calls as both allow."""
    F = torch.nn.functional

    def qkv(x, wq, wk, wv, bq, bk, bv):
        scores = F.linear(x, wq, bq) @ F.linear(x, wk, bk).transpose(-2, -1) / 16.0
        return torch.softmax(scores, -1) @ F.linear(x, wv, bv)

    weights = torch.randn(3, 352, 256, dtype=torch.bfloat16, device="cuda")
    biases = torch.randn(3, 352, dtype=torch.bfloat16, device="cuda")
    args = (*weights.unbind(0), *(biases[i] for i in bias_order))
    check_grouped_products(qkv, args, mode, calls, caplog, ["batch=3", "epilogue=bias"])


@torch.jit.script
def _sqrt_of_last_size(q: torch.Tensor, factor: int) -> torch.Tensor:
    return torch.sqrt(torch.tensor(q.size(-1), dtype=torch.float) * factor)


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
@pytest.mark.parametrize("fn", [
    lambda x: (x * 2) / torch.sqrt(torch.tensor(x.size(-1), dtype=torch.float)).to(x.dtype),
    lambda x: (x * 2) / _sqrt_of_last_size(x, 1),  # DeBERTa-v2's scaled_size_sqrt: its result is on the CPU
], ids=["tensor_of_a_size", "torchscript"])
def test_cpu_scalar_tensors_beside_cuda_ones_are_torch_calls(fn, mode):
    """A CPU tensor in a CUDA graph is never read by a kernel (an illegal address, DeBERTa-v2 on an H100): the ops
    that make or take one run through torch, and the graph is not replayed as a CUDA graph (a CPU scalar becomes a
    kernel argument at capture)."""
    compiled = fastcomp.compile(fn, mode=mode)
    with CompileCounter() as cc, torch.no_grad():
        for n in (16, 16, 16):
            x = torch.randn(4, n, device="cuda")
            assert_same(compiled(x), fn(x))
        assert fastcomp.wait_for_compiles(timeout=60)
        for _ in range(3):
            x = torch.randn(4, 16, device="cuda")
            assert_same(compiled(x), fn(x))
    assert "a tensor on the CPU" in cc.records[0]["backend"], cc.records[0]["backend"]


def test_convolutions_take_the_layout_cudnn_gives(caplog):
    """cuDNN gives a channels-last result for a channels-last input where torch's meta function says contiguous:
    the trace takes the kernel's layout (kernel_layout.h), so user code that asks for it sees eager's answer, and
    no call copies a convolution's result into another layout (a ConvNeXt block: layer norm over channels between
    permutes, a depthwise and a pointwise convolution)."""
    import torch.nn.functional as F

    def block(x, ln_w, ln_b, dw, dw_b, pw):
        y = F.layer_norm(x.permute(0, 2, 3, 1), (x.shape[1],), ln_w, ln_b).permute(0, 3, 1, 2)
        y = F.conv2d(y, dw, dw_b, padding=3, groups=y.shape[1])
        y = F.gelu(F.conv2d(y, pw)) * 0.5
        # eager's branch: a channels-last result cannot be viewed flat
        return y.view(y.shape[0], -1) if y.is_contiguous() else y.flatten(1) + 1.0

    compiled = fastcomp.compile(block)
    with perf_hints(caplog) as hints, torch.no_grad(), CompileCounter() as cc:
        for _ in range(3):
            args = [torch.randn(4, 56, 56, 32, device="cuda").permute(0, 3, 1, 2), torch.randn(32, device="cuda"),
                    torch.randn(32, device="cuda"), torch.randn(32, 1, 7, 7, device="cuda") / 7,
                    torch.randn(32, device="cuda"), torch.randn(64, 32, 1, 1, device="cuda") / 6]
            expected = block(*args)
            actual = compiled(*args)
            assert actual.stride() == expected.stride()
            # cuDNN's f32 convolutions run in TF32 (10-bit mantissas): an ulp of difference in the layer norm
            # before them can move a product by 1e-3 of its size.
            assert_same(actual, expected, rtol=2e-3, atol=2e-3 * expected.abs().max().item())
    assert cc.graph_count == 1 and cc.break_count == 0, cc.records
    assert not any("another layout than its meta function said" in h for h in hints()), hints()


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
@pytest.mark.parametrize("name", ["basic_block", "viewed", "returned", "declined"])
def test_convolution_chains_in_channels_last_give_eager_results_and_layouts(name, mode, caplog):
    """Values between convolutions planned NHWC (csrc/plan/channels_last.h): eager's values and output strides,
    where the plan chose NHWC and where something observes a layout and it keeps the traced one; and no
    convolution's result comes back in another layout than planned (which would cost a copy each call)."""
    from tests.backend import conv_chains

    fn = getattr(conv_chains, name)
    compiled = fastcomp.compile(fn, mode=mode)
    with perf_hints(caplog) as hints, torch.no_grad(), CompileCounter() as cc:
        for call in range(5):
            if call == 1:
                assert fastcomp.wait_for_compiles(timeout=60)
            args = conv_chains.inputs("cuda", channels=32, size=14)
            got, want = compiled(*args), fn(*args)
            for g, w in zip(got if isinstance(got, tuple) else [got], want if isinstance(want, tuple) else [want]):
                assert g.stride() == w.stride()
                # cuDNN's f32 convolutions run in TF32, and its NHWC and NCHW kernels round differently
                assert_same(g, w, rtol=2e-3, atol=2e-3 * max(1.0, w.abs().max().item()))
    assert (cc.graph_count, cc.break_count) == (1, 0), cc.records
    nhwc = conv_chains.nhwc_strides(channels=32, size=14)
    assert (nhwc in cc.records[0]["plan"]) == (name == "basic_block"), cc.records[0]["plan"]
    assert not any("another layout than its meta function said" in h for h in hints()), hints()


def attention_heads(x, heads):
    """[B, L, H*E] split into heads as attention layers do: [B, H, L, E] over [B, L, H, E] memory."""
    B, L, D = x.shape
    return x.view(B, L, heads, D // heads).transpose(1, 2)


def attention_block(q_in, k_in, v_in, mask, causal, kv_heads):
    q, k, v = attention_heads(q_in, 8), attention_heads(k_in, kv_heads), attention_heads(v_in, kv_heads)
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                                         enable_gqa=kv_heads != 8)
    B, H, L, E = o.shape
    back = o.transpose(1, 2)
    # view() where the kernel's layout allows it, as code written against eager's layout does
    flat = back.view(B, L, H * E) if back.is_contiguous() else back.reshape(B, L, H * E)
    return flat * 2, o.stride()


def masked_attention(q, k, v, mask):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.gpu
def test_masked_bf16_attention_follows_the_kernel_torch_picks():
    """A masked bf16 head is fastcomp's kernel where torch runs it on its memory-efficient kernel (rounded as that
    rounds) and torch's call where torch picks cuDNN's (a row with no key: the mean of the values). The graph
    guards the SDPA settings: changing them compiles again."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = (torch.randn(2, 8, 64, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    mask = torch.randn(2, 1, 64, 64, device="cuda", dtype=torch.bfloat16)
    compiled = fastcomp.compile(masked_attention)
    rtol, atol = TOLERANCE[torch.bfloat16]
    orders = ([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH], [SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH])
    picks = []
    with CompileCounter() as cc, torch.no_grad():
        for order in orders:
            with sdpa_kernel(order, set_priority=True):
                picks.append(torch._fused_sdp_choice(q, k, v, mask))
                for call in range(2):
                    assert_same(compiled(q, k, v, mask), masked_attention(q, k, v, mask), rtol=rtol, atol=atol)
                    assert fastcomp.wait_for_compiles(timeout=60)
    assert picks[0] == SDPBackend.EFFICIENT_ATTENTION.value, picks
    assert cc.frame_count == 2, cc.recompile_reasons
    assert "sdp_enabled()" in cc.recompile_reasons[0], cc.recompile_reasons
    assert cc.records[0]["backend"].startswith("cuda: 1 kernels, 0 cuBLAS calls, 0 extern ops"), cc.records[0]["backend"]
    assert "rounding=probabilities" in cc.records[0]["plan"]
    # cuDNN's kernel where torch takes it for these operands, else the math path's rounding
    if picks[1] == SDPBackend.CUDNN_ATTENTION.value:
        assert "1 extern ops" in cc.records[1]["backend"], cc.records[1]["backend"]
    else:
        assert picks[1] == SDPBackend.MATH.value and "rounding=output" in cc.records[1]["plan"], (picks, cc.records[1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("form", ["causal", "bool_mask", "float_mask", "gqa", "long"])
@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_attention_results_have_the_kernels_layout(dtype, form, mode, caplog):
    """F.scaled_dot_product_attention through torch's kernels (flash, memory-efficient, cuDNN) lays its result out
    as that kernel does ([B, L, H, E] in memory, where the meta function says contiguous): the trace probes it, so
    the graph has eager's strides, a view of the result transposed back is traced, and no call copies the result
    into another layout."""
    B, L = 2, 1024 if form == "long" else 64
    kv_heads = 2 if form == "gqa" else 8

    def make():
        xs = [torch.randn(B, L, 8 * 64, device="cuda", dtype=dtype) for _ in range(2)]
        x_kv = torch.randn(B, L, kv_heads * 64, device="cuda", dtype=dtype)
        mask = None
        if form == "bool_mask":
            mask = torch.rand(B, 1, L, L, device="cuda") > 0.2
        elif form == "float_mask":
            mask = torch.randn(B, 1, L, L, device="cuda", dtype=dtype)
        return xs[0], x_kv, x_kv if form == "gqa" else xs[1], mask

    causal = form in ("causal", "gqa", "long")
    compiled = fastcomp.compile(attention_block, mode=mode)
    rtol, atol = TOLERANCE[dtype]
    with perf_hints(caplog) as hints, torch.no_grad(), CompileCounter() as cc:
        for call in range(4):
            if call == 1:
                assert fastcomp.wait_for_compiles(timeout=60)
            q_in, k_in, v_in, mask = make()
            got = compiled(q_in, k_in, v_in, mask, causal, kv_heads)
            want = attention_block(q_in, k_in, v_in, mask, causal, kv_heads)
            assert got[1] == want[1]
            assert got[0].stride() == want[0].stride()
            assert_same(got[0], want[0], rtol=rtol * 10, atol=atol * 10)
    assert (cc.graph_count, cc.break_count) == (1, 0), cc.records
    assert not any("another layout than its meta function said" in h for h in hints()), hints()


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_max_pool_propagates_nan_and_keeps_minus_inf_on_the_gpu(channels_last, mode):
    from tests.backend.test_plans_on_cpu import pooled_specials

    fn = lambda x: torch.nn.functional.max_pool2d(x, 3, 2, 1) * 2  # noqa: E731
    compiled = fastcomp.compile(fn, mode=mode)
    with torch.no_grad(), CompileCounter() as cc:
        for call in range(3):
            if call == 1:
                assert fastcomp.wait_for_compiles(timeout=60)
            x = pooled_specials("cuda")
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            got, want = compiled(x), fn(x)
            torch.testing.assert_close(got, want, equal_nan=True)
            assert got.stride() == want.stride()
    assert (cc.graph_count, cc.break_count) == (1, 0)
    assert plan_counts(cc.records[0]) == (3, 0, 0), cc.records[0]["plan"]


def test_a_deferred_reshaping_view_returned_beside_its_base_is_a_view_of_it():
    """A view of a lazy value stays an expression of its kernel (Lowerer::defer_reshape) until a buffer is needed:
    then it is a view of its base's buffer, so returned beside its base it shares its memory, as in eager."""
    def f(x):
        h = x * 2
        v = h.view(-1)
        return v, h, (v + 1).to(torch.bfloat16)

    x = torch.randn(4, 33, device="cuda")
    with CompileCounter() as cc, torch.no_grad():
        v, h, c = fastcomp.compile(f)(x)
    ev, eh, ec = f(x)
    assert_same(v, ev), assert_same(h, eh), assert_same(c, ec)
    assert v.data_ptr() == h.data_ptr() and v._base is not None
    v.add_(1)
    assert torch.equal(h.view(-1), v)
    assert plan_counts(cc.records[0])[0] == 1, cc.records[0]["plan"]


def test_a_boolean_mask_passed_to_cudnn_as_the_plans_bias_gives_eager_bits():
    """A masked bf16 head torch runs on cuDNN takes the bias a kernel of the plan made of its boolean mask (the
    values and layout read from torch's own conversion, fastcomp/_attention_bias.py): the very tensor torch makes,
    so the result is eager's to the bit, padded rows (no key at all) included."""
    from tests.backend.test_lowering import _two_heads_on_one_causal_mask

    def padded(q, k, v, keep):
        mask = keep[:, None, None, :] & keep[:, None, :, None]
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask.expand(-1, q.size(1), -1, -1))

    q, k, v = (torch.randn(4, 12, 128, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    keep = torch.rand(4, 128, device="cuda") > 0.3
    if torch._fused_sdp_choice(q, k, v, keep[:, None, None, :].expand(4, 12, 128, 128)) != 3:
        pytest.skip("torch does not run this head on cuDNN here")
    for fn, args in ((_two_heads_on_one_causal_mask, (q, k, v)), (padded, (q, k, v, keep))):
        with CompileCounter() as cc, torch.no_grad(), fastcomp.config.patch(attention_mask_bias=True):
            out = fastcomp.compile(fn)(*args)
            fastcomp.wait_for_compiles()
            out = fastcomp.compile(fn)(*args)
        assert torch.equal(out, fn(*args))
        assert re.search(r"taking b\d+ as attn_mask", cc.records[0]["plan"]), cc.records[0]["plan"]
