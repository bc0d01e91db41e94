"""Every script in examples/ runs to completion on this machine (on the CPU here), as a new user would run it:
from the repository root, in a fresh interpreter, with nothing but fastcomp and torch importable."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fastcomp

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.py"))


def test_the_examples_are_the_ones_the_readme_lists():
    readme = (ROOT / "README.md").read_text()
    assert EXAMPLES == ["explain_graph_break.py", "hf_style_model.py", "quickstart.py", "reduce_overhead_cuda.py",
                        "training_step.py"]
    for name in EXAMPLES:
        assert f"examples/{name}" in readme, name


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_runs(name, tmp_path):
    # Only fastcomp's own folder on the path (a developer build's python/ or the installed package), not the
    # repository root: an example must not import the benchmarks package.
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTCOMP_") and k != "PYTHONPATH"}
    env.update(PYTHONPATH=os.path.dirname(os.path.dirname(fastcomp.__file__)), FASTCOMP_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, f"examples/{name}"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Warning" not in out.stderr, out.stderr


def test_ci_runs_the_readme_two_commands_verbatim():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## The two commands", 1)[1].split("\n## ", 1)[0]
    commands = [block.split("\n", 1)[1].strip() for block in section.split("```bash")[1:]]
    commands = [c.split("```", 1)[0].strip() for c in commands]
    assert commands == ["python3 examples/quickstart.py", "python3 -m pytest -q tests"]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    for command in commands:
        assert command in ci, command
