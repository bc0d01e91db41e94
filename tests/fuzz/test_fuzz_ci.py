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
