"""Dynamic shapes: automatic dynamic (dynamic=None), dynamic=True/False, mark_dynamic/mark_static, symbolic ints
computed from sizes, relations between sizes as guards, 0/1 specialisation, and the decisions kept on disk."""
import logging
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn

import fastcomp
from fastcomp.testing import CompileCounter

from benchmarks.workloads import MLP, TransformerLayer

# 20 batch sizes: the first two decide static then dynamic; 1 and primes included.
BATCH_SIZES = [8, 16, 1, 2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 4, 6, 9, 10, 12, 37]


@pytest.fixture
def logs(caplog):
    caplog.set_level(logging.INFO, logger="fastcomp")
    yield caplog
    fastcomp.set_logs()


def messages(caplog, topic):
    return [r.getMessage() for r in caplog.records if r.name == f"fastcomp.{topic}"]


def mlp():
    torch.manual_seed(0)
    return MLP(d=32, hidden=64).eval()


def run_batches(compiled, model, sizes, make):
    for b in sizes:
        x = make(b)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x), msg=f"batch size {b}")


def test_module_with_20_batch_sizes_compiles_twice_under_automatic_dynamic():
    model = mlp()
    compiled = fastcomp.compile(model)
    with CompileCounter() as cc:
        run_batches(compiled, model, BATCH_SIZES, lambda b: torch.randn(b, 32))
    assert cc.frame_count == 2, cc.recompile_reasons
    assert cc.recompile_reasons == ["0/0: tensor 'L['x']' size mismatch at index 0. expected 8, actual 16"] or \
        cc.recompile_reasons[0].endswith("tensor 'L['x']' size mismatch at index 0. expected 8, actual 16")
    static, dynamic = cc.records
    assert "f32[8, 32]" in static["graph"]
    assert "input L['x']  # f32[s0, 32]" in dynamic["graph"]
    assert "f32[s0, 64]" in dynamic["graph"]  # the size flows through linear and gelu


def test_module_with_20_batch_sizes_compiles_once_under_dynamic_true():
    model = mlp()
    compiled = fastcomp.compile(model, dynamic=True)
    with CompileCounter() as cc:
        run_batches(compiled, model, BATCH_SIZES, lambda b: torch.randn(b, 32))
    assert cc.frame_count == 1, cc.recompile_reasons
    graph = cc.records[0]["graph"]
    # Parameters stay static (as in Dynamo); the feature size of x is specialised by the linear that needs it.
    assert "f32[s0, 32]" in graph and "f32[64, 32]" in graph


def test_dynamic_false_always_specialises():
    model = mlp()
    compiled = fastcomp.compile(model, dynamic=False)
    with CompileCounter() as cc:
        run_batches(compiled, model, [8, 16, 5], lambda b: torch.randn(b, 32))
    assert cc.frame_count == 3
    assert all("s0" not in r["graph"] for r in cc.records)


def test_sequence_length_changes_in_an_attention_block():
    torch.manual_seed(0)
    layer = TransformerLayer(d=32, heads=4, hidden=64).eval()
    compiled = fastcomp.compile(layer)
    with CompileCounter() as cc:
        for seq in [8, 13, 16, 5, 2, 31, 1, 64]:
            x = torch.randn(3, seq, 32)
            with torch.no_grad():
                torch.testing.assert_close(compiled(x), layer(x), msg=f"sequence length {seq}")
    assert cc.frame_count == 2, cc.recompile_reasons
    assert "f32[3, s0, 32]" in cc.records[1]["graph"]


def test_attention_with_batch_and_sequence_dynamic():
    torch.manual_seed(0)
    layer = TransformerLayer(d=32, heads=4, hidden=64).eval()
    compiled = fastcomp.compile(layer, dynamic=True)
    with CompileCounter() as cc:
        for batch, seq in [(2, 7), (3, 9), (5, 4), (4, 11)]:
            x = torch.randn(batch, seq, 32)
            with torch.no_grad():
                torch.testing.assert_close(compiled(x), layer(x))
    assert cc.frame_count == 1, cc.recompile_reasons


def test_broadcast_mismatch_raises_torchs_error_not_a_wrong_result():
    def add(x, y):
        return x + y

    compiled = fastcomp.compile(add, dynamic=True)
    compiled(torch.randn(8, 4), torch.randn(8, 4))
    x, y = torch.randn(16, 4), torch.randn(9, 4)
    with pytest.raises(RuntimeError) as eager:
        add(x, y)
    with pytest.raises(RuntimeError) as ours:
        compiled(x, y)
    assert str(ours.value) == str(eager.value)
    # Sizes that still broadcast give eager's result (a new entry: the trace had them equal).
    x, y = torch.randn(16, 4), torch.randn(1, 4)
    torch.testing.assert_close(compiled(x, y), x + y)


def test_equal_sizes_of_two_inputs_become_one_symbol_with_an_equality_guard():
    def add(x, y):
        return (x + y).sum(0)

    compiled = fastcomp.compile(add, dynamic=True)
    with CompileCounter() as cc:
        for n in (8, 12, 3):
            x, y = torch.randn(n, 4), torch.randn(n, 4)
            torch.testing.assert_close(compiled(x, y), add(x, y))
        compiled(torch.randn(8, 4), torch.randn(1, 4))
    assert cc.frame_count == 2
    assert "tensor 'L['y']' size mismatch at index 0. expected s0 (= L['x'].size()[0] = 8), actual 1" in \
        cc.recompile_reasons[0]


def test_ints_computed_from_sizes_stay_symbolic():
    def f(x):
        b = x.shape[0]
        h = x.view(b // 2, 2, x.size(1)).sum(1)
        return h * x.numel(), b * 3 + 1

    compiled = fastcomp.compile(f, dynamic=True)
    with CompileCounter() as cc:
        for n in (4, 6, 10, 2, 30):
            x = torch.randn(n, 3)
            out, k = compiled(x)
            ref, ref_k = f(x)
            torch.testing.assert_close(out, ref)
            assert k == ref_k and type(k) is int
    assert cc.frame_count == 1
    graph = cc.records[0]["graph"]
    assert "Tensor.view(%0, (s0//2), 2, s1)" in graph
    assert "operator.mul(%2, s0*s1)" in graph and "return (%3, 3*s0 + 1)" in graph


def test_cat_size_is_the_sum_of_its_pieces_sizes():
    def f(x, y):
        return torch.cat((x, y, x), 1) * 2

    compiled = fastcomp.compile(f, dynamic=True)
    with CompileCounter() as cc:
        for n, m in ((8, 5), (13, 6), (2, 2), (7, 30)):
            x, y = torch.randn(3, n), torch.randn(3, m)
            torch.testing.assert_close(compiled(x, y), f(x, y))
    assert cc.frame_count == 1, cc.recompile_reasons
    assert "torch.cat((%0, %1, %0), 1)  # f32[s0, 2*s1 + s3]" in cc.records[0]["graph"], cc.records[0]["graph"]


def test_comparison_on_a_size_is_guarded_as_a_relation():
    def f(x):
        if x.shape[0] > 4:
            return x * 2
        return x * 3

    compiled = fastcomp.compile(f, dynamic=True)
    with CompileCounter() as cc:
        for n in (8, 16, 5):
            x = torch.randn(n)
            torch.testing.assert_close(compiled(x), f(x))
        assert cc.frame_count == 1
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x), f(x))
    assert cc.frame_count == 2
    assert "size relation s0 > 4 is False (it was True when traced" in cc.recompile_reasons[0]


def test_size_used_as_a_plain_int_is_specialised_and_logged(logs):
    fastcomp.set_logs(dynamic=True)

    def f(x):
        return x * float(x.shape[0])

    compiled = fastcomp.compile(f, dynamic=True)
    with CompileCounter() as cc:
        for n in (8, 9):
            x = torch.randn(n)
            torch.testing.assert_close(compiled(x), f(x))
    assert cc.frame_count == 2
    assert any(m.startswith("specialised s0 = L['x'].size()[0] to 8: its value (s0) is used as a plain Python int")
               for m in messages(logs, "dynamic"))


def test_sizes_0_and_1_are_specialised_and_logged(logs):
    fastcomp.set_logs(dynamic=True)

    def f(x):
        return x.sum(-1)

    compiled = fastcomp.compile(f, dynamic=True)
    compiled(torch.randn(1, 5))
    assert "dimension 0 of L['x'] has size 1: specialised (sizes 0 and 1 are never symbolic)" in messages(logs, "dynamic")
    assert "dimension 1 of L['x'] is dynamic: s0 (size 5 while tracing)" in messages(logs, "dynamic")


def test_symbol_needed_to_be_at_least_two_recompiles_for_size_1(logs):
    fastcomp.set_logs(dynamic=True)

    def f(x):
        return x.squeeze() + 1  # at size 1 squeeze drops the dimension

    compiled = fastcomp.compile(f, dynamic=True)
    with CompileCounter() as cc:
        for n in (4, 7, 1):
            x = torch.randn(n, 3)
            torch.testing.assert_close(compiled(x), f(x))
    assert cc.frame_count == 2
    assert "outside the range [2, inf] of s0" in cc.recompile_reasons[0]
    assert any("must be at least 2" in m and "Tensor.squeeze" in m for m in messages(logs, "dynamic"))


def test_mark_dynamic_traces_symbolic_from_the_first_call_within_its_range():
    def f(x):
        return torch.softmax(x, -1)

    compiled = fastcomp.compile(f)
    with CompileCounter() as cc:
        for n in (8, 12, 16):
            x = torch.randn(n, 4)
            fastcomp.mark_dynamic(x, 0, max=16)
            torch.testing.assert_close(compiled(x), f(x))
        assert cc.frame_count == 1
        compiled(torch.randn(32, 4))
    assert cc.frame_count == 2
    assert "outside the range [1, 16] of s0" in cc.recompile_reasons[0]


def test_mark_static_keeps_a_dimension_static_under_dynamic_true():
    def f(x):
        return x.cumsum(0)

    compiled = fastcomp.compile(f, dynamic=True)
    with CompileCounter() as cc:
        for n in (6, 9):
            x = torch.randn(n, 5)
            fastcomp.mark_static(x, 0)
            torch.testing.assert_close(compiled(x), f(x))
    assert cc.frame_count == 2
    assert "f32[6, s0]" in cc.records[0]["graph"]


def test_mark_dynamic_rejects_bad_arguments():
    with pytest.raises(ValueError, match="dimension 3 is out of range"):
        fastcomp.mark_dynamic(torch.randn(2, 2), 3)
    with pytest.raises(ValueError, match="min=5 is larger than max=4"):
        fastcomp.mark_dynamic(torch.randn(2, 2), 0, min=5, max=4)
    with pytest.raises(TypeError, match="expected a tensor"):
        fastcomp.mark_static([1, 2], 0)


def test_recompiles_and_dynamic_logs_explain_the_decision(logs):
    fastcomp.set_logs(recompiles=True, dynamic=True)
    compiled = fastcomp.compile(mlp())
    compiled(torch.randn(8, 32))
    compiled(torch.randn(16, 32))
    line = "dimension 0 of L['x'] became dynamic after size 8 → 16"
    assert line in messages(logs, "recompiles")
    assert line in messages(logs, "dynamic")
    assert "dimension 0 of L['x'] is dynamic: s0 (size 16 while tracing)" in messages(logs, "dynamic")


def test_graph_break_hands_a_symbolic_int_to_the_code_after_it():
    def f(x):
        n = x.shape[0] * 2
        print("between graphs")
        return x * n

    compiled = fastcomp.compile(f, dynamic=True)
    with CompileCounter() as cc:
        for n in (4, 6, 9):
            x = torch.randn(n)
            torch.testing.assert_close(compiled(x), f(x))
    # The frame's graph computes n from the size on each call; the resume function receives n as a plain int,
    # which it specialises on (ints are not automatically dynamic yet).
    assert [r["status"] for r in cc.records].count("break") == 1
    assert "return ('between graphs', 2*s0)" in cc.records[0]["graph"]


def run_dynamic_program(tmp_path, **env_vars):
    """Runs a program that calls a compiled function with batch sizes 8, 16, 5 in a fresh process sharing
    tmp_path's kernel cache; returns how many frames it compiled."""
    script = textwrap.dedent("""
        import torch, fastcomp
        from fastcomp.testing import CompileCounter

        def f(x):
            return torch.relu(x) + 1

        compiled = fastcomp.compile(f)
        with CompileCounter() as cc:
            for n in (8, 16, 5):
                compiled(torch.randn(n, 3))
        print(cc.frame_count)
    """)
    path = tmp_path / "prog.py"
    path.write_text(script)
    env = {k: v for k, v in os.environ.items() if k != "FASTCOMP_AUTOMATIC_DYNAMIC_ON_DISK"}
    env.update(FASTCOMP_CACHE_DIR=str(tmp_path / "cache"),
               # the fastcomp this test imported (a developer build's python/ or the installed package)
               PYTHONPATH=os.pathsep.join(filter(None, [os.path.dirname(os.path.dirname(fastcomp.__file__)),
                                                        os.environ.get("PYTHONPATH")])), **env_vars)
    out = subprocess.run([sys.executable, str(path)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[-1])


def test_new_process_remembers_which_dimensions_are_dynamic_when_asked(tmp_path):
    assert run_dynamic_program(tmp_path, FASTCOMP_AUTOMATIC_DYNAMIC_ON_DISK="1") == 2  # static, then dynamic
    assert len(list((tmp_path / "cache" / "dynamic").glob("*.txt"))) == 1
    assert run_dynamic_program(tmp_path, FASTCOMP_AUTOMATIC_DYNAMIC_ON_DISK="1") == 1  # dynamic from the first call


def test_dynamic_decisions_do_not_leak_between_programs_by_default(tmp_path):
    assert run_dynamic_program(tmp_path) == 2
    assert not (tmp_path / "cache" / "dynamic").exists()
    assert run_dynamic_program(tmp_path) == 2  # static first again: nothing was kept from the first program
    # Decisions an opted-in program left on disk are not read by a program that did not opt in.
    assert run_dynamic_program(tmp_path, FASTCOMP_AUTOMATIC_DYNAMIC_ON_DISK="yes") == 2
    assert run_dynamic_program(tmp_path) == 2


def test_reset_forgets_dynamic_decisions_of_this_process():
    compiled = fastcomp.compile(lambda x: x * 2)
    with CompileCounter() as cc:
        compiled(torch.randn(8))
        compiled(torch.randn(16))  # dimension 0 becomes dynamic
        compiled(torch.randn(4))   # served by the dynamic entry
    assert cc.frame_count == 2
    fastcomp.reset()
    with CompileCounter() as cc:
        compiled(torch.randn(4))
    assert cc.frame_count == 1 and "f32[4]" in cc.records[0]["graph"]  # static again: the decision was cleared


class Reshaper(nn.Module):
    def forward(self, x):
        b, s, d = x.shape
        h = x.reshape(b * s, d).softmax(-1)
        return h.view(b, s, 2, d // 2).transpose(1, 2).contiguous().flatten(1).mean(-1)


def test_views_reductions_and_matmuls_follow_symbolic_sizes():
    model = Reshaper()
    compiled = fastcomp.compile(model, dynamic=True)
    with CompileCounter() as cc:
        for b, s in [(2, 3), (4, 5), (3, 7)]:
            x = torch.randn(b, s, 6)
            torch.testing.assert_close(compiled(x), model(x))
    assert cc.frame_count == 1, cc.recompile_reasons

    def mm(a, b):
        return torch.bmm(a, b).sum(-1) + a.mean((1, 2), keepdim=True).squeeze(-1)

    compiled_mm = fastcomp.compile(mm, dynamic=True)
    with CompileCounter() as cc:
        for n, k in [(3, 4), (5, 6), (2, 9)]:
            a, b = torch.randn(2, n, k), torch.randn(2, k, 7)
            torch.testing.assert_close(compiled_mm(a, b), mm(a, b))
    assert cc.frame_count == 1, cc.recompile_reasons


@pytest.mark.gpu
def test_dynamic_batches_on_cuda_match_eager_and_compile_twice():
    torch.manual_seed(0)
    model = MLP(d=64, hidden=128).cuda().eval()
    compiled = fastcomp.compile(model)
    with CompileCounter() as cc:
        run_batches(compiled, model, BATCH_SIZES, lambda b: torch.randn(b, 64, device="cuda"))
    assert cc.frame_count == 2, cc.recompile_reasons
    assert cc.records[0]["backend"].startswith("cuda:")  # the static entry gets kernels
    assert cc.records[1]["backend"].startswith("cuda:")  # so does the dynamic one, with size-generic kernels
    assert "dynamic shapes (s0)" in cc.records[1]["backend"]


@pytest.mark.gpu
def test_sequence_lengths_of_an_attention_block_on_cuda():
    torch.manual_seed(0)
    layer = TransformerLayer(d=64, heads=4, hidden=128).cuda().eval()
    compiled = fastcomp.compile(layer, dynamic=True)
    with CompileCounter() as cc:
        for seq in (8, 13, 1, 31, 64):
            x = torch.randn(2, seq, 64, device="cuda")
            with torch.no_grad():
                torch.testing.assert_close(compiled(x), layer(x), atol=1e-4, rtol=1e-4)
    assert cc.frame_count == 1, cc.recompile_reasons
