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


def test_break_in_a_loop_leaves_the_rest_of_the_frame_to_cpython_without_a_warning(capsys, recwarn):
    def f(x):
        for _ in range(2):
            print("side effect", x.shape[0])
        return x + 1

    compiled = fastcomp.compile(f)
    with CompileCounter() as cc:
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x), x + 1)
    (record,) = cc.records
    assert (record["breaks"], record["break_code"]) == (1, "GB004")
    assert record["rest_in_cpython"].startswith("the break is inside a loop")
    assert not [w for w in recwarn if "fastcomp" in str(w.message)]  # a break is not an error: explain() says it
    with CompileCounter() as cc:
        compiled(torch.randn(3))
    assert cc.frame_count == 0  # cached under the same guards
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


class Broken(torch.nn.Module):
    """Two linear layers with a print between them: a graph break."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)

    def forward(self, x):
        h = self.a(x).relu()
        print("between")
        return self.b(h)


def explain_summary(out):
    return (out.graph_count, out.graph_break_count, out.op_count, out.ops_per_graph,
            [(b.code, b.user_loc) for b in out.break_reasons])


def test_explain_of_a_compiled_module_or_function_reports_the_original():
    model, x = Broken(), torch.randn(3, 4)
    plain = explain_summary(fastcomp.explain(model)(x))
    assert plain[:3] == (2, 1, 3)  # linear, relu | print | linear
    assert explain_summary(fastcomp.explain(fastcomp.compile(model))(x)) == plain

    def f(x):
        return torch.relu(x) + 1

    assert explain_summary(fastcomp.explain(fastcomp.compile(f))(x)) == explain_summary(fastcomp.explain(f)(x))
    assert explain_summary(fastcomp.explain(f)(x))[:3] == (1, 0, 2)

    class A:
        @fastcomp.compile
        def scale(self, x):
            return x * 3

    out = fastcomp.explain(A().scale)(x)
    assert (out.graph_count, out.graph_break_count, out.ops_per_graph) == (1, 0, [["operator.mul"]])


def test_explain_of_a_compiled_function_uses_its_dynamic_and_mode():
    def f(x):
        return x * 2

    x = torch.randn(4)
    assert "f32[s0]" in fastcomp.explain(fastcomp.compile(f, dynamic=True))(x).graphs[0]
    assert "f32[4]" in fastcomp.explain(fastcomp.compile(f))(x).graphs[0]
    out = fastcomp.explain(fastcomp.compile(f, mode="reduce-overhead"))(x)
    assert out.backends == ["torch runner: 1 ops (no CUDA tensors) (no CUDA graph: not on the CUDA backend)"]


def test_explain_output_has_op_count():
    out = fastcomp.explain(lambda x: (x + 1).relu().sum())(torch.randn(3))
    assert out.op_count == 3 and "Op Count: 3" in str(out)


def test_compile_accepts_functools_partial():
    import functools

    def f(x, k):
        return x * k

    compiled = fastcomp.compile(functools.partial(f, k=3.0))
    x = torch.randn(4)
    with CompileCounter() as cc:
        torch.testing.assert_close(compiled(x), x * 3.0)
    assert cc.frame_count == 1 and cc.graph_count == 1


def test_mode_and_options_together_raise_as_in_torch():
    with pytest.raises(RuntimeError) as info:
        fastcomp.compile(lambda x: x, mode="reduce-overhead", options={"cuda_graphs": True})
    assert str(info.value) == "Either mode or options can be specified, but both can't be specified at the same time."
    with pytest.raises(RuntimeError):  # the decorator form checks too, before there is a function
        fastcomp.compile(mode="default", options={})


@pytest.mark.parametrize("mode, runs_as", [
    ("max-autotune", "reduce-overhead"), ("max-autotune-no-cudagraphs", "default"),
    ("reduce-overhead", "reduce-overhead"), (None, "default"),
])
def test_max_autotune_runs_as_the_mode_fastcomp_has_for_it(mode, runs_as):
    f = fastcomp.compile(lambda x: x + 1, mode=mode)
    assert f"(mode={runs_as} backend=default" in repr(f)
    out = fastcomp.explain(lambda x: x + 1, mode=mode)(torch.randn(2))
    # On CPU tensors a graph replays as a CUDA graph under neither; the modes that ask for one say why not.
    expected = "torch runner: 1 ops (no CUDA tensors)" + (
        " (no CUDA graph: not on the CUDA backend)" if runs_as == "reduce-overhead" else "")
    assert out.backends == [expected]


def test_max_autotune_with_matmul_tuning_off_warns_once():
    with fastcomp.config.patch(matmul_tuning=False):
        with pytest.warns(UserWarning, match=r"mode='max-autotune'\) tunes matrix products only while "
                                             r"fastcomp.config.matmul_tuning is on, and it is off"):
            fastcomp.compile(lambda x: x, mode="max-autotune")


def test_fastcomp_unsupported_is_caught_as_torch_unsupported_without_importing_dynamo():
    import subprocess
    import sys
    import textwrap

    import os

    script = textwrap.dedent("""
        import sys, torch, fastcomp
        assert "torch._dynamo" not in sys.modules, "import fastcomp imported torch._dynamo"

        def f(x):
            print("hello")
            return x

        try:
            fastcomp.compile(f, fullgraph=True)(torch.randn(2))
        except torch._dynamo.exc.Unsupported as e:  # evaluating this imports torch._dynamo, then matches
            assert isinstance(e, fastcomp.Unsupported) and e.msg == str(e)
            print("caught", type(e).__name__)
    """)
    root = os.path.dirname(os.path.dirname(fastcomp.__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[-2] == "caught Unsupported"


def test_suppress_errors_off_raises_internal_errors():
    def f(x):
        return x + 1

    x = torch.randn(2)
    fastcomp._C.fail_next_trace_for_tests("fastcomp internal error: value stack underflow")
    with pytest.warns(UserWarning, match="running .*f.* eagerly: GB999 unsupported: fastcomp internal error"):
        torch.testing.assert_close(fastcomp.compile(f)(x), x + 1)
    fastcomp.reset()
    fastcomp._C.fail_next_trace_for_tests("fastcomp internal error: value stack underflow")
    with fastcomp.config.patch(suppress_errors=False):
        with pytest.raises(fastcomp.InternalError) as info:
            fastcomp.compile(f)(x)
    assert str(info.value) == (
        f"fastcomp internal error while compiling {f.__qualname__} ({__file__}:{f.__code__.co_firstlineno}):\n"
        "GB999 unsupported: fastcomp internal error: value stack underflow\n"
        "User code traceback (outermost first):\n"
        f'  File "{__file__}", line {f.__code__.co_firstlineno}\n'
        "    def f(x):\n"
        "  hint: please report this to the fastcomp developers")


def test_recompile_limit_error_says_it_raises_not_that_it_runs_eagerly():
    def add(x, y):
        return x + y

    compiled = fastcomp.compile(add, dynamic=False)
    with fastcomp.config.patch(recompile_limit=1, error_on_recompile=True):
        compiled(torch.randn(1), torch.randn(1))
        with pytest.raises(fastcomp.RecompileLimitExceeded) as info:
            compiled(torch.randn(2), torch.randn(2))
    msg = str(info.value)
    assert "runs eagerly" not in msg
    assert msg.startswith(f"fastcomp: {add.__qualname__} ({__file__}:{add.__code__.co_firstlineno}) hit the recompile limit (1): "
                          "these inputs match none of its 1 compiled versions, and fastcomp.config.error_on_recompile "
                          "is set.\n  last failing guard: ")
    assert msg.endswith("to run such calls eagerly instead, unset error_on_recompile.")
