"""The benchmark harness stays runnable: the workloads run eagerly on the CPU, and `--quick` reports every row.

No timing is asserted anywhere; only that numbers exist and the reports are complete and well formed.
"""
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # `benchmarks` is a top-level folder of the checkout, not an installed package

from benchmarks import accuracy, isolation, plan, timing  # noqa: E402
from benchmarks.modes import MODES  # noqa: E402
from benchmarks.overhead_cases import OVERHEAD_CASES  # noqa: E402
from benchmarks.workloads import WORKLOADS, minimal_bytes_moved, scaled_shape  # noqa: E402


def _expected_output_shape(workload_id: str, inputs: tuple) -> tuple:
    x = inputs[0]
    if workload_id == "W9":
        return (x.shape[0], inputs[3].shape[1])  # tokens × hidden of Wg
    return tuple(x.shape)


def _run_eagerly_at_quick_scale(workload_id: str):
    workload = WORKLOADS[workload_id]
    model, make_inputs = workload.make("cpu", workload.quick_scale)
    inputs = make_inputs()
    with torch.no_grad():
        return workload, model, inputs, model(*inputs)


@pytest.mark.parametrize("workload_id", list(WORKLOADS))
def test_workload_runs_eagerly_at_quick_scale(workload_id):
    workload, model, inputs, out = _run_eagerly_at_quick_scale(workload_id)
    assert out.dtype == workload.dtype
    assert tuple(out.shape) == _expected_output_shape(workload_id, inputs)
    assert torch.isfinite(out).all()
    assert not isinstance(model, torch.nn.Module) or not model.training


@pytest.mark.parametrize("workload_id", list(WORKLOADS))
def test_make_inputs_gives_fresh_random_activations(workload_id):
    workload = WORKLOADS[workload_id]
    _, make_inputs = workload.make("cpu", workload.quick_scale)
    first, second = make_inputs(), make_inputs()
    assert not torch.equal(first[0], second[0])
    assert all(a is b for a, b in zip(first[1:], second[1:]))  # weights and tables are kept, as a user would


@pytest.mark.parametrize("workload_id", list(WORKLOADS))
def test_eager_is_within_tolerance_of_its_float64_twin(workload_id):
    _, model, inputs, out = _run_eagerly_at_quick_scale(workload_id)
    with torch.no_grad():
        ref = accuracy.float64_model(model)(*accuracy.to_float64(inputs))
    assert ref.dtype == torch.float64
    assert accuracy.compare(out, out, ref)["within_tolerance"]


@pytest.mark.parametrize("case_id", list(OVERHEAD_CASES))
def test_overhead_case_runs_eagerly(case_id):
    case = OVERHEAD_CASES[case_id]
    fn, make_input_sets = case.make("cpu", MODES["eager"].disable)
    input_sets = make_input_sets()
    assert len({tuple(args[0].shape) for args in input_sets}) == case.cache_entries
    assert all(len(args) == case.n_inputs for args in input_sets)
    assert torch.isfinite(fn(*input_sets[0])).all()


def test_scaled_shape_carries_into_the_next_dimension_and_keeps_the_last():
    assert scaled_shape((8, 1024, 4096), 1 / 256) == (1, 32, 4096)
    assert scaled_shape((16 * 2**20,), 1 / 256) == (65536,)
    assert scaled_shape((4096, 4096), 1 / 64) == (64, 4096)
    assert scaled_shape((32, 512), 2.0) == (64, 512)


def test_minimal_bytes_moved_reads_inputs_and_parameters_once_and_writes_the_output():
    model, make_inputs = WORKLOADS["W2"].make("cpu", 1 / 1024)
    x = make_inputs()[0]
    assert minimal_bytes_moved(model, (x,), model(x)) == 2 * x.numel() * 4
    mlp, make_mlp_inputs = WORKLOADS["W5"].make("cpu", 1 / 32)
    (x,) = make_mlp_inputs()
    parameters = sum(p.numel() for p in mlp.parameters()) * 4
    assert minimal_bytes_moved(mlp, (x,), mlp(x)) == parameters + 2 * x.numel() * 4


def test_compare_flags_a_wrong_result_and_accepts_eager():
    ref = torch.randn(64, dtype=torch.float64)
    eager = ref.float()
    assert accuracy.compare(eager, eager, ref)["within_tolerance"]
    assert not accuracy.compare(eager * 1.01, eager, ref)["within_tolerance"]
    assert not accuracy.compare(eager[:32], eager, ref)["within_tolerance"]


def test_a_failing_measurement_is_recorded_not_raised(tmp_path):
    spec = {"kind": "measure", "section": "cpu", "case": "W0", "mode": "eager", "device": "cpu", "scale": 1.0,
            "phase": "cold", "effort": dataclasses.asdict(timing.QUICK)}
    result = isolation.run_child(spec, tmp_path / "cache", timeout_s=120)
    assert result["status"] == "failed"
    assert "W0" in result["error"]


def test_a_measurement_past_its_timeout_is_recorded(tmp_path):
    spec = {"kind": "measure", "section": "cpu", "case": "W1", "mode": "eager", "device": "cpu", "scale": 1.0,
            "phase": "cold", "effort": dataclasses.asdict(timing.QUICK)}
    result = isolation.run_child(spec, tmp_path / "cache", timeout_s=0.2)
    assert result["status"] == "timeout"


def _reject_nan(constant):
    raise ValueError(f"non-standard JSON constant {constant}")


def test_quick_run_reports_every_requested_row(tmp_path):
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--out", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (json_path,), (md_path,) = list(tmp_path.glob("*.json")), list(tmp_path.glob("*.md"))
    results = json.loads(json_path.read_text(), parse_constant=_reject_nan)
    markdown = md_path.read_text()

    requested = plan.make_plan(plan.QUICK_SECTIONS, plan.QUICK_WORKLOADS, plan.QUICK_OVERHEAD_CASES,
                               plan.CPU_MODES, "cpu", None)
    rows = {(r["section"], r["case"], r["mode"]): r for r in results["rows"]}
    assert set(rows) == {job.key for job in requested}
    for (section, case, mode), row in rows.items():
        assert f"| {case} | {mode} |" in markdown
        if row["cold"]["status"] != "ok":
            assert row["cold"]["error"], f"{section} {case} {mode} failed without saying why"
        if mode == "eager":
            assert row["cold"]["status"] == "ok", row["cold"].get("error")
            assert row["derived"]["us_per_call"] > 0
            assert row["cold"]["accuracy"]["within_tolerance"]
    assert results["environment"]["torch"] == torch.__version__
    assert done.stdout.strip() == markdown.strip()
