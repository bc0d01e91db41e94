"""The tracer captures ordinary PyTorch code into one graph whose results equal eager's."""
import collections
import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

import fastcomp
from fastcomp.testing import CompileCounter
from tests.helpers import assert_same

SCALE = 2.0
Pair = collections.namedtuple("Pair", ["a", "b"])


@dataclasses.dataclass
class Out:
    y: torch.Tensor
    n: int


def check(fn, *make_args, calls=2, graphs=1):
    """Compiles fn, calls it `calls` times with fresh random inputs, compares with eager and counts graphs."""
    compiled = fastcomp.compile(fn)
    with CompileCounter() as cc:
        for _ in range(calls):
            args = [m() if callable(m) else m for m in make_args]
            assert_same(compiled(*args), fn(*args))
    assert cc.graph_count == graphs, cc.records
    assert cc.break_count == 0
    return cc


def rand(*shape, dtype=torch.float32):
    return lambda: torch.randn(*shape, dtype=dtype)


def test_pointwise_chain():
    def f(x):
        y = torch.sigmoid(x * 2.0 + 1.0)
        return torch.tanh(y * y) / (y.abs() + 1.0)

    check(f, rand(16))


def test_globals_closures_and_constants():
    offset = torch.tensor(0.5)

    def f(x):
        return x * SCALE + offset + math.sqrt(4.0)

    check(f, rand(3, 4))


def test_python_control_flow_on_shapes_and_values():
    def f(x, n):
        total = x
        for i in range(n):
            if i % 2 == 0:
                total = total + i
            else:
                total = total * 0.5
        while total.shape[0] > 2:
            total = total[1:]
        return total if x.ndim == 2 else -total

    check(f, rand(5, 3), 4)


def test_builtins_enumerate_zip_len_isinstance():
    def f(xs, w):
        out = []
        for i, (a, b) in enumerate(zip(xs, xs[1:])):
            if isinstance(a, torch.Tensor) and len(xs) > 1:
                out.append(a * b + i)
        assert hasattr(w, "shape") and getattr(w, "ndim") == 1
        return sum(out) + w, len(out)

    check(f, lambda: [torch.randn(3) for _ in range(4)], rand(3))


def test_comprehensions_and_lambdas():
    def f(x):
        ys = [x * k for k in range(3)]
        d = {f"k{k}": v.sum(0) for k, v in enumerate(ys)}
        g = lambda t: t + 1  # noqa: E731
        return g(torch.stack(ys)), d, tuple(v for v in ys if v is not None)

    check(f, rand(2, 3))


def test_containers_unpacking_and_outputs():
    def f(pair, d):
        a, *rest = pair
        first, second = d["x"], d.get("y", None)
        return {"sum": a + first, "rest": rest, "none": second}, Pair(a * 2, first), Out(a - first, 3)

    compiled = fastcomp.compile(f)
    args = ((torch.randn(2), torch.randn(2), torch.randn(2)), {"x": torch.randn(2)})
    out, pair, rec = compiled(*args)
    ref_out, ref_pair, ref_rec = f(*args)
    assert_same(out, ref_out)
    assert isinstance(pair, Pair) and isinstance(rec, Out) and rec.n == 3
    assert_same(tuple(pair), tuple(ref_pair))
    assert_same(rec.y, ref_rec.y)


def test_slicing_indexing_and_tensor_attributes():
    def f(x):
        n = x.shape[-1] // 2
        y = x[..., :n] + x[:, None, n:].squeeze(1)
        z = y.T.contiguous().view(-1) if x.dtype == torch.float32 else y
        return z, x.size(0), x.device, x.is_cuda, x[0, -1], x[[0, 1]]

    check(f, rand(4, 6))


def test_inplace_ops_alias_inputs_like_eager():
    def f(x, y):
        v = x.view(-1)
        v.mul_(2)  # writes through to x
        x += y
        y[0] = 7.0
        return x, v.sum()

    compiled = fastcomp.compile(f)
    for _ in range(2):
        x, y = torch.randn(2, 3), torch.randn(2, 3)
        x2, y2 = x.clone(), y.clone()
        assert_same(compiled(x, y), f(x2, y2))
        assert_same(x, x2)
        assert_same(y, y2)


def test_no_grad_decorated_method_is_a_grad_mode_block_of_the_graph():
    """@torch.no_grad() enters a fresh no_grad object on each call: the graph switches grad mode itself, with no
    calls of the object's __enter__/__exit__ (rotary embeddings in transformers are decorated so)."""

    class Rotary(torch.nn.Module):
        @torch.no_grad()
        def forward(self, x):
            return x.sin() * 2

    rotary = Rotary()

    def f(x):
        return rotary(x) + x

    compiled = fastcomp.compile(f)
    x = torch.randn(5, requires_grad=True)
    with CompileCounter() as cc:
        out = compiled(x)
    assert (cc.graph_count, cc.break_count) == (1, 0)
    assert "__enter__" not in cc.records[0]["graph"] and "__exit__" not in cc.records[0]["graph"]
    want = f(x)
    assert_same(out, want)
    assert out.requires_grad and torch.is_grad_enabled()
    out.sum().backward()
    grad = x.grad.clone()
    x.grad = None
    want.sum().backward()
    assert_same(grad, x.grad)  # only the `+ x` carries a gradient


def test_no_grad_block_restores_grad_mode_and_is_no_step_under_no_grad():
    """Grad mode at the graph's entry is guarded, so `with torch.no_grad()` under no_grad switches nothing; under
    grad mode it is two steps of the graph, grad mode is restored after it, and a call in the other mode
    recompiles."""
    w = torch.randn(4, requires_grad=True)

    def f(x):
        with torch.no_grad():
            y = x * w
        return y + w

    compiled = fastcomp.compile(f)
    x = torch.randn(4)
    with torch.no_grad(), CompileCounter() as cc:
        out = compiled(x)
    assert "_set_grad_enabled" not in cc.records[0]["graph"]
    assert not out.requires_grad
    assert_same(out, f(x))
    with CompileCounter() as cc:
        out = compiled(x)
    assert cc.frame_count == 1 and cc.records[0]["graph"].count("_set_grad_enabled") == 2
    assert torch.is_grad_enabled()
    assert out.requires_grad and out.grad_fn is not None
    assert_same(out, f(x))


def test_torch_assert_of_a_known_condition_leaves_nothing_to_run():
    def f(x):
        torch._assert(x.shape[-1] == 4, "expected 4 columns")
        return x * 2

    compiled = fastcomp.compile(f)
    x = torch.randn(3, 4)
    with CompileCounter() as cc:
        assert_same(compiled(x), f(x))
    assert "_assert" not in cc.records[0]["graph"]
    with pytest.raises(AssertionError, match="expected 4 columns"):
        compiled(torch.randn(3, 5))


def test_unfamiliar_torch_ops_stay_in_the_graph_as_extern_calls():
    def f(x):
        return torch.special.erfcx(x.cumsum(0)).flip(0), torch.linalg.norm(x)

    check(f, rand(8))


def test_functional_ops_and_keyword_arguments():
    def f(x, w, b):
        y = F.layer_norm(x, x.shape[-1:])
        y = F.linear(y, w, bias=b)
        return F.gelu(y, approximate="tanh") + x, F.softmax(y, dim=-1)

    check(f, rand(4, 8), rand(8, 8), rand(8))


def test_factory_functions_get_the_right_device_and_dtype():
    def f(x):
        mask = torch.ones(x.shape, dtype=torch.bool, device=x.device).tril()
        return x.masked_fill(~mask, 0.0) + torch.arange(x.shape[1], device=x.device), torch.zeros_like(x)

    check(f, rand(4, 4))


def test_nested_user_functions_are_inlined():
    def helper(t, k=2):
        return inner(t) * k

    def inner(t):
        return t.relu()

    def f(x):
        return helper(x) + helper(x, k=3)

    check(f, rand(5))


class Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc1 = torch.nn.Linear(d, 2 * d)
        self.act = torch.nn.GELU()
        self.fc2 = torch.nn.Linear(2 * d, d)
        self.norm = torch.nn.LayerNorm(d)
        self.drop = torch.nn.Dropout(0.1)
        self.use_residual = True

    def forward(self, x):
        y = self.fc2(self.drop(self.act(self.fc1(self.norm(x)))))
        return x + y if self.use_residual else y


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 8)
        self.blocks = torch.nn.ModuleList([Block(8) for _ in range(2)])
        self.heads = torch.nn.ModuleDict({"a": torch.nn.Linear(8, 2), "b": torch.nn.Linear(8, 3)})
        self.seq = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.SiLU())
        self.attn = torch.nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, ids):
        x = self.emb(ids)
        for block in self.blocks:
            x = block(x)
        x = self.seq(x)
        x = x + self.attn(x, x, x)[0]
        return {name: head(x) for name, head in self.heads.items()}


@pytest.mark.parametrize("grad", [False, True])
def test_module_tree_with_every_common_layer(grad):
    torch.manual_seed(0)
    net = Net().eval()
    compiled = fastcomp.compile(net)
    with CompileCounter() as cc, torch.set_grad_enabled(grad):
        for _ in range(2):
            ids = torch.randint(0, 10, (2, 5))
            assert_same(compiled(ids), net(ids), rtol=1e-4, atol=1e-5)
    assert (cc.graph_count, cc.break_count) == (1, 0)


def test_gradients_match_eager():
    torch.manual_seed(0)
    block = Block(6)
    block.drop.p = 0.0
    compiled = fastcomp.compile(block)
    x = torch.randn(3, 6, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    compiled(x).square().sum().backward()
    grads = [p.grad.clone() for p in block.parameters()]
    block.zero_grad()
    block(x2).square().sum().backward()
    for g, p in zip(grads, block.parameters()):
        torch.testing.assert_close(g, p.grad)
    torch.testing.assert_close(x.grad, x2.grad)


def test_compiled_module_behaves_like_the_module():
    block = Block(4)
    compiled = fastcomp.compile(block)
    assert compiled.fc1 is block.fc1 and compiled.use_residual is True
    assert set(compiled.state_dict()) == {"_orig_mod." + k for k in block.state_dict()}
    compiled.eval()
    assert not block.training
    seen = []
    handle = compiled.register_forward_hook(lambda m, i, o: seen.append(o.shape))
    compiled(torch.randn(2, 4))
    handle.remove()
    assert seen == [torch.Size([2, 4])]


def graph_targets(record):
    return [line for line in record["graph"].splitlines() if "_canonical_mask" in line or "_none_or_dtype" in line]


def test_attention_argument_helpers_are_computed_while_tracing():
    """nn.MultiheadAttention checks its masks with torch helpers; with no masks their arguments are constants,
    so the graph keeps no call to them (it would repeat them on every run)."""
    torch.manual_seed(0)
    attn = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    compiled = fastcomp.compile(lambda x: attn(x, x, x, need_weights=False)[0])
    with CompileCounter() as cc, torch.no_grad():
        x = torch.randn(2, 5, 8)
        assert_same(compiled(x), attn(x, x, x, need_weights=False)[0], rtol=1e-5, atol=1e-6)
    assert (cc.graph_count, cc.break_count) == (1, 0)
    assert graph_targets(cc.records[0]) == []


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.float32])
def test_attention_with_tensor_masks_keeps_the_helpers(mask_dtype):
    """A tensor mask is no constant: the helpers stay calls of the graph, and run on every call's masks."""
    torch.manual_seed(1)
    attn = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()

    def fn(x, padding):
        return attn(x, x, x, key_padding_mask=padding, need_weights=False)[0]

    compiled = fastcomp.compile(fn)
    with CompileCounter() as cc, torch.no_grad():
        for _ in range(2):
            x = torch.randn(2, 5, 8)
            padding = torch.rand(2, 5) > 0.7
            padding[:, 0] = False  # every query sees at least one key
            padding = padding if mask_dtype == torch.bool else padding.float() * -1e4
            assert_same(compiled(x, padding), fn(x, padding), rtol=1e-5, atol=1e-6)
    assert (cc.graph_count, cc.break_count) == (1, 0)
    assert graph_targets(cc.records[0]) != []
