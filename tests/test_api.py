"""The public API: torch.compile's shape, clear errors, explain(), disable, reset."""
import traceback

import pytest
import torch

import fastcomp
from fastcomp.testing import CompileCounter


def test_compile_rejects_non_callables_with_a_clear_message():
    with pytest.raises(TypeError, match="expects a function, a method or an nn.Module, got int"):
        fastcomp.compile(42)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"mode": "fast"}, "unknown mode 'fast'; valid modes: 'default', 'reduce-overhead'"),
        ({"backend": "inductor"}, "unknown backend 'inductor'; valid backends: 'default'"),
        ({"options": {"triton.cudagraphs": True}}, "unknown option 'triton.cudagraphs'; valid options: 'cuda_graphs'"),
    ],
)
def test_unknown_settings_raise_value_error_listing_valid_ones(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        fastcomp.compile(lambda x: x, **kwargs)


def test_decorator_forms():
    @fastcomp.compile
    def f(x):
        return x + 1

    @fastcomp.compile(fullgraph=True)
    def g(x):
        return x * 2

    x = torch.randn(3)
    torch.testing.assert_close(f(x), x + 1)
    torch.testing.assert_close(g(x), x * 2)
    assert f.__name__ == "f" and f.__wrapped__.__name__ == "f"


def test_compiled_method_binds_self():
    class A:
        k = 3.0

        @fastcomp.compile
        def scale(self, x):
            return x * self.k

    x = torch.randn(2)
    torch.testing.assert_close(A().scale(x), x * 3.0)


def test_user_exception_keeps_type_message_and_user_frame():
    def f(x):
        if x.shape[0] != 3:
            raise ValueError(f"expected 3 rows, got {x.shape[0]}")
        return x

    compiled = fastcomp.compile(f)
    with pytest.raises(ValueError, match="expected 3 rows, got 4") as info:
        compiled(torch.randn(4))
    frames = [fr.name for fr in traceback.extract_tb(info.tb)]
    assert "f" in frames


def test_torch_error_inside_compiled_code_matches_eager():
    def f(x, y):
        return x @ y

    compiled = fastcomp.compile(f)
    with pytest.raises(RuntimeError) as eager:
        f(torch.randn(2, 3), torch.randn(4, 5))
    with pytest.raises(RuntimeError) as got:
        compiled(torch.randn(2, 3), torch.randn(4, 5))
    assert str(got.value) == str(eager.value)


def test_fullgraph_raises_with_reason_location_and_hint():
    def f(x):
        y = x + 1
        print("hello")
        return y

    compiled = fastcomp.compile(f, fullgraph=True)
    with pytest.raises(fastcomp.Unsupported) as info:
        compiled(torch.randn(2))
    msg = str(info.value)
    assert "GB004" in msg and "print() inside a compiled function" in msg
    assert "test_api.py:" in msg and 'print("hello")' in msg and "hint:" in msg


def test_graph_break_that_resumes_does_not_warn(recwarn):
    def f(x):
        print("side effect", x.shape[0])
        return x + 1

    x = torch.randn(3)
    torch.testing.assert_close(fastcomp.compile(f)(x), x + 1)
    assert [str(w.message) for w in recwarn] == []


def test_unresumable_break_warns_once_and_runs_eagerly(capsys):
    def f(x):
        for _ in range(2):
            print("side effect", x.shape[0])
        return x + 1

    compiled = fastcomp.compile(f)
    with pytest.warns(UserWarning, match="running .*f.* eagerly: GB004"):
        out = compiled(torch.randn(3))
    torch.testing.assert_close(out.shape, torch.Size([3]))
    with CompileCounter() as cc:
        compiled(torch.randn(3))
    assert cc.frame_count == 0  # the eager decision is cached under the same guards
    assert capsys.readouterr().out.count("side effect 3") == 4


def test_disable_never_traces():
    @fastcomp.disable
    def helper(x):
        return x.sum().item()

    def f(x):
        return helper(x)

    compiled = fastcomp.compile(f, fullgraph=True)
    with pytest.raises(fastcomp.Unsupported, match="GB006"):
        compiled(torch.randn(3))
    x = torch.randn(3)
    assert helper(x) == x.sum().item()


def test_is_compiling_is_true_only_while_tracing():
    def f(x):
        return x + 1 if fastcomp.is_compiling() else x - 1

    x = torch.randn(2)
    torch.testing.assert_close(fastcomp.compile(f)(x), x + 1)
    torch.testing.assert_close(f(x), x - 1)


def test_explain_reports_graph_ops_and_guards():
    def f(x, w):
        return torch.relu(x @ w) + 1

    out = fastcomp.explain(f)(torch.randn(2, 3), torch.randn(3, 4))
    assert out.graph_count == 1 and out.graph_break_count == 0 and out.break_reasons == []
    assert out.ops_per_graph == [["operator.matmul", "torch.relu", "operator.add"]]
    assert any("TENSOR_MATCH: L['x']" in g for g in out.out_guards)
    assert len(out.compile_times) == 1 and out.compile_times[0] > 0
    text = str(out)
    assert "Graph Count: 1" in text and "Graph Break Count: 0" in text and "torch.relu" in text


def test_explain_reports_breaks_with_user_location():
    def f(x):
        return x.sum().item()

    out = fastcomp.explain(f)(torch.randn(3))
    assert out.graph_count == 1 and out.graph_break_count == 1  # the sum, then .item() runs in CPython
    (b,) = out.break_reasons
    assert b.code == "GB002" and "Tensor.item" in b.reason and b.source_line == "return x.sum().item()"
    assert b.user_loc.endswith(f"test_api.py:{f.__code__.co_firstlineno + 1}")


def test_reset_forgets_compiled_entries():
    compiled = fastcomp.compile(lambda x: x * 3)
    x = torch.randn(2)
    with CompileCounter() as cc:
        compiled(x)
        compiled(x)
        fastcomp.reset()
        compiled(x)
    assert cc.frame_count == 2


def test_hook_is_only_installed_during_compiled_calls():
    seen = []

    @fastcomp.compile
    def f(x):
        return x + 1

    f(torch.randn(1))
    assert not fastcomp._C.is_dispatching()
    seen.append(1)
    assert seen == [1]


def test_wait_for_compiles_returns_at_once_when_nothing_compiles():
    import time

    start = time.perf_counter()
    assert fastcomp.wait_for_compiles() is True
    assert fastcomp.wait_for_compiles(timeout=0.0) is True
    assert time.perf_counter() - start < 1.0
