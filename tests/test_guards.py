"""Every guard kind: a change recompiles exactly once with the right reason; no change never recompiles."""
import warnings

import pytest
import torch

import fastcomp
from fastcomp.testing import CompileCounter

FACTOR = 2.0


@pytest.fixture(autouse=True, params=["auto", "always"])
def guard_memo(request):
    """Every guard kind with and without the guard memo (auto leaves these small functions' sets to full checks)."""
    with fastcomp.config.patch(guard_memo=request.param):
        yield


def run_twice(fn, first_args, second_args):
    """Calls compiled fn with first_args twice, then second_args twice; returns the counter."""
    fastcomp.reset()
    compiled = fastcomp.compile(fn)
    with CompileCounter() as cc:
        for args in (first_args, first_args, second_args, second_args):
            out = compiled(*args)
            torch.testing.assert_close(out, fn(*args))
    return cc


def expect_one_recompile(cc, reason_fragment):
    assert cc.frame_count == 2, [r["recompile_reasons"] for r in cc.records]
    assert len(cc.recompile_reasons) == 1
    assert reason_fragment in cc.recompile_reasons[0], cc.recompile_reasons


def add(x, y):
    return x + y


def test_unchanged_inputs_never_recompile():
    compiled = fastcomp.compile(add)
    with CompileCounter() as cc:
        for _ in range(5):
            x, y = torch.randn(4), torch.randn(4)
            torch.testing.assert_close(compiled(x, y), x + y)
    assert cc.frame_count == 1


def test_size_change():
    cc = run_twice(add, (torch.randn(8), torch.randn(8)), (torch.randn(16), torch.randn(16)))
    expect_one_recompile(cc, "tensor 'L['x']' size mismatch at index 0. expected 8, actual 16")


def test_rank_change():
    cc = run_twice(add, (torch.randn(8), torch.randn(8)), (torch.randn(2, 8), torch.randn(8)))
    expect_one_recompile(cc, "tensor 'L['x']' rank mismatch. expected 1, actual 2")


def test_dtype_change():
    cc = run_twice(add, (torch.randn(8), torch.randn(8)), (torch.randn(8, dtype=torch.float64), torch.randn(8)))
    expect_one_recompile(cc, "tensor 'L['x']' dtype mismatch. expected torch.float32, actual torch.float64")


def test_stride_change():
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    cc = run_twice(add, (a, b), (a.t(), b))
    expect_one_recompile(cc, "tensor 'L['x']' stride mismatch at index 0. expected 4, actual 1")


def test_requires_grad_change():
    x = torch.randn(3)
    cc = run_twice(add, (x, x), (x.clone().requires_grad_(True), x))
    expect_one_recompile(cc, "tensor 'L['x']' requires_grad mismatch. expected requires_grad=0")


def test_device_change():
    cc = run_twice(add, (torch.randn(3), torch.randn(3)), (torch.empty(3, device="meta"), torch.empty(3, device="meta")))
    assert cc.frame_count == 2
    assert "tensor 'L['x']' device mismatch. expected cpu, actual meta" in cc.recompile_reasons[0]


def test_tensor_subclass_change():
    x = torch.randn(3)
    cc = run_twice(add, (x, x), (torch.nn.Parameter(torch.randn(3), requires_grad=False), x))
    expect_one_recompile(cc, "tensor 'L['x']' type mismatch. expected Tensor, actual Parameter")


def test_python_constant_change():
    def f(x, n, flag, name):
        return x * n if flag and name == "a" else x

    x = torch.randn(3)
    cc = run_twice(f, (x, 3, True, "a"), (x, 4, True, "a"))
    expect_one_recompile(cc, "L['n'] == 3")
    cc = run_twice(f, (x, 3, True, "a"), (x, 3, True, "b"))
    expect_one_recompile(cc, "L['name'] == 'a'")
    cc = run_twice(f, (x, 3, True, "a"), (x, 3, None, "a"))
    expect_one_recompile(cc, "L['flag'] == True")


def test_global_change():
    global FACTOR

    def f(x):
        return x * FACTOR

    compiled = fastcomp.compile(f)
    x = torch.randn(3)
    with CompileCounter() as cc:
        torch.testing.assert_close(compiled(x), x * 2.0)
        FACTOR = 5.0
        try:
            torch.testing.assert_close(compiled(x), x * 5.0)
        finally:
            FACTOR = 2.0
    expect_one_recompile(cc, "G['FACTOR'] == 2.0")


class Gate(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.use_bias = True
        self.scale = 1.5

    def forward(self, x):
        y = self.fc(x) * self.scale
        return y + 1 if self.use_bias else y


def test_module_attribute_change_recompiles_never_stale():
    m = Gate()
    compiled = fastcomp.compile(m)
    x = torch.randn(2, 4)
    with CompileCounter() as cc:
        torch.testing.assert_close(compiled(x), m(x))
        m.use_bias = False
        torch.testing.assert_close(compiled(x), m(x))
        m.scale = 3.0
        torch.testing.assert_close(compiled(x), m(x))
    assert cc.frame_count == 3
    assert "L['self'].use_bias == True" in cc.recompile_reasons[0]


def test_submodule_swap_reuses_the_code_for_a_module_of_the_same_kind_and_recompiles_for_another():
    # Modules are guarded by class and through what the trace read of them (their parameters are inputs), so a new
    # Linear of the same shapes runs the same compiled code with its own weights; a module of another class does not.
    m = Gate()
    compiled = fastcomp.compile(m)
    x = torch.randn(2, 4)
    with CompileCounter() as cc:
        compiled(x)
        m.fc = torch.nn.Linear(4, 4)
        torch.testing.assert_close(compiled(x), m(x))
        assert cc.frame_count == 1
        m.fc = torch.nn.Sequential(torch.nn.Linear(4, 4))
        torch.testing.assert_close(compiled(x), m(x))
    assert cc.frame_count == 2
    assert "type(L['self'].fc) is Sequential (expected Linear)" in cc.recompile_reasons[0]


def test_layers_of_one_class_share_one_compiled_forward():
    layers = [torch.nn.Linear(4, 4) for _ in range(12)]

    class Layer(torch.nn.Module):
        def __init__(self, fc):
            super().__init__()
            self.fc = fc

        def forward(self, x):
            return torch.relu(self.fc(x)) + 1

    mods = [Layer(fc) for fc in layers]
    compiled = [fastcomp.compile(m) for m in mods]
    x = torch.randn(2, 4)
    with CompileCounter() as cc:
        for c, m in zip(compiled, mods):
            torch.testing.assert_close(c(x), m(x))
    assert cc.frame_count == 1  # twelve instances, one trace


def test_parameter_replaced_recompiles():
    m = Gate()
    compiled = fastcomp.compile(m)
    x = torch.randn(2, 4)
    compiled(x)
    with CompileCounter() as cc:
        m.fc.weight = torch.nn.Parameter(torch.randn(4, 4, dtype=torch.float64))
        m.fc.bias = None
        m.double()
        torch.testing.assert_close(compiled(x.double()), m(x.double()))
    assert cc.frame_count == 1


def test_train_eval_recompiles():
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
    compiled = fastcomp.compile(m)
    x = torch.randn(8, 4)
    m.eval()
    with CompileCounter() as cc:
        torch.testing.assert_close(compiled(x), m(x))
        m.train()
        compiled(x)
    assert cc.frame_count == 2
    assert "training == False" in cc.recompile_reasons[0]


def test_grad_mode_change():
    x = torch.randn(3, requires_grad=True)
    compiled = fastcomp.compile(add)
    with CompileCounter() as cc:
        assert compiled(x, x).requires_grad
        with torch.no_grad():
            assert not compiled(x, x).requires_grad
    assert cc.frame_count == 2
    assert "torch.is_grad_enabled() == True" in cc.recompile_reasons[0]


def test_grad_mode_is_not_guarded_when_nothing_requires_grad():
    x = torch.randn(3)
    compiled = fastcomp.compile(add)
    with CompileCounter() as cc:
        compiled(x, x)
        with torch.no_grad():
            compiled(x, x)
    assert cc.frame_count == 1


def test_grad_mode_is_guarded_when_the_code_switches_it():
    def f(x):
        with torch.enable_grad():
            y = x * 2
        return y + torch.is_grad_enabled()

    compiled = fastcomp.compile(f)
    x = torch.randn(3)
    with CompileCounter() as cc:
        compiled(x)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), f(x))
            assert not torch.is_grad_enabled()
    assert cc.frame_count == 2


def test_default_dtype_change():
    def f(x):
        return x + torch.ones(3)

    compiled = fastcomp.compile(f)
    x = torch.randn(3, dtype=torch.float64)
    with CompileCounter() as cc:
        torch.testing.assert_close(compiled(x), f(x))
        old = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            torch.testing.assert_close(compiled(x), f(x))
        finally:
            torch.set_default_dtype(old)
    assert cc.frame_count == 2
    assert "torch.get_default_dtype() == torch.float32" in cc.recompile_reasons[0]


def test_a_state_query_the_code_branches_on_is_a_guarded_constant():
    """torch's queries of global state (deterministic algorithms, nn.Module.__call__'s torch._C._get_tracing_state,
    read in every layer) are constants of the graph, not graph ops, each guarded once: a change recompiles."""
    class Layer(torch.nn.Module):
        def forward(self, x):
            scale = 3 if torch.are_deterministic_algorithms_enabled() else 2
            return x * scale

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([Layer(), Layer()])

        def forward(self, x):
            for layer in self.layers:  # __call__ read through the class: traced, _get_tracing_state and all
                x = torch.nn.Module.__call__(layer, x)
            return x

    model = Model()
    compiled = fastcomp.compile(model)
    x = torch.randn(5)
    with CompileCounter() as cc:
        torch.testing.assert_close(compiled(x), model(x))
        torch.use_deterministic_algorithms(True)
        try:
            torch.testing.assert_close(compiled(x), model(x))
        finally:
            torch.use_deterministic_algorithms(False)
    assert cc.frame_count == 2, cc.recompile_reasons
    assert "torch.are_deterministic_algorithms_enabled() == False (actual True)" in cc.recompile_reasons[0]
    guards = cc.records[0]["guards"]
    assert guards.count("GLOBAL_STATE: torch.are_deterministic_algorithms_enabled() == False") == 1, guards
    assert guards.count("GLOBAL_STATE: torch._C._get_tracing_state() == None") == 1, guards
    assert "_get_tracing_state" not in cc.records[0]["graph"], cc.records[0]["graph"]


def test_aliased_inputs_are_guarded():
    def f(a, b):
        return a * 2 if a is b else a + b

    compiled = fastcomp.compile(f)
    x, y = torch.randn(3), torch.randn(3)
    with CompileCounter() as cc:
        torch.testing.assert_close(compiled(x, y), x + y)
        torch.testing.assert_close(compiled(x, x), x * 2)
    assert cc.frame_count == 2


def test_recompile_limit_warns_loudly_and_runs_eagerly():
    compiled = fastcomp.compile(add, dynamic=False)  # static shapes: every size is a recompile
    with fastcomp.config.patch(recompile_limit=2), CompileCounter() as cc:
        with pytest.warns(UserWarning, match=r"hit the recompile limit \(2\)"):
            for n in (1, 2, 3, 4):
                x = torch.randn(n)
                torch.testing.assert_close(compiled(x, x), x + x)
    assert cc.frame_count == 2


def test_recompile_limit_can_raise():
    compiled = fastcomp.compile(add)
    with fastcomp.config.patch(recompile_limit=1, error_on_recompile=True):
        compiled(torch.randn(1), torch.randn(1))
        with pytest.raises(fastcomp.RecompileLimitExceeded, match="add"):
            compiled(torch.randn(2), torch.randn(2))


@pytest.mark.parametrize("change", [
    pytest.param(lambda t: t.resize_(2, 8), id="resize_"),
    pytest.param(lambda t: t.t_(), id="t_"),
    pytest.param(lambda t: t.requires_grad_(), id="requires_grad_"),
    pytest.param(lambda t: setattr(t, "data", torch.randn(4, 4, dtype=torch.float64)), id="data"),
])
def test_guard_rechecks_a_tensor_whose_metadata_changed_in_place(change):
    # The same tensor object with new sizes, strides, dtype or requires_grad is a new input: guards read the
    # tensor on every call rather than remembering objects they have accepted.
    x = torch.randn(4, 4)
    compiled = fastcomp.compile(add)
    with CompileCounter() as cc:
        compiled(x, x)
        compiled(x, x)
        change(x)
        torch.testing.assert_close(compiled(x, x), x + x)
    assert cc.frame_count == 2, cc.recompile_reasons


def test_sparse_tensor_is_not_taken_for_the_dense_one_compiled():
    x, y = torch.randn(3, 3), torch.randn(3, 3)
    compiled = fastcomp.compile(add)
    with CompileCounter() as cc:
        compiled(x, y)
        sparse = y.to_sparse()
        torch.testing.assert_close(compiled(x, sparse), x + sparse)
    assert cc.frame_count == 2
    assert "tensor 'L['y']'" in cc.recompile_reasons[0]


def test_autocast_change_is_seen():
    # The guard reads the thread's dispatch key set first; entering autocast changes it, and the call then asks
    # torch, which says autocast is on: a recompile, traced under autocast (tests/test_autocast.py).
    def f(x, w):
        return x @ w

    compiled = fastcomp.compile(f)
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    with CompileCounter() as cc:
        torch.testing.assert_close(compiled(x, w), f(x, w))
        with torch.autocast("cpu", dtype=torch.bfloat16), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = compiled(x, w)
            assert out.dtype == torch.bfloat16
            torch.testing.assert_close(out, f(x, w))
        assert not [c for c in caught if "fastcomp" in str(c.message)]
        out = compiled(x, w)  # autocast left: the first entry again
        assert out.dtype == torch.float32
        torch.testing.assert_close(out, f(x, w))
    assert (cc.frame_count, cc.graph_count) == (2, 2)
    assert "torch._C._is_any_autocast_enabled() == False (actual True)" in cc.recompile_reasons[0]


def test_dispatch_key_change_without_autocast_change_reuses_the_entry():
    # inference_mode changes the thread's dispatch key set but not autocast: the guard's fast read differs, the
    # call into torch agrees with the trace, and nothing recompiles.
    compiled = fastcomp.compile(add)
    x, y = torch.randn(4), torch.randn(4)
    with CompileCounter() as cc:
        torch.testing.assert_close(compiled(x, y), x + y)
        with torch.inference_mode():
            torch.testing.assert_close(compiled(x, y), x + y)
    assert cc.frame_count == 1


def test_each_global_module_hook_dict_is_guarded_on_its_own():
    # torch's four global hook dicts are equal while empty; each is guarded by identity, not as the first of them.
    lin = torch.nn.Linear(2, 2)
    compiled = fastcomp.compile(lambda x: lin(x))
    x = torch.randn(1, 2)
    with CompileCounter() as cc:
        compiled(x)
    hook_guards = [g for r in cc.records for g in r["guards"] if "_global_" in g]
    assert sorted(hook_guards) == sorted(f"LENGTH_CHECK: len(torch.nn.modules.module.{name}) == 0" for name in (
        "_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks", "_global_backward_pre_hooks"))
    calls = []
    handle = torch.nn.modules.module.register_module_forward_pre_hook(lambda module, args: calls.append(module))
    try:
        compiled(x)
    finally:
        handle.remove()
    assert calls == [lin]  # the hook ran, as in eager: the cached graph (which skips it) was not reused


class Skipping(torch.nn.Module):
    """Scales by the names not in a set the module owns, which the program changes between calls in place (a set
    changes without any dict version changing, so the guard memo must re-check it)."""

    def __init__(self):
        super().__init__()
        self.skipped = {"b"}

    def forward(self, x):
        for name, factor in (("a", 2.0), ("b", 3.0)):
            if name not in self.skipped:
                x = x * factor
        return x


def test_set_membership_changed_in_place_recompiles_with_the_tested_key():
    m = Skipping()
    compiled = fastcomp.compile(m)
    with CompileCounter() as cc:
        for _ in range(2):
            x = torch.randn(3)
            torch.testing.assert_close(compiled(x), x * 2.0)
        m.skipped.discard("b")
        for _ in range(2):
            x = torch.randn(3)
            torch.testing.assert_close(compiled(x), x * 6.0)
        m.skipped.add("unrelated")  # no key the trace tested: the same entry still serves
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x), x * 6.0)
    expect_one_recompile(cc, "('b' in L['self'].skipped) == True")
    assert cc.break_count == 0


def test_an_unhashable_key_tested_against_a_set_raises_eagers_type_error():
    def f(x, s):
        return x + 1 if [1] in s else x

    with pytest.raises(TypeError, match="unhashable type: 'list'"):
        fastcomp.compile(f)(torch.randn(2), {1})
