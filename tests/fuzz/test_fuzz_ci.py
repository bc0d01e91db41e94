"""The differential fuzzer in CI: a fixed seed for a bounded time. Any failure fails the test with its repro files.

FASTCOMP_FUZZ_SECONDS (default 150; 0 skips), FASTCOMP_FUZZ_SEED (default 0), FASTCOMP_FUZZ_OUT (default: a
pytest temporary directory) and FASTCOMP_FUZZ_DEVICE (cpu or cuda) change the run; a longer one is
`python -m tests.fuzz --seed S --time-budget SECONDS --out DIR`.
"""
import os

import pytest

from tests.fuzz.fuzz import run


def test_fuzz_fixed_seed(tmp_path):
    seconds = float(os.environ.get("FASTCOMP_FUZZ_SECONDS", "150"))
    if seconds <= 0:
        pytest.skip("FASTCOMP_FUZZ_SECONDS=0")
    out = os.environ.get("FASTCOMP_FUZZ_OUT") or str(tmp_path / "fuzz")
    report = run(seed=int(os.environ.get("FASTCOMP_FUZZ_SEED", "0")), time_budget=seconds, workers=1, out=out,
                 device=os.environ.get("FASTCOMP_FUZZ_DEVICE", "cpu"), minimize_budget=min(60.0, seconds / 4),
                 verify=False, log=lambda *_: None)
    assert report.programs > 0
    assert not report.harness_errors, f"the fuzzer's own harness failed: {report.harness_errors[0]}"
    if report.failures:
        lines = [f"{len(report.failures)} of {report.programs} programs differ from eager "
                 f"({', '.join(f'{c}: {n}' for c, n in report.by_class().items())}); summary: {out}/summary.md"]
        for sig, entries in report.groups().items():
            repros = [e["repro"] for e in entries if e["repro"]]
            lines.append(f"  {len(entries):4d}  {sig}")
            lines += [f"          python {r}" for r in repros]
        pytest.fail("\n".join(lines), pytrace=False)


def test_fuzz_programs_plans_on_the_cpu():
    """The CUDA lowering on fuzz programs (tests/fuzz/plans.py): every plan that runs on the CPU equals the torch
    runner. FASTCOMP_FUZZ_PLANS (default 60 programs of seed 0; 0 skips) sets how many."""
    from tests.backend import plan_on_cpu
    from tests.fuzz import plans

    count = int(os.environ.get("FASTCOMP_FUZZ_PLANS", "60"))
    if count <= 0:
        pytest.skip("FASTCOMP_FUZZ_PLANS=0")
    if plan_on_cpu.cpu_launch.compiler() is None:
        pytest.skip("no host C++ compiler to run the plans' kernels")
    try:
        from fastcomp import _C
        _C._testing.nvrtc_version()
    except Exception as e:  # noqa: BLE001 - rehearsal compiles each plan's CUDA C with NVRTC
        pytest.skip(f"NVRTC is not available: {e}")
    report = plans.run(seed=0, count=count, log=lambda *_: None)
    assert report.plans_run > 0 and not report.errors, report.errors[:3]
    assert not report.mismatches, "\n".join(f"program {i}, step {s!r}: {m}" for i, s, m in report.mismatches)
