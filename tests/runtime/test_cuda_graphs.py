"""mode="reduce-overhead": CUDA-graph replay of compiled graphs (GPU tests), and what it does without a GPU."""
import contextlib
import gc
import logging
import weakref

import pytest
import torch

import fastcomp
from benchmarks.workloads import WORKLOADS
from fastcomp.testing import CompileCounter
from tests.helpers import assert_as_accurate_as_eager, assert_same


@contextlib.contextmanager
def cudagraph_log(caplog):
    """Yields the list of fastcomp.cudagraphs messages logged inside the block."""
    messages = []
    fastcomp.set_logs(cudagraphs=True)
    try:
        with caplog.at_level(logging.INFO, logger="fastcomp.cudagraphs"):
            yield messages
    finally:
        fastcomp.set_logs()
        messages.extend(r.getMessage() for r in caplog.records if r.name == "fastcomp.cudagraphs")


def captures(messages):
    return [m for m in messages if "cudagraphs: captured" in m]


def fallbacks(messages):
    return [m for m in messages if "runs without a CUDA graph" in m]


def test_reduce_overhead_on_cpu_runs_the_graph_without_a_cuda_graph(caplog):
    def f(x, y):
        return torch.relu(x) * y + 1

    compiled = fastcomp.compile(f, mode="reduce-overhead")
    with cudagraph_log(caplog) as messages, CompileCounter() as cc:
        for _ in range(3):
            x, y = torch.randn(5, 7), torch.randn(7)
            assert_same(compiled(x, y), f(x, y))
    assert (cc.frame_count, cc.graph_count) == (1, 1)
    assert cc.records[0]["backend"].endswith("(no CUDA graph: not on the CUDA backend)"), cc.records[0]["backend"]
    assert len(fallbacks(messages)) == 1 and "not on the CUDA backend" in messages[0], messages


def test_explain_in_reduce_overhead_mode_says_why_a_graph_has_no_cuda_graph():
    def f(x):
        return torch.cos(x) + 2

    out = fastcomp.explain(f, mode="reduce-overhead")(torch.randn(3))
    assert out.backends == ["torch runner: 2 ops (no CUDA tensors) (no CUDA graph: not on the CUDA backend)"], out
    with pytest.raises(ValueError, match="unknown mode 'fast'"):
        fastcomp.explain(f, mode="fast")


@pytest.mark.gpu
def test_explain_in_reduce_overhead_mode_marks_graphs_that_replay():
    def f(x):
        return torch.cos(x) + 2

    out = fastcomp.explain(f, mode="reduce-overhead")(torch.randn(3, device="cuda"))
    assert len(out.backends) == 1 and out.backends[0].endswith("+ CUDA graph"), out.backends


def test_cuda_graphs_option_is_reduce_overhead():
    def f(x):
        return x * 3

    compiled = fastcomp.compile(f, options={"cuda_graphs": True})
    with CompileCounter() as cc:
        x = torch.randn(4)
        assert_same(compiled(x), f(x))
    assert "no CUDA graph" in cc.records[0]["backend"]


COPY_TOO_COSTLY = "copying them costs more than a replay"
PICKS_COMPARED = "cuBLASLt products with tuned picks"


@pytest.mark.gpu
@pytest.mark.parametrize("wid", sorted(WORKLOADS))
def test_workload_replays_equal_eager_over_calls_with_new_values(wid, caplog):
    """Fresh input tensors on every call, then new values copied into the same tensors (what the log line about
    costly copies advises). Either way the results are eager's; with settled inputs every call from the third on
    is a replay (it returns the output objects of the replay two calls before: the previous call's are held)."""
    w = WORKLOADS[wid]
    torch.manual_seed(0)
    model, make_inputs = w.make("cuda", 1.0)
    compiled = fastcomp.compile(model, mode="reduce-overhead")
    with cudagraph_log(caplog) as moving, CompileCounter() as cc, torch.no_grad():
        out = None
        for _ in range(6):
            inputs = make_inputs()
            # `out` from the last call is still held during this one: replays alternate between two captures.
            out = compiled(*inputs)
            assert_as_accurate_as_eager(out, model, inputs)
    # Workloads whose inputs cost more to copy than their replay saves (few kernels, large inputs) run the
    # executable instead, after one capture; the others copy each moved input home and replay.
    # The first capture may be followed by one with cuBLASLt's favourite algorithms, to compare them in the model.
    compared = any(PICKS_COMPARED in m for m in moving)
    assert len(captures(moving)) == (1 if any(COPY_TOO_COSTLY in m for m in moving) else 2) + compared, moving
    caplog.clear()
    with cudagraph_log(caplog) as settled_log, CompileCounter() as cc_settled, torch.no_grad():
        settled = make_inputs()
        replayed = []
        for call in range(6):
            settled[0].copy_(make_inputs()[0])  # the activation; the rest are the same weights every call
            out = compiled(*settled)
            assert_as_accurate_as_eager(out, model, settled)
            replayed.append(weakref.ref(out))
            if call >= 3:
                assert replayed[call - 2]() is out, f"call {call} with settled inputs did not replay"
    assert (cc.frame_count, cc.graph_count, cc.break_count) == (1, 1, 0), cc.records
    assert cc_settled.frame_count == 0, cc_settled.records
    assert cc.records[0]["backend"].startswith("cuda:") and cc.records[0]["backend"].endswith("+ CUDA graph")
    assert not fallbacks(moving + settled_log), moving + settled_log


@pytest.mark.gpu
def test_held_outputs_and_views_of_them_keep_their_values(caplog):
    def f(x):  # four launches: copying a moved input home is worth it
        return (torch.sigmoid(x) @ x.T).softmax(-1) @ x

    compiled = fastcomp.compile(f, mode="reduce-overhead")
    xs = [torch.randn(64, 33, device="cuda") for _ in range(7)]
    with cudagraph_log(caplog) as messages:
        outs = [compiled(x) for x in xs[:4]]  # warm-up, capture A, capture B (A's output held), both held: no replay
        del outs[1:3]                          # frees A's and B's outputs
        # A's outputs are free, but it reads its input from xs[1], which the caller still holds: A is captured
        # again reading a buffer of its own (capture 3). Only a view of this output survives.
        view = compiled(xs[4])[1:3]
        last = compiled(xs[5])                 # A's output is viewed; B is captured again likewise (capture 4)
        fresh = compiled(xs[6])                # both held again: runs without the CUDA graph
    assert_same(outs[0], f(xs[0]), rtol=1e-4, atol=1e-4)
    assert_same(outs[1], f(xs[3]), rtol=1e-4, atol=1e-4)
    assert_same(view, f(xs[4])[1:3], rtol=1e-4, atol=1e-4)
    assert_same(last, f(xs[5]), rtol=1e-4, atol=1e-4)
    assert_same(fresh, f(xs[6]), rtol=1e-4, atol=1e-4)
    compared = any(PICKS_COMPARED in m for m in messages)  # the first capture's second, with the favourites
    assert len(captures(messages)) == 4 + compared, messages
    assert sum("are still held" in m for m in messages) == 1, messages


@pytest.mark.gpu
def test_inputs_at_a_new_address_are_copied_home_and_in_place_changes_are_seen(caplog):
    def f(x, w):  # enough launches that copying a moved input home is worth it
        return ((x @ w).relu() @ w).sigmoid() @ w + x.sum(-1, keepdim=True)

    compiled = fastcomp.compile(f, mode="reduce-overhead")
    w = torch.randn(32, 32, device="cuda")
    kept = [torch.randn(16, 32, device="cuda") for _ in range(3)]
    with cudagraph_log(caplog) as messages:
        # kept[0] is captured in place; kept[1] arrives while the caller still holds kept[0], so the graph is
        # captured again reading a buffer of its own, into which every later input is copied.
        for x in [kept[0]] + kept + kept:
            assert_same(compiled(x, w), f(x, w), rtol=1e-4, atol=1e-4)
        for _ in range(3):  # a new input every call
            x = torch.randn(16, 32, device="cuda")
            assert_same(compiled(x, w), f(x, w), rtol=1e-4, atol=1e-4)
        x.normal_()  # inputs changed in place are seen: the parameter-like `w` is read where it is
        w.mul_(2)
        assert_same(compiled(x, w), f(x, w), rtol=1e-4, atol=1e-4)
    assert not fallbacks(messages), messages
    compared = any(PICKS_COMPARED in m for m in messages)  # the first capture's second, with the favourites
    assert len(captures(messages)) == 2 + compared, messages


@pytest.mark.gpu
def test_a_moved_input_not_worth_copying_runs_the_call_directly(caplog):
    def f(x):  # one launch: a copy would cost as much as the replay saves
        return x + 1

    compiled = fastcomp.compile(f, mode="reduce-overhead")
    xs = [torch.randn(1000, device="cuda") for _ in range(4)]
    with cudagraph_log(caplog) as messages:
        for x in [xs[0]] + xs + xs:  # warm-up, capture reading xs[0] in place; then xs[0] replays and the others
            assert_same(compiled(x), f(x))  # run directly (outputs dropped at once): no capture again
    assert len(captures(messages)) == 1, messages
    assert sum("costs more than a replay" in m for m in messages) == 1, messages


@pytest.mark.gpu
def test_graph_that_writes_its_input_in_place_replays_in_place():
    def f(x, y):
        x.add_(y)
        return x * 2

    compiled = fastcomp.compile(f, mode="reduce-overhead")
    x, y = torch.randn(8, 8, device="cuda"), torch.randn(8, 8, device="cuda")
    expected_x = x.clone()
    for _ in range(4):
        out = compiled(x, y)
        expected_x += y
        assert_same(x, expected_x)
        assert_same(out, expected_x * 2)


@pytest.mark.gpu
def test_an_op_that_cannot_be_captured_falls_back_with_the_reason(caplog):
    def f(x):
        # torch.tensor(list) copies from pageable host memory, which a CUDA graph cannot record
        return x * torch.tensor([1.0, 2.0], device="cuda").repeat(5) + 1

    compiled = fastcomp.compile(f, mode="reduce-overhead")
    with cudagraph_log(caplog) as messages:
        for _ in range(4):
            x = torch.randn(10, device="cuda")
            assert_same(compiled(x), f(x))
    off = fallbacks(messages)
    assert len(off) == 1 and "capture failed" in off[0] and "pinned" in off[0], messages
    assert not captures(messages)


@pytest.mark.gpu
def test_outputs_that_are_inputs_or_views_of_inputs_view_each_calls_input(caplog):
    def f(x, d):
        return x.t(), x * 2, x[1:, ::2], x, {"ids": d["ids"], "flag": True}

    compiled = fastcomp.compile(f, mode="reduce-overhead")
    ids = torch.arange(5, device="cuda")
    with cudagraph_log(caplog) as messages:
        for i in range(6):
            # new inputs every call (copied home), then the same one twice (read in place)
            x = torch.randn(4, 6, device="cuda") if i < 5 else x
            a, b, c, same, d = compiled(x, {"ids": ids})
            assert a.data_ptr() == x.data_ptr() and a.stride() == (1, 6) and a._base is x
            assert c.data_ptr() == x[1:, ::2].data_ptr() and c.stride() == (6, 2)
            assert same is x and d["ids"] is ids
            assert_same(a, x.t()), assert_same(b, x * 2), assert_same(c, x[1:, ::2])
            x.add_(1)  # the views see later writes to the caller's tensor, as eager's do
            assert_same(a, x.t()), assert_same(c, x[1:, ::2])
    assert not fallbacks(messages), messages
    assert len(captures(messages)) >= 1, messages


@pytest.mark.gpu
def test_an_output_viewing_an_input_as_another_dtype_runs_without_a_cuda_graph(caplog):
    def f(x):
        return x.view(torch.int32), x * 2

    compiled = fastcomp.compile(f, mode="reduce-overhead")
    with cudagraph_log(caplog) as messages:
        for _ in range(3):
            x = torch.randn(4, 6, device="cuda")
            a, b = compiled(x)
            assert a.data_ptr() == x.data_ptr()
            assert_same(a, x.view(torch.int32)), assert_same(b, x * 2)
    off = fallbacks(messages)
    assert len(off) == 1 and "is not a view of it of its dtype" in off[0] and "Tensor.view" in off[0], messages


@pytest.mark.gpu
def test_each_segment_between_graph_breaks_has_its_own_cuda_graph(caplog, capsys):
    def f(x):
        y = torch.tanh(x) + 1
        print("between")
        return y * x

    compiled = fastcomp.compile(f, mode="reduce-overhead")
    with cudagraph_log(caplog) as messages, CompileCounter() as cc:
        for _ in range(4):
            x = torch.randn(128, device="cuda")
            assert_same(compiled(x), f(x))
    assert (cc.graph_count, cc.break_count) == (2, 1)
    labels = {m.split(" (capture")[0] for m in captures(messages)}
    assert len(labels) == 2, messages
    assert capsys.readouterr().out == "between\n" * 8


@pytest.mark.gpu
def test_replay_on_a_side_stream_is_ordered_with_the_work_around_it():
    def f(x):
        return torch.softmax(x * 3, dim=-1)

    compiled = fastcomp.compile(f, mode="reduce-overhead")
    side = torch.cuda.Stream()
    results = []
    with torch.cuda.stream(side):
        for _ in range(5):
            x = torch.randn(256, 1000, device="cuda")  # made on the side stream, right before the call
            out = compiled(x)
            results.append((x, out.clone()))
    side.synchronize()
    for x, out in results:
        assert_same(out, f(x))


@pytest.mark.gpu
def test_memory_returns_to_the_baseline_after_reset():
    def f(x):
        return torch.nn.functional.gelu(x @ x.t()) * 2

    torch.cuda.synchronize()
    gc.collect()
    baseline = torch.cuda.memory_allocated()
    compiled = fastcomp.compile(f, mode="reduce-overhead")
    out = None
    for _ in range(5):
        x = torch.randn(512, 256, device="cuda")
        out = compiled(x)
    assert torch.cuda.memory_allocated() > baseline
    del out, x
    fastcomp.reset()
    gc.collect()
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == baseline


@pytest.mark.gpu
@pytest.mark.parametrize("tuning", [True, False], ids=["tuned", "untuned"])
def test_tuned_matmul_picks_are_compared_with_the_favourites_in_the_model(tuning, caplog):
    """At its first capture a graph whose cuBLASLt products have tuned picks (other than the heuristic's favourite)
    is captured once more with the favourites; both replay in turn and the faster stays (1% or more, else the tuned
    picks). Without tuning there is nothing to compare. Results stay eager's either way."""
    import re

    model, make_inputs = WORKLOADS["W7"].make("cuda", 1.0)
    with fastcomp.config.patch(matmul_tuning=tuning):
        fastcomp.reset()
        compiled = fastcomp.compile(model, mode="reduce-overhead")
        with cudagraph_log(caplog) as messages, torch.no_grad():
            inputs = make_inputs()
            for _ in range(4):  # the output is dropped before the next call: one capture serves them all
                assert_as_accurate_as_eager(compiled(*inputs), model, inputs)
    compared = [m for m in messages if PICKS_COMPARED in m]
    if not tuning:
        assert not compared, messages
        return
    if not compared:  # this GPU's tuning kept every favourite: nothing to compare
        return
    (line,) = compared
    m = re.search(r"(\d+) cuBLASLt products with tuned picks: ([\d.]+) us a replay with them, ([\d.]+) with the "
                  r"heuristic's favourites; keeping the (favourites|tuned picks)", line)
    assert m, line
    tuned_us, favourite_us = float(m[2]), float(m[3])
    assert 1 <= int(m[1]) <= 4 and tuned_us > 0 and favourite_us > 0, line
    assert (m[4] == "favourites") == (favourite_us < tuned_us * 0.99), line
    assert len(captures(messages)) == 2, messages  # the tuned graph, then the favourites'; one of them stays
