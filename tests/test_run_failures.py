"""A compiled graph that raises at run time: where it wrote nothing, CPython runs the frame instead, so the user
gets eager's result or eager's own exception from their own line; a graph that raised where CPython did not is
fastcomp's bug, warned once, and its entry runs in CPython from then on. A graph that wrote something (in place,
or a norm's running statistics) cannot run twice: its exception is the user's."""
import traceback
import warnings

import pytest
import torch
import torch.nn.functional as F

import fastcomp
from fastcomp.testing import CompileCounter

# A kernel that fails on the calls listed in `failing` (counted from 1), whatever its input: the meta function
# accepts every call, so only running the graph finds out.
calls = {"count": 0, "failing": set(), "raises": RuntimeError}


# fastcomp.disable: CPython's run of a frame compiles the user functions it calls, and this one would be compiled
# for each new count.
@torch.library.custom_op("fastcomp_tests::flaky_double", mutates_args=(), schema="(Tensor x) -> Tensor")
@fastcomp.disable
def flaky_double(x):
    calls["count"] += 1
    if calls["count"] in calls["failing"]:
        raise calls["raises"](f"flaky_double failed on call {calls['count']}")
    return x * 2


@flaky_double.register_fake
def _(x):
    return torch.empty_like(x)


@pytest.fixture(autouse=True)
def _fresh_kernel():
    calls.update(count=0, failing=set(), raises=RuntimeError)
    yield
    fastcomp.reset()


def doubled_sine(x):
    y = x.sin()
    return torch.ops.fastcomp_tests.flaky_double(y) + 1


def test_a_graph_that_raises_where_cpython_does_not_warns_once_and_its_frames_run_in_cpython():
    compiled = fastcomp.compile(doubled_sine)
    calls["failing"] = {1}  # the compiled graph's call fails; CPython's call of the frame right after does not
    x = torch.randn(5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with CompileCounter() as cc:
            out = compiled(x)
        again = [compiled(torch.randn(5)) for _ in range(2)]
    assert cc.graph_count == 1
    torch.testing.assert_close(out, x.sin() * 2 + 1, rtol=0, atol=0)
    messages = [str(w.message) for w in caught]
    line = doubled_sine.__code__.co_firstlineno
    assert messages == [
        f"fastcomp internal error: the compiled graph of doubled_sine ({__file__}:{line}) raised RuntimeError: "
        "flaky_double failed on call 1, where running it in CPython does not. Calls of it that its guards accept run "
        "in CPython from now on. This is a bug of fastcomp: please report it, with the files "
        "FASTCOMP_DUMP_DIR=<dir> writes for this function."]
    # Once in the graph, once in CPython's run of the frame, then once a call: no graph runs it any more.
    assert calls["count"] == 4 and len(again) == 2
    with CompileCounter() as cc:
        x = torch.randn(5)
        torch.testing.assert_close(compiled(x), x.sin() * 2 + 1, rtol=0, atol=0)
    assert cc.frame_count == 0 and calls["count"] == 5


def test_with_suppress_errors_off_such_a_graph_raises_internal_error_and_then_runs_in_cpython():
    compiled = fastcomp.compile(doubled_sine)
    calls["failing"] = {1}
    x = torch.randn(5)
    with fastcomp.config.patch(suppress_errors=False):
        with pytest.raises(fastcomp.InternalError, match=r"the compiled graph of doubled_sine \(.*\) raised "
                           "RuntimeError: flaky_double failed on call 1, where running it in CPython does not"):
            compiled(x)
        torch.testing.assert_close(compiled(x), x.sin() * 2 + 1, rtol=0, atol=0)
    assert calls["count"] == 3


def test_a_graph_that_raises_where_cpython_raises_too_gives_eagers_exception_from_the_users_line():
    compiled = fastcomp.compile(doubled_sine)
    compiled(torch.randn(5))  # compiled and run: the graph works
    calls["failing"] = {2, 3}  # the graph's call and CPython's both fail
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the user's own error is no fastcomp warning
        with pytest.raises(RuntimeError, match="flaky_double failed on call 3") as info:
            compiled(torch.randn(5))
    frames = traceback.extract_tb(info.value.__traceback__)
    assert [f.name for f in frames if f.filename == __file__][-2:] == ["doubled_sine", "flaky_double"]
    calls["failing"] = set()
    with CompileCounter() as cc:  # the entry is still compiled: a user error says nothing against the graph
        x = torch.randn(5)
        torch.testing.assert_close(compiled(x), x.sin() * 2 + 1, rtol=0, atol=0)
    assert cc.frame_count == 0 and calls["count"] == 4


def test_a_graph_that_wrote_in_place_before_raising_is_not_run_again():
    def f(x):
        x.add_(1)
        return torch.ops.fastcomp_tests.flaky_double(x)

    compiled = fastcomp.compile(f)
    calls["failing"] = {1}
    x = torch.zeros(3)
    with pytest.raises(RuntimeError, match="flaky_double failed on call 1"):
        compiled(x)
    assert calls["count"] == 1 and x.tolist() == [1.0, 1.0, 1.0]


def test_a_graph_that_updated_running_statistics_before_raising_is_not_run_again():
    mean, var = torch.zeros(4), torch.ones(4)

    def f(x):
        y = F.batch_norm(x, mean, var, training=True, momentum=0.5)
        return torch.ops.fastcomp_tests.flaky_double(y)

    compiled = fastcomp.compile(f)
    calls["failing"] = {1}
    x = torch.randn(8, 4)
    with pytest.raises(RuntimeError, match="flaky_double failed on call 1"):
        compiled(x)
    torch.testing.assert_close(mean, 0.5 * x.mean(0))  # one update, not two
    assert calls["count"] == 1


def test_an_interrupt_inside_the_graph_is_not_a_reason_to_run_the_frame_again():
    compiled = fastcomp.compile(doubled_sine)
    calls.update(failing={1}, raises=KeyboardInterrupt)
    with pytest.raises(KeyboardInterrupt):
        compiled(torch.randn(5))
    assert calls["count"] == 1
