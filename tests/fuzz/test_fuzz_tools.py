"""The fuzzer's own parts: generation is deterministic and valid, comparisons see differences, the worker
classifies crashes and hangs, the minimizer shrinks, and a repro file fails standalone."""
import os
import subprocess
import sys

import pytest
import torch

from tests.fuzz import harness
from tests.fuzz.generator import generate
from tests.fuzz.minimize import minimize
from tests.fuzz.program import InputSpec, Program, Stmt
from tests.fuzz.report import repro_text
from tests.fuzz.runner import ROOT, Worker, _python_path


def test_generation_is_deterministic_and_runs_eagerly():
    for i in range(20):
        p = generate(3, i)
        assert p.source() == generate(3, i).source()
        ns = {}
        exec(compile(p.source(), f"gen_{i}.py", "exec"), ns)
        args, _ = ns["make_inputs"](p.sizes[0], 1, {}, False)
        try:
            ns["fn"](*args)
        except Exception as e:  # noqa: BLE001 - only programs that end in a statement made to raise may raise
            assert any(s.kind.startswith("raises.") for s in p.body), (p.source(), e)


@pytest.mark.parametrize("eager, compiled, cls", [
    (torch.Size([2]), (2,), "wrong type"),
    ([1], (1,), "wrong type"),
    (torch.ones(2), torch.ones(3), "wrong value"),
    (torch.ones(2), torch.ones(2, dtype=torch.float64), "wrong value"),
    (torch.tensor([1.0, float("nan")]), torch.tensor([1.0, 0.0]), "wrong value"),
    ({"a": 1, "b": 2}, {"b": 2, "a": 1}, "wrong value"),
    ({torch.ones(1): 3}, {torch.ones(1): 3}, None),
    ({torch.ones(1): 3}, {torch.zeros(1): 3}, "wrong value"),
    (1.5, 1.5000001, None),
    (torch.tensor([float("nan")]), torch.tensor([float("nan")]), None),
    (torch.ones(2, dtype=torch.float16), torch.ones(2, dtype=torch.float16) + 1e-3, None),
])
def test_compare(eager, compiled, cls):
    try:
        harness.compare(eager, compiled)
        got = None
    except harness.Mismatch as m:
        got = m.cls
    assert got == cls


def _program(body, returns, dims=("N",), steps=None):
    p = Program(seed=0, index=0, inputs=[InputSpec("x", "tensor", dims, "float32")],
                body=[Stmt(f"test.{i}", b) for i, b in enumerate(body)], returns=returns,
                sizes=[{"N": 3, "M": 2, "K": 2}, {"N": 5, "M": 2, "K": 2}, {"N": 6, "M": 2, "K": 2}])
    if steps is not None:
        p.steps_override = steps
    return p


def _job(p, tag):
    from tests.fuzz.runner import job_for

    return job_for(p, tag)


def test_worker_passes_a_correct_program_and_classifies_crashes_and_hangs():
    w = Worker(timeout=20)
    try:
        ok = w.run(_job(_program(["v1 = x * 2 + 1", "v2 = v1.sum(0)"], ["v1", "v2"]), "t_ok"))
        assert ok["failure"] is None and ok["stats"] and not ok.get("error")
        crash = _program(["import os, signal", "os.kill(os.getpid(), signal.SIGSEGV)"], ["x"])
        f = w.run(_job(crash, "t_crash"))["failure"]
        assert f["cls"] == "crash" and f["detail"] == "SIGSEGV"
        assert w.proc is None
        w.timeout = 3
        f = w.run(_job(_program(["while True:\n    pass"], ["x"]), "t_hang"))["failure"]
        assert f["cls"] == "hang" and f["step"] == "first"
    finally:
        w.stop()


def test_minimizer_keeps_the_failure_and_drops_the_rest():
    # A stand-in for a fastcomp bug: "fails" while the statement marked BUG is there and its input is returned.
    p = _program(["v1 = x + 1", "v2 = v1 * 2  # BUG", "v3 = x.sum()", "v4 = v3 + 1"], ["v1", "v2", "v4"])

    def run(candidate):
        bug = any("BUG" in s.text for s in candidate.body)
        defined = {s.text.split(" =")[0] for s in candidate.body}
        if bug and "v1" in defined and "v2" in candidate.returns:
            return {"cls": "wrong value", "variant": "auto", "step": "first", "step_index": 0, "detail": "tensor values"}
        return None

    failure = run(p)
    small, small_failure, runs = minimize(p, failure, run, budget_s=30)
    assert [s.text for s in small.body] == ["v1 = x + 1", "v2 = v1 * 2  # BUG"]
    assert small.returns == ["v2"] and small_failure["cls"] == "wrong value" and runs > 0


def test_repro_file_runs_standalone(tmp_path):
    # A correct program exits 0; a planted difference (the program reads its namespace's __name__, which differs
    # between the eager and the compiled copy) exits 1.
    ok = _program(["v1 = x.exp()"], ["v1"])
    failure = {"cls": "wrong value", "variant": "auto", "step": "first", "detail": "x", "where": "out"}
    path = tmp_path / "repro_ok.py"
    path.write_text(repro_text(ok, failure, minimized=True))
    env = dict(os.environ, PYTHONPATH=_python_path())
    r = subprocess.run([sys.executable, str(path)], env=env, capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and "OK: compiled matches eager" in r.stdout, r.stdout + r.stderr
    bad = _program(["v1 = x + (1 if __name__ == 'fuzz_eager' else 2)"], ["v1"])
    path = tmp_path / "repro_bad.py"
    path.write_text(repro_text(bad, failure, minimized=True))
    r = subprocess.run([sys.executable, str(path)], env=env, capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 1 and "FAIL (wrong value)" in r.stdout, r.stdout + r.stderr


def test_statement_simplifications():
    from tests.fuzz.minimize import simplifications

    assert simplifications("if a > 1:\n    v = 1\nelse:\n    v = 2") == ["v = 1", "v = 2"]
    assert simplifications("try:\n    v = x.view(-1)\nexcept RuntimeError:\n    v = x") == ["v = x.view(-1)", "v = x"]
    assert simplifications("torch.manual_seed(3)\nr = torch.rand(2)") == ["r = torch.rand(2)", "torch.manual_seed(3)"]
    assert simplifications("v = x + 1") == []


_ROUNDING_PROGRAM = '''
import torch
DEVICE = {device!r}

def fn(x1):
    v1 = x1 - x1.mean(){extra}
    return torch.logical_and(torch.copysign(v1, x1), x1).float()

def make_inputs(sizes, seed, dtypes={{}}, grad=False):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(1, generator=g).expand(sizes["N"]).to(DEVICE)], []
'''


def _turns_on_rounding(device, extra=""):
    step = {"name": "first", "sizes": {"N": 3}, "seed": 1490008}
    return harness._turns_on_rounding(_ROUNDING_PROGRAM.format(device=device, extra=extra), "p.py", [step])


_FLOOR_PROGRAM = '''
import torch
DEVICE = 'cpu'

def fn(x):
    return (x * {scale}).floor().remainder(2)

def make_inputs(sizes, seed, dtypes={{}}, grad=False):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(sizes["N"], generator=g).to(DEVICE)], []
'''


def test_a_result_that_a_one_ulp_move_of_the_inputs_changes_turns_on_rounding():
    step = {"name": "first", "sizes": {"N": 64}, "seed": 7}
    # floor(x * 1e6) moves with the last bits of x; floor(x * 10) almost never does.
    assert harness._turns_on_rounding(_FLOOR_PROGRAM.format(scale="1e6"), "p.py", [step]) is True
    assert harness._turns_on_rounding(_FLOOR_PROGRAM.format(scale="10"), "p.py", [step]) is False
    # On the CPU there is no other implementation to ask, and an expanded input cannot move.
    assert _turns_on_rounding("cpu") is False


@pytest.mark.gpu
def test_a_cuda_result_that_turns_on_rounding_is_recognised():
    # x - x.mean() of equal values is 0 on one device and a rounding residue on another: no right answer at all.
    # Whether the two devices disagree depends on the value; search seeds until they do, then the check must say so.
    for seed in range(1490000, 1490400):
        step = {"name": "first", "sizes": {"N": 3}, "seed": seed}
        ns_cpu, ns_cuda = {}, {}
        exec(_ROUNDING_PROGRAM.format(device="cpu", extra=""), ns_cpu)
        exec(_ROUNDING_PROGRAM.format(device="cuda", extra=""), ns_cuda)
        a = ns_cpu["fn"](*ns_cpu["make_inputs"](step["sizes"], seed)[0])
        b = ns_cuda["fn"](*ns_cuda["make_inputs"](step["sizes"], seed)[0]).cpu()
        if not torch.equal(a, b):
            assert harness._turns_on_rounding(_ROUNDING_PROGRAM.format(device="cuda", extra=""), "p.py", [step])
            break
    else:
        pytest.skip("no seed in range where CPU and CUDA eager disagree")
    step = {"name": "first", "sizes": {"N": 3}, "seed": 1}
    well_conditioned = _ROUNDING_PROGRAM.format(device="cuda", extra="").replace("x1 - x1.mean()", "x1 * 2")
    assert harness._turns_on_rounding(well_conditioned, "p.py", [step]) is False
    # The CPU draws other random numbers than CUDA: a program with random ops gets no opinion from it.
    random_draws = _ROUNDING_PROGRAM.format(device="cuda", extra="").replace(
        "x1 - x1.mean()", "x1 * 0 + torch.rand(3, device=DEVICE) - 0.5")
    assert harness._turns_on_rounding(random_draws, "p.py", [step]) is False


def test_a_program_the_generator_cannot_build_is_skipped_not_fatal(tmp_path, monkeypatch):
    # A statement that ran once can raise when the generator re-runs the program (seed 10: a ZeroDivisionError
    # ended one of the two fuzzing threads). The program is counted and skipped; the others still run.
    from tests.fuzz import fuzz

    def generate(seed, index, device):
        if index == 1:
            raise ZeroDivisionError("division by zero")
        return fuzz_generate(seed, index, device)

    fuzz_generate = fuzz.generate
    monkeypatch.setattr(fuzz, "generate", generate)
    logged = []
    report = fuzz.run(seed=3, count=3, workers=1, out=str(tmp_path / "fz"), verify=False, log=logged.append)
    assert report.programs == 2 and report.totals["generator_errors"] == 1
    assert any("program 1: the generator failed (ZeroDivisionError" in line for line in logged)


def test_plan_comparison_holds_an_f64_cast_of_an_f32_value_to_f32_and_sees_wrong_values():
    from tests.fuzz.plans import _mismatch

    f32 = torch.tensor(0.9527571201324463, dtype=torch.float32)
    ulp_off = torch.nextafter(f32, torch.tensor(2.0))  # another summation order: one ulp of f32 away
    assert _mismatch([ulp_off.double()], [f32.double()]) is None
    assert "not close" in _mismatch([f32.double() * 1.001], [f32.double()])  # a wrong value stays one
    assert "not close" in _mismatch([torch.tensor([3.0], dtype=torch.float64)],
                                    [torch.tensor([2.0], dtype=torch.float64)])  # integers: f64's own tolerance
    assert "not close" in _mismatch([torch.tensor(0.1, dtype=torch.float64) + 1e-8],
                                    [torch.tensor(0.1, dtype=torch.float64)])  # a true f64 value: f64's tolerance
