"""Autocast: `with torch.autocast(...)` blocks inside compiled code, and compiled code called under autocast. The
graph makes autocast's casts explicit (Tensor.to nodes, the op on the cast tensors, autocast suspended while it
runs), or, where an op's casts cannot be made explicit or gradients are recorded, keeps the blocks and runs its ops
under autocast. Either way results equal eager's exactly, dtypes included; blocks nest, the state is guarded, and
it is left as eager leaves it, also when the graph raises or breaks inside a block."""
import warnings

import pytest
import torch
import torch.nn.functional as F

import fastcomp
from fastcomp.testing import CompileCounter
from tests import helpers

BF16 = torch.bfloat16


def assert_same(actual, expected):
    """Equal values and dtypes, leaf by leaf, with no tolerance: the same kernels ran on the same casts."""
    helpers.assert_same(actual, expected, rtol=0, atol=0)


def autocast_state():
    return (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"), torch.is_autocast_cache_enabled())


@pytest.fixture(autouse=True, params=["all", "cuda"], ids=["explicit-cpu", "kept-cpu"])
def explicit_autocast(request):
    """Every test runs with CPU autocast made explicit (fastcomp.config.explicit_autocast="all", the form CUDA graphs
    take by default) and kept (the default on the CPU); tests of one form say so (`explicit`, or patch it)."""
    with fastcomp.config.patch(explicit_autocast=request.param):
        yield request.param


@pytest.fixture(autouse=True)
def state_is_left_as_found():
    before = autocast_state()
    yield
    assert autocast_state() == before


# A test of the explicit form on the CPU: the fixture's "all" only.
explicit = pytest.mark.parametrize("explicit_autocast", ["all"], indirect=True)


def mixed_ops(x, w, b, img, kernel):
    with torch.autocast("cpu", dtype=BF16):
        h = F.linear(x, w, b)              # cast to bf16
        p = torch.softmax(h, -1)           # as CPU autocast's lists say (bf16; CUDA's say float32)
        n = F.layer_norm(h, (h.shape[-1],))
        c = torch.cat([h, x[:, : h.shape[-1]]], 0)  # promoted to the widest: float32
        m = h @ w                          # a bf16 result times a float32 weight
        conv = F.conv2d(img, kernel)       # bf16
    return h, p, n, c, m, conv, h.dtype, conv.dtype


def inputs():
    return (torch.randn(4, 8), torch.randn(8, 8), torch.randn(8), torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3))


def test_block_inside_compiled_code_gives_eager_results_and_dtypes():
    compiled = fastcomp.compile(mixed_ops)
    with CompileCounter() as cc:
        for _ in range(2):
            args = inputs()
            assert_same(compiled(*args), mixed_ops(*args))
    assert (cc.frame_count, cc.graph_count, cc.break_count) == (1, 1, 0), cc.records
    assert mixed_ops(*inputs())[-2:] == (BF16, BF16)  # autocast did cast: the test sees it


def graph_ops(fn, *args):
    (graph,) = fastcomp.explain(fn)(*args).graphs
    return [line.split(" = ", 1)[1].split("(", 1)[0] for line in graph.splitlines() if " = " in line and
            " = input " not in line]


@explicit
def test_casts_become_nodes_of_their_own_and_the_block_leaves_none():
    """F.linear's three casts to bfloat16, the promotion of torch.cat's float32 argument, conv2d's casts: Tensor.to
    nodes before each op, in autocast's order; softmax and layer_norm, which CPU autocast leaves alone, as they are.
    No enter/leave call remains, so a backend sees ordinary ops."""
    assert graph_ops(mixed_ops, *inputs()) == [
        "Tensor.to", "Tensor.to", "Tensor.to", "torch._C._nn.linear", "torch.softmax",
        "torch.nn.functional.layer_norm", "Tensor.__getitem__", "Tensor.to", "torch.cat", "Tensor.to",
        "operator.matmul", "Tensor.to", "Tensor.to", "torch.conv2d"]


@explicit
def test_an_op_whose_casts_are_inside_it_keeps_autocast_in_the_graph():
    """CPU autocast casts inside torch.einsum (at the matmul it becomes), after einsum's own calls: no casts before
    the op say what autocast does, so the trace starts again keeping autocast, and the graph's ops run under it."""
    def f(a, b):
        with torch.autocast("cpu", dtype=BF16):
            h = a @ b
            return torch.einsum("ij,jk->ik", h, b), h

    a, b = torch.randn(4, 8), torch.randn(8, 8)
    ops = graph_ops(f, a, b)
    assert ops[0] == "fastcomp._autocast.enter" and ops[-1] == "fastcomp._autocast.leave", ops
    assert "Tensor.to" not in ops
    compiled = fastcomp.compile(f)
    with CompileCounter() as cc:
        out = compiled(a, b)
    assert_same(out, f(a, b))
    assert out[0].dtype == BF16
    # The reason names the op and the user's line.
    assert "autocast kept, its ops run as torch calls under it: torch.functional.einsum at " in cc.records[0]["backend"]
    assert "test_autocast.py:" in cc.records[0]["backend"]


@explicit
def test_called_under_autocast_the_graph_runs_with_autocast_suspended():
    """Traced under the caller's autocast, with its casts explicit: while the graph runs, autocast is off (its torch
    calls take the cast tensors), and the caller's state is back afterwards, also when the graph raises. A block
    inside that switches autocast off gives float32, as in eager."""
    def f(x, w, index):
        h = F.linear(x, w)
        with torch.autocast("cpu", enabled=False):
            g = x @ w
        return torch.index_select(h, 0, index), g

    compiled = fastcomp.compile(f)
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    with torch.autocast("cpu", dtype=BF16):
        with CompileCounter() as cc:
            out = compiled(x, w, torch.tensor([0, 2]))
            assert_same(out, f(x, w, torch.tensor([0, 2])))
        assert [t.dtype for t in out] == [BF16, torch.float32]
        assert "autocast suspended" in cc.records[0]["backend"]
        assert torch.is_autocast_enabled("cpu")
        with pytest.raises(IndexError, match="out of range"):
            compiled(x, w, torch.tensor([9]))
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == BF16


def test_nested_blocks_disable_and_change_dtype():
    def f(q, k):
        with torch.autocast("cpu", dtype=BF16):
            a = q @ k
            with torch.autocast("cpu", enabled=False):
                b = q @ k                   # float32 again (timm's efficientvit attention, HF's rotary embeddings)
            with torch.autocast(device_type=q.device.type, dtype=torch.float16):
                c = q @ k
            d = torch.softmax(a, -1) + b
        return a, b, c, d, torch.is_autocast_enabled("cpu")

    compiled = fastcomp.compile(f)
    with CompileCounter() as cc:
        q, k = torch.randn(4, 4), torch.randn(4, 4)
        out = compiled(q, k)
        assert_same(out, f(q, k))
    assert [t.dtype for t in out[:4]] == [BF16, torch.float32, torch.float16, torch.float32]
    assert (cc.graph_count, cc.break_count) == (1, 0)


def test_compiled_code_called_under_autocast_is_traced_under_it_and_guarded():
    def f(x, w):
        return F.linear(x, w).relu() + F.layer_norm(x, (4,))

    compiled = fastcomp.compile(f)
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    with CompileCounter() as cc:
        for _ in range(2):
            with torch.autocast("cpu", dtype=BF16):
                assert_same(compiled(x, w), f(x, w))
    assert (cc.frame_count, cc.graph_count, cc.break_count) == (1, 1, 0)
    with CompileCounter() as cc:  # another autocast dtype: a recompile that says why
        with torch.autocast("cpu", dtype=torch.float16):
            assert_same(compiled(x, w), f(x, w))
    assert cc.frame_count == 1
    assert "fastcomp._autocast.state() == (True, torch.bfloat16" in cc.recompile_reasons[-1]
    assert "(actual (True, torch.float16" in cc.recompile_reasons[-1]
    with CompileCounter() as cc:  # no autocast: a graph of its own, in float32
        assert_same(compiled(x, w), f(x, w))
        assert compiled(x, w).dtype == torch.float32
    assert cc.frame_count == 1


def test_autocast_decorator_on_a_called_function():
    @torch.autocast("cpu", dtype=BF16)
    def project(x, w):
        return x @ w

    def f(x, w):
        return project(x, w).float() * 2, project(x, w).dtype

    compiled = fastcomp.compile(f)
    with CompileCounter() as cc:
        x, w = torch.randn(4, 4), torch.randn(4, 4)
        assert_same(compiled(x, w), f(x, w))
    assert (cc.graph_count, cc.break_count) == (1, 0), cc.records


def test_an_autocast_object_used_as_the_value_of_the_with():
    def f(x):
        with torch.autocast("cpu", dtype=BF16) as ctx:
            y = x @ x
        return y, ctx.fast_dtype

    compiled = fastcomp.compile(f)
    x = torch.randn(3, 3)
    assert_same(compiled(x), f(x))


def test_graph_break_inside_a_block_runs_that_frame_in_cpython():
    def f(x):
        with torch.autocast("cpu", dtype=BF16):
            y = x @ x
            print("inside")
            z = y @ x
        return z

    compiled = fastcomp.compile(f)
    x = torch.randn(4, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with CompileCounter() as cc:
            out = compiled(x)
    assert_same(out, f(x))
    assert out.dtype == BF16
    (record,) = cc.records
    assert record["graphs"] == 0 and record["breaks"] == 1


def test_error_inside_a_block_at_run_time_leaves_autocast_as_eager_does():
    def f(x, index):
        with torch.autocast("cpu", dtype=BF16):
            y = x @ x
            picked = torch.index_select(y, 0, index)  # the index is checked when the op runs
        return picked

    compiled = fastcomp.compile(f)
    x = torch.randn(4, 4)
    assert_same(compiled(x, torch.tensor([1, 2])), f(x, torch.tensor([1, 2])))
    with pytest.raises(IndexError, match="out of range"):
        f(x, torch.tensor([7]))
    assert autocast_state()[0] is False
    with pytest.raises(IndexError, match="out of range"):
        compiled(x, torch.tensor([7]))
    assert autocast_state()[0] is False  # the block was left: the fixture checks the rest


def test_changing_autocast_by_hand_is_a_graph_break():
    def f(x):
        y = x @ x
        torch.set_autocast_enabled("cpu", True)
        z = y @ x
        torch.set_autocast_enabled("cpu", False)
        return z

    compiled = fastcomp.compile(f)
    x = torch.randn(4, 4)
    with CompileCounter() as cc:
        out = compiled(x)
    assert_same(out, f(x))
    assert out.dtype == torch.get_autocast_dtype("cpu")
    assert cc.break_count == 2
    explained = fastcomp.explain(f)(x)
    assert "changes autocast outside a `with torch.autocast(...)` block" in explained.break_reasons[0].reason


@explicit
def test_training_step_under_autocast_gives_eager_gradients():
    """Gradients are recorded: the graph keeps autocast (whose cast cache makes a weight's gradients meet in one
    cast), and loss and gradients are eager's exactly."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    twin = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    twin.load_state_dict(model.state_dict())
    compiled = fastcomp.compile(twin)
    x = torch.randn(5, 8)
    with torch.autocast("cpu", dtype=BF16):
        expected = model(x).float().pow(2).mean()
        with CompileCounter() as cc:
            got = compiled(x).float().pow(2).mean()
    expected.backward()
    got.backward()
    assert cc.graph_count == 1
    assert "autocast kept" in cc.records[0]["backend"] and "gradients are recorded" in cc.records[0]["backend"]
    assert_same(got, expected)
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=0, atol=0, msg=name)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_cuda_autocast_lowers_to_the_cuda_backend_and_matches_eager(mode):
    """Under CUDA autocast the casts are nodes like any other: the CUDA backend lowers the graph (its bf16 products
    and kernels), which runs with autocast suspended; results are eager's within bf16's tolerance, dtypes exactly."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.LayerNorm(128),
                                torch.nn.Linear(128, 32)).cuda().eval()
    compiled = fastcomp.compile(model, mode=mode)
    with torch.no_grad(), torch.autocast("cuda", dtype=BF16):
        with CompileCounter() as cc:
            for _ in range(3):
                x = torch.randn(8, 64, device="cuda")
                out, expected = compiled(x), model(x)
                assert out.dtype == expected.dtype == BF16
                torch.testing.assert_close(out, expected, rtol=2e-2, atol=2e-2)
        assert torch.is_autocast_enabled("cuda")
    assert (cc.frame_count, cc.graph_count) == (1, 1)
    backend = cc.records[0]["backend"]
    assert backend.startswith("cuda:") and "autocast suspended" in backend, backend


def test_asking_whether_autocast_is_on_adds_no_state_guard_while_it_is_off():
    """HF's rotary embeddings ask torch.is_autocast_enabled(device) on every call: while autocast is off, the guard
    every graph has (torch._C._is_any_autocast_enabled()) covers the answer, and no other guard is paid for."""
    def f(x):
        if torch.is_autocast_enabled(x.device.type):
            return x * 2
        return x + 1

    x = torch.randn(3)
    guards = [str(g) for g in fastcomp.explain(f)(x).out_guards]
    assert any("torch._C._is_any_autocast_enabled() == False" in g for g in guards)
    assert not any("fastcomp._autocast.state()" in g for g in guards)
    with torch.autocast("cpu", dtype=BF16):  # on: the whole state is guarded
        guards = [str(g) for g in fastcomp.explain(f)(x).out_guards]
    assert "GLOBAL_STATE: fastcomp._autocast.state() == (True, torch.bfloat16" in "\n".join(guards)
    compiled = fastcomp.compile(f)
    with CompileCounter() as cc:
        assert_same(compiled(x), f(x))
        with torch.autocast("cpu", dtype=BF16):
            assert_same(compiled(x), f(x))  # on now: the branch differs, and a recompile takes it
    assert cc.frame_count == 2


@explicit
def test_a_copy_that_changes_nothing_is_seen_through_unless_it_is_written_or_returned():
    """CUDA autocast runs softmax of a float32 tensor as softmax(x, dtype=float32), whose float32 copy of x changes
    no value: the explicit form (softmax of x itself) is the same computation, and the proof sees through the copy.
    A copy that is written to or returned is another tensor than its source: no explicit form then."""
    from fastcomp import _autocast

    cpu, x, w = torch.device("cpu"), torch.empty(4, 8, device="meta"), torch.empty(8, 8, device="meta")
    with torch.autocast("cpu", dtype=BF16):
        assert _autocast.explicit_casts(lambda t: torch.softmax(t.to(t.dtype, copy=True), -1), (x,), {}, cpu) == []
        assert _autocast.explicit_casts(lambda t, u: t.to(t.dtype, copy=True) @ u, (x, w), {}, cpu) == [
            (("arg", 1), BF16), (("arg", 0), BF16)]
        for written_or_returned in (lambda t: t.to(t.dtype, copy=True), lambda t: t.to(t.dtype, copy=True).add_(1)):
            assert _autocast.explicit_casts(written_or_returned, (x,), {}, cpu) == (
                "a copy it makes under autocast is written to or returned")


def test_cpu_autocast_is_kept_by_default_so_that_cpu_kernels_see_it_as_in_eager():
    """CPU roll calls cat through the dispatcher, which CPU autocast casts in eager (and refuses for float16 under a
    bfloat16 region); the meta stand-ins do not show that call. By default CPU graphs keep autocast, so the compiled
    call raises as eager does, and the backend line says why the graph kept it."""
    def f(x):
        with torch.autocast("cpu", dtype=BF16):
            return x.roll(1, 0) * 2

    compiled = fastcomp.compile(f)
    with fastcomp.config.patch(explicit_autocast="cuda"):
        x = torch.randn(5, 3)
        with CompileCounter() as cc:
            assert_same(compiled(x), f(x))
        assert "fastcomp.config.explicit_autocast is 'cuda': cpu autocast stays" in cc.records[0]["backend"]
        half = torch.randn(5, 3, dtype=torch.float16)
        with pytest.raises(RuntimeError, match="prioritize"):
            f(half)
        with pytest.raises(RuntimeError, match="prioritize"):
            compiled(half)


def test_explicit_autocast_off_keeps_autocast_everywhere():
    with fastcomp.config.patch(explicit_autocast="off"):
        with CompileCounter() as cc:
            args = inputs()
            assert_same(fastcomp.compile(mixed_ops)(*args), mixed_ops(*args))
    assert "fastcomp.config.explicit_autocast is 'off'" in cc.records[0]["backend"]
    with pytest.raises(ValueError, match="explicit_autocast"):
        fastcomp.config.explicit_autocast = "cpu"


@explicit
def test_casts_of_the_ops_own_kernel_after_autocasts_are_not_taken_for_autocasts():
    """CUDA autocast casts sdpa's float32 mask to bf16; the math kernel below it then upcasts the bf16 query, key and
    value to float32 itself. Only the first are autocast's (its policies cast an op's arguments to one dtype): the
    explicit form casts the mask alone, and sdpa without autocast then makes the kernel's own casts. The stand-ins
    report a CUDA device, so this holds on a machine without one (autocast switched on by hand there)."""
    from fastcomp import _autocast

    cuda, sdpa = torch.device("cuda"), torch._C._nn.scaled_dot_product_attention
    q, mask = torch.empty(2, 4, 16, 8, device="meta", dtype=BF16), torch.empty(2, 4, 16, 16, device="meta")
    options = {"attn_mask": mask, "dropout_p": 0.0, "scale": 0.5, "is_causal": False}
    before = _autocast.state()
    _autocast.enter("cuda", True, BF16, True)
    try:
        assert _autocast.explicit_casts(sdpa, (q, q, q), options, cuda) == [(("kwarg", "attn_mask"), BF16)]
        assert _autocast.explicit_casts(sdpa, (q.float(), q, q), options, cuda) == [
            (("kwarg", "attn_mask"), BF16), (("arg", 0), BF16)]
    finally:
        _autocast.leave("cuda", before[2], before[3], before[4])
