"""The guard memo: calls after one that passed reuse what it read through unchanged dicts. Every change a full
check would see must still be seen (results equal eager's, recompiles exactly as without the memo), and the memo
must answer repeat calls of an unchanged model."""
import pytest
import torch
from torch import nn

import fastcomp
from fastcomp import _C
from fastcomp.testing import CompileCounter


@pytest.fixture(autouse=True)
def memo_always():
    fastcomp.reset()
    with fastcomp.config.patch(guard_memo="always"):
        yield
    fastcomp.reset()


class Stats:
    """What guard memos did in a block: guard_check_stats()'s memo counts, from its start."""

    def __enter__(self):
        self.start = _C.guard_check_stats()
        return self

    def __exit__(self, *exc):
        end = _C.guard_check_stats()
        self.delta = {k[len("memo_"):]: end[k] - self.start[k] for k in end if k.startswith("memo_")}


class Scaled(nn.Module):
    def __init__(self, width=16, depth=4):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.scale = 2.0

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x)) * self.scale
        return x


def calls(compiled, model, n, width=16):
    for _ in range(n):
        x = torch.randn(3, width)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x))


def test_repeat_calls_of_an_unchanged_model_are_answered_by_the_memo():
    model = Scaled()
    compiled = fastcomp.compile(model)
    with CompileCounter() as cc, Stats() as stats:
        calls(compiled, model, 6)
    assert cc.frame_count == 1
    # The first call's full check records; the five after it pass through the memo.
    assert stats.delta == {"passed": 5, "failed": 0, "stale": 0, "records": 1}


def test_memo_is_off_when_configured_off():
    model = Scaled()
    compiled = fastcomp.compile(model)
    with fastcomp.config.patch(guard_memo="off"), Stats() as stats:
        calls(compiled, model, 3)
    assert stats.delta == {"passed": 0, "failed": 0, "stale": 0, "records": 0}


def test_auto_memo_takes_large_guard_sets_only():
    small = nn.Linear(4, 4)
    big = Scaled(depth=8)
    with fastcomp.config.patch(guard_memo="auto"), Stats() as stats:
        compiled_small = fastcomp.compile(small)
        calls(compiled_small, small, 3, width=4)
    assert stats.delta["records"] == 0
    with fastcomp.config.patch(guard_memo="auto"), Stats() as stats:
        calls(fastcomp.compile(big), big, 3)
    assert stats.delta == {"passed": 2, "failed": 0, "stale": 0, "records": 1}


def test_replaced_parameter_is_read_anew():
    model = Scaled()
    compiled = fastcomp.compile(model)
    calls(compiled, model, 2)
    with CompileCounter() as cc, Stats() as stats:
        model.layers[2].weight = nn.Parameter(torch.randn(16, 16))
        calls(compiled, model, 3)
    assert cc.frame_count == 0  # same metadata: the compiled graph takes the new parameter as an input
    assert stats.delta["stale"] == 1 and stats.delta["passed"] == 2


def test_parameter_changed_in_place_recompiles():
    model = Scaled()
    compiled = fastcomp.compile(model)
    calls(compiled, model, 2)
    with CompileCounter() as cc:
        model.layers[1].weight.data = torch.randn(16, 16, dtype=torch.float64)
        model.layers[1].bias.data = torch.randn(16, dtype=torch.float64)
        with pytest.raises(RuntimeError) as eager_error:
            model(torch.randn(3, 16))
        with pytest.raises(RuntimeError) as compiled_error:
            compiled(torch.randn(3, 16))
    assert type(compiled_error.value) is type(eager_error.value)
    assert "dtype mismatch" in cc.recompile_reasons[0]


def after_change(change, model=None):
    """A compiled model called twice, then `change(model)`, then called twice more: the counter of those two."""
    model = model if model is not None else Scaled()
    compiled = fastcomp.compile(model)
    calls(compiled, model, 2)
    with CompileCounter() as cc:
        change(model)
        calls(compiled, model, 2)
    return cc


def test_requires_grad_change_of_a_parameter_recompiles():
    cc = after_change(lambda m: m.layers[0].weight.requires_grad_(False))
    assert cc.frame_count == 1
    assert "requires_grad mismatch" in cc.recompile_reasons[0]


def test_module_attribute_change_recompiles():
    cc = after_change(lambda m: setattr(m, "scale", 3.0))
    assert cc.frame_count == 1
    assert "L['self'].scale == 2.0" in cc.recompile_reasons[0]


def test_replaced_instance_dict_is_seen():
    # No dict changes: the object points at another one.
    cc = after_change(lambda m: object.__setattr__(m, "__dict__", dict(m.__dict__, scale=5.0)))
    assert cc.frame_count == 1


class Hooked(Scaled):
    pass


def test_forward_hook_added_after_compiling_runs():
    model = Hooked()
    compiled = fastcomp.compile(model)
    calls(compiled, model, 2)
    model.layers[3].register_forward_hook(lambda module, args, out: out * 10)
    with CompileCounter() as cc:
        calls(compiled, model, 2)  # eager runs the hook: so must the compiled function
    assert cc.frame_count == 1
    assert "len(L['self'].layers.3._forward_hooks) == 0 (actual 1)" in cc.recompile_reasons[0]


SHIFT = 1.0


class ReadsGlobalsAndClass(Scaled):
    factor = 0.5

    def forward(self, x):
        return super().forward(x) * self.factor + SHIFT


def test_global_and_class_attribute_changes_recompile():
    global SHIFT
    model = ReadsGlobalsAndClass()
    compiled = fastcomp.compile(model)
    calls(compiled, model, 2)
    try:
        with CompileCounter() as cc:
            SHIFT = 2.0
            calls(compiled, model, 2)
            ReadsGlobalsAndClass.factor = 0.25
            calls(compiled, model, 2)
    finally:
        SHIFT = 1.0
        ReadsGlobalsAndClass.factor = 0.5
    assert cc.frame_count == 2, cc.recompile_reasons


class Doubled(nn.Linear):
    def forward(self, x):
        return super().forward(x) * 2


def test_class_assignment_of_a_submodule_is_seen():
    cc = after_change(lambda m: setattr(m.layers[1], "__class__", Doubled))
    assert cc.frame_count == 1
    assert "type(L['self'].layers.1) is Doubled (expected Linear)" in cc.recompile_reasons[0]


class RemembersOutput(Scaled):
    def __init__(self):
        super().__init__()
        self.seen = {"last": None}

    def forward(self, x):
        y = super().forward(x)
        self.seen["last"] = y  # a new object in a watched dict on every call
        return y


def test_dict_written_on_every_call_stops_costing_full_checks():
    model = RemembersOutput()
    eager = RemembersOutput()
    eager.load_state_dict(model.state_dict())
    compiled = fastcomp.compile(model)

    def call():
        x = torch.randn(3, 16)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), eager(x))
        torch.testing.assert_close(model.seen["last"], eager.seen["last"])

    with CompileCounter() as cc:
        call()
        call()  # seen["last"] was None when traced, and is a tensor now
    assert cc.frame_count == 2, cc.recompile_reasons
    with CompileCounter() as cc, Stats() as stats:
        for _ in range(8):
            call()
    assert cc.frame_count == 0
    # The next two calls find `seen` changed and record again; after the second such record its items are loaded
    # on every call, and the memo answers the rest.
    assert stats.delta == {"passed": 6, "failed": 0, "stale": 2, "records": 2}


def forward_with_options(model, x, options):
    y = model(x)
    return y * options["gain"] if options["scale_output"] else y


def test_dict_argument_made_per_call_is_read_every_call():
    model = Scaled()
    compiled = fastcomp.compile(forward_with_options)
    with CompileCounter() as cc, Stats() as stats:
        for gain in (1.0, 2.0, 3.0):
            x = torch.randn(3, 16)
            with torch.no_grad():
                torch.testing.assert_close(compiled(model, x, {"gain": gain, "scale_output": True}),
                                           forward_with_options(model, x, {"gain": gain, "scale_output": True}))
    assert cc.frame_count == 3  # each gain is a constant of its graph, as without the memo
    assert stats.delta["stale"] == 0


def test_training_mode_toggle_recompiles_once_each_way():
    model = nn.Sequential(Scaled(), nn.Dropout(0.5), Scaled())
    compiled = fastcomp.compile(model)
    model.eval()
    calls(compiled, model, 2)
    with CompileCounter() as cc:
        model.train()
        torch.manual_seed(0)
        x = torch.randn(3, 16)
        torch.manual_seed(1)
        out = compiled(x)
        torch.manual_seed(1)
        torch.testing.assert_close(out, model(x))
        model.eval()
        calls(compiled, model, 2)
    assert cc.frame_count == 1  # train mode compiles once; back in eval mode the first entry matches again
    assert "training" in cc.recompile_reasons[0]


def test_bad_setting_is_refused_with_the_choices():
    with pytest.raises(ValueError, match=r"fastcomp.config.guard_memo='sometimes' is not one of 'auto', 'always', 'off'"):
        fastcomp.config.guard_memo = "sometimes"
