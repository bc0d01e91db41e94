"""The scratch arena: intermediates that only fastcomp's kernels and cuBLASLt calls touch share one allocation per
call, buffers with disjoint lifetimes sharing slots. The slot planner is checked on the CPU (by brute force over
random lifetimes), the plan's choice of scratch buffers in CPU rehearsals, and the executable on a GPU."""
import logging
import math
import random
import re

import pytest
import torch

import fastcomp
from fastcomp import _C
from fastcomp.testing import CompileCounter
from tests.helpers import assert_same

ALIGN = 512


def arena(lifetimes, sizes=None):
    return _C._testing.scratch_arena(lifetimes, sizes)


def aligned(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


def check_no_overlap(lifetimes, sizes, out):
    """Buffers alive at the same step never share a byte; every offset is aligned; all fit in the arena."""
    offsets = out["offsets"]
    for i, ((f1, l1, _), s1, o1) in enumerate(zip(lifetimes, sizes, offsets)):
        assert o1 % ALIGN == 0
        assert o1 + s1 <= out["size"]
        for (f2, l2, _), s2, o2 in zip(lifetimes[i + 1:], sizes[i + 1:], offsets[i + 1:]):
            if f1 <= l2 and f2 <= l1 and s1 and s2:
                assert o1 + s1 <= o2 or o2 + s2 <= o1, (lifetimes, sizes, offsets)


def test_buffers_with_disjoint_lifetimes_share_a_slot():
    out = arena([(0, 1, 4096), (2, 3, 4096), (4, 5, 1000)])
    assert out["slots"] == [0, 0, 0] and out["offsets"] == [0, 0, 0]
    assert out["size"] == 4096


def test_lifetimes_that_touch_at_one_step_do_not_share():
    # A step reading one buffer and writing another needs both at once: lifetimes include both ends.
    out = arena([(0, 2, 1024), (2, 4, 1024)])
    assert out["slots"] == [0, 1] and out["size"] == 2048


def test_slots_are_aligned_to_512_bytes():
    out = arena([(0, 3, 1), (1, 2, 513), (2, 5, 16)])
    assert all(o % ALIGN == 0 for o in out["offsets"])
    assert out["size"] == ALIGN + 2 * ALIGN + ALIGN


def test_no_buffers_make_an_empty_arena():
    assert arena([]) == {"slots": [], "offsets": [], "size": 0, "alignment": ALIGN}


def test_empty_buffers_take_no_bytes():
    out = arena([(0, 5, 0), (1, 2, 0)])
    assert out["size"] == 0


def test_a_chain_of_steps_needs_two_slots():
    # Each step reads the buffer the step before wrote: a transformer's layers, say.
    lifetimes = [(i, i + 1, 8192) for i in range(20)]
    out = arena(lifetimes)
    assert len(set(out["slots"])) == 2 and out["size"] == 2 * 8192


@pytest.mark.parametrize("seed", range(200))
def test_live_buffers_never_overlap_in_bytes(seed):
    rng = random.Random(seed)
    steps = rng.randint(1, 30)
    lifetimes = []
    for _ in range(rng.randint(1, 40)):
        first = rng.randrange(steps)
        size = rng.choice([0, 1, 16, 500, 512, 513, 4096, rng.randrange(1, 1 << 20)])
        lifetimes.append((first, rng.randint(first, steps - 1), size))
    sizes = [b for _, _, b in lifetimes]
    out = arena(lifetimes)
    check_no_overlap(lifetimes, sizes, out)
    # No worse than a buffer each, and no better than the most bytes alive at one step.
    assert out["size"] <= sum(aligned(s) for s in sizes)
    peak = max(sum(aligned(b) for f, l, b in lifetimes if f <= step <= l) for step in range(steps))
    assert out["size"] >= peak


@pytest.mark.parametrize("seed", range(100))
def test_dynamic_sizes_are_laid_out_per_call_on_the_same_slots(seed):
    # Slots are chosen for the trace-time sizes; each call's sizes may order differently, and the arena still
    # holds every live buffer apart.
    rng = random.Random(seed)
    steps = rng.randint(1, 20)
    lifetimes = []
    for _ in range(rng.randint(1, 30)):
        first = rng.randrange(steps)
        lifetimes.append((first, rng.randint(first, steps - 1), rng.randrange(0, 1 << 16)))
    planned = arena(lifetimes)
    for _ in range(3):
        sizes = [rng.randrange(0, 1 << 18) for _ in lifetimes]
        out = arena(lifetimes, sizes)
        assert out["slots"] == planned["slots"]
        check_no_overlap(lifetimes, sizes, out)
        slot_sizes = {}
        for slot, size in zip(out["slots"], sizes):
            slot_sizes[slot] = max(slot_sizes.get(slot, 0), aligned(size))
        assert out["size"] == sum(slot_sizes.values())


def test_sizes_must_match_the_buffers():
    with pytest.raises(ValueError):
        arena([(0, 1, 16)], [16, 32])
    with pytest.raises(ValueError):
        arena([(3, 1, 16)])


# ---- which buffers a plan puts in the arena (CPU rehearsals of the CUDA backend) --------------------------

@pytest.fixture
def rehearse():
    try:
        _C._testing.nvrtc_version()
    except Exception as e:
        pytest.skip(f"NVRTC is not available: {e}")
    _C.set_rehearse_cuda_backend(True)
    yield
    _C.set_rehearse_cuda_backend(False)


def rehearsed_plan(fn, args, **options):
    with CompileCounter() as cc, torch.no_grad():
        assert_same(fastcomp.compile(fn, **options)(*args), fn(*args), rtol=1e-4, atol=1e-4)
    assert cc.graph_count == 1, cc.records
    return cc.records[0]["plan"]


def scratch_line(plan):
    lines = [l for l in plan.splitlines() if l.startswith("scratch arena:")]
    assert len(lines) == 1, plan
    m = re.fullmatch(r"scratch arena: (\d+) buffers in (\d+) slots, (\d+ bytes|dynamic size) \((.*)\)", lines[0])
    assert m, lines[0]
    slots = [[int(b[1:]) for b in s.split()] for s in m.group(4).split(" | ")]
    assert sum(map(len, slots)) == int(m.group(1)) and len(slots) == int(m.group(2))
    return slots, m.group(3)


def buffer_lines(plan):
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^b(\d+) = (.*)$", plan, re.M)}


def test_transformer_intermediates_share_a_few_slots(rehearse):
    from benchmarks.workloads import WORKLOADS

    w = WORKLOADS["W10"]
    model, make_inputs = w.make("cpu", w.quick_scale)
    plan = rehearsed_plan(model, make_inputs())
    slots, size = scratch_line(plan)
    buffers = buffer_lines(plan)
    scratch = [b for s in slots for b in s]
    assert all(buffers[b].startswith("alloc ") for b in scratch), plan
    # Four layers' dozens of intermediates (31 with the attention kernels), but only a handful alive at once.
    assert len(scratch) >= 30 and len(slots) <= 8, slots
    assert size.endswith(" bytes")
    total = 0
    for b in scratch:
        dims = re.match(r"alloc f32\[([\d, ]*)\]", buffers[b]).group(1)
        total += aligned(4 * math.prod(int(d) for d in dims.split(", ") if d))
    assert int(size.split()[0]) * 4 <= total, (size, total)


def test_outputs_and_what_torch_ops_read_stay_out_of_the_arena(rehearse):
    def f(x, w):
        h = torch.relu(x @ w)         # read by an op the backend has no kernel for, so a torch object
        c = torch.cumsum(h, 0)
        g = torch.sigmoid(c @ w) * 2  # intermediates only kernels and matmuls read
        t = torch.tanh(g @ w)         # an output, and a view of it is another
        return t, t.t(), (t @ w) + 1

    args = (torch.randn(16, 16), torch.randn(16, 16))
    with CompileCounter() as cc, torch.no_grad():
        assert_same(fastcomp.compile(f)(*args), f(*args), rtol=1e-4, atol=1e-4)
    record = cc.records[0]
    slots, _ = scratch_line(record["plan"])
    buffers = buffer_lines(record["plan"])
    scratch_nodes = {int(re.search(r"# %(\d+)$", buffers[b]).group(1)) for s in slots for b in s}
    ops = {m.group(2): int(m.group(1)) for m in re.finditer(r"^%(\d+) = ([\w.]+)\(", record["graph"], re.M)}
    matmuls = [int(n) for n in re.findall(r"^%(\d+) = operator.matmul", record["graph"], re.M)]
    assert scratch_nodes == set(matmuls) | {ops["operator.mul"]}, (scratch_nodes, record["plan"])
    assert not scratch_nodes & {ops["torch.relu"], ops["torch.tanh"], ops["operator.add"]}


def test_dynamic_shapes_make_a_dynamic_arena(rehearse):
    def f(x, w):
        return torch.softmax(torch.relu(x @ w) * 3, -1) @ w

    plan = rehearsed_plan(f, (torch.randn(8, 16), torch.randn(16, 16)), dynamic=True)
    slots, size = scratch_line(plan)
    assert size == "dynamic size" and slots, plan


# ---- the executable on a GPU ------------------------------------------------------------------------------

def many_intermediates(x, w1, w2, b):
    h = torch.nn.functional.layer_norm(x, x.shape[-1:])
    for _ in range(3):
        a = torch.nn.functional.gelu(h @ w1 + b)
        s = torch.softmax(a @ a.transpose(-1, -2) * 0.125, -1)
        h = torch.nn.functional.layer_norm(h + s @ a @ w2, h.shape[-1:])
    c = torch.cumsum(h, -1)  # an extern torch op in the middle, reading an intermediate
    return torch.relu(c @ w1) * 0.5 + torch.sigmoid(h @ w1)


def gpu_args(n=64, d=96, hidden=128):
    return (torch.randn(n, d, device="cuda"), torch.randn(d, hidden, device="cuda") * 0.1,
            torch.randn(hidden, d, device="cuda") * 0.1, torch.randn(hidden, device="cuda"))


@pytest.mark.gpu
def test_many_intermediates_equal_eager_over_calls():
    compiled = fastcomp.compile(many_intermediates)
    with CompileCounter() as cc, torch.no_grad():
        for _ in range(4):
            args = gpu_args()
            assert_same(compiled(*args), many_intermediates(*args), rtol=1e-4, atol=1e-4)
    assert cc.records[0]["backend"].startswith("cuda:"), cc.records[0]["backend"]
    slots, _ = scratch_line(cc.records[0]["plan"])
    assert sum(map(len, slots)) > len(slots), slots  # some slot really is shared


@pytest.mark.gpu
def test_held_outputs_are_not_overwritten_by_the_next_call():
    compiled = fastcomp.compile(many_intermediates)
    with torch.no_grad():
        calls = [gpu_args() for _ in range(3)]
        outs = [compiled(*args) for args in calls]
        for args, out in zip(calls, outs):
            assert_same(out, many_intermediates(*args), rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_memory_returns_to_the_baseline_after_a_call_and_peaks_near_the_live_intermediates():
    n = 1024
    size = n * n * 4

    def chain(x, w):
        for _ in range(8):
            x = torch.relu(x @ w) * 0.5  # each intermediate is read by the next step only
        return x.sum(-1)

    compiled = fastcomp.compile(chain)
    x, w = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda") / 32
    with torch.no_grad():
        compiled(x, w)  # builds: cuBLASLt workspace and plans
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        out = compiled(x, w)
        peak = torch.cuda.max_memory_allocated() - before
        assert torch.cuda.memory_allocated() == before + aligned(out.numel() * 4)
        del out
        assert torch.cuda.memory_allocated() == before
    # Sixteen intermediates of `size` bytes, but never more than a few alive at once.
    assert peak <= 4 * size, (peak, size)
    assert_same(compiled(x, w), chain(x, w), rtol=1e-4, atol=1e-3)


@pytest.mark.gpu
def test_views_of_intermediates_handed_out_keep_their_values():
    def f(x, w):
        h = torch.tanh(x @ w)
        g = torch.sigmoid(h @ w) * 2
        return h.t(), h[1:3], g @ w

    compiled = fastcomp.compile(f)
    with torch.no_grad():
        calls = [(torch.randn(32, 32, device="cuda"), torch.randn(32, 32, device="cuda")) for _ in range(3)]
        outs = [compiled(*args) for args in calls]
        for args, out in zip(calls, outs):
            assert_same(out, f(*args), rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_dynamic_shapes_lay_the_arena_out_per_call():
    compiled = fastcomp.compile(many_intermediates, dynamic=True)
    with CompileCounter() as cc, torch.no_grad():
        for n in [64, 17, 128, 5, 64, 200, 2]:
            args = gpu_args(n=n)
            assert_same(compiled(*args), many_intermediates(*args), rtol=1e-4, atol=1e-4)
    assert cc.frame_count == 1, cc.recompile_reasons
    assert scratch_line(cc.records[0]["plan"])[1] == "dynamic size"


@pytest.mark.gpu
def test_reduce_overhead_replays_with_the_arena_in_the_graphs_pool():
    compiled = fastcomp.compile(many_intermediates, mode="reduce-overhead")
    with CompileCounter() as cc, torch.no_grad():
        held = []
        for i in range(6):
            args = gpu_args()
            out = compiled(*args)
            assert_same(out, many_intermediates(*args), rtol=1e-4, atol=1e-4)
            if i % 2:
                held.append((out, args))  # every other output held across later replays
        for out, args in held:
            assert_same(out, many_intermediates(*args), rtol=1e-4, atol=1e-4)
    assert cc.records[0]["backend"].endswith("+ CUDA graph"), cc.records[0]["backend"]


@pytest.mark.gpu
def test_compile_log_names_the_arena_size(caplog):
    caplog.set_level(logging.DEBUG, logger="fastcomp")
    fastcomp.set_logs(compile=logging.DEBUG)
    try:
        with torch.no_grad():
            fastcomp.compile(many_intermediates)(*gpu_args())
    finally:
        fastcomp.set_logs()
    loaded = [r.getMessage() for r in caplog.records if "cuda executable: loaded" in r.getMessage()]
    assert loaded and re.search(r"scratch arena \d+ bytes \(\d+ buffers in \d+ slots\)", loaded[0]), loaded
