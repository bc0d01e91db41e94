"""Runs a measurement in a fresh Python process with its own compiler cache directory.

A cold run gets an empty directory for every compiler cache; the warm run of the same (case, mode) is a new
process pointed at the directory the cold run filled. The child runs in its own process group, so a timeout
also ends the compile workers it started.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Every on-disk cache a compile can hit, all pointed into the one directory of a (case, mode).
CACHE_VARIABLES = {
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "TRITON_CACHE_DIR": "triton",
    "FASTCOMP_CACHE_DIR": "fastcomp",
    "CUDA_CACHE_PATH": "cuda",  # the driver's PTX JIT cache
    "XDG_CACHE_HOME": "xdg",
}
OUTPUT_TAIL_CHARS = 2000  # stdout and stderr together


def child_environment(cache_dir: Path, threads: int | None) -> dict:
    env = dict(os.environ)
    env.update({name: str(cache_dir / sub) for name, sub in CACHE_VARIABLES.items()})
    if threads:  # processes running side by side must not oversubscribe the cores (OpenMP spins)
        env["OMP_NUM_THREADS"] = str(threads)
    # The harness itself, and a developer build of fastcomp (scripts/dev-build.sh) when there is one.
    paths = [str(REPO)]
    if any((REPO / "python" / "fastcomp").glob("_C*.so")):
        paths.append(str(REPO / "python"))
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def run_child(spec: dict, cache_dir: Path, timeout_s: float, threads: int | None = None) -> dict:
    """The child's result dict, or a `timeout` / `crashed` result; both carry the end of its output."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="result-") as scratch:
        result_path = Path(scratch) / "result.json"
        start = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-m", "benchmarks.child", json.dumps(spec), str(result_path)],
                                 cwd=REPO, env=child_environment(cache_dir, threads), stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True, errors="replace",
                                 start_new_session=True)
        timed_out = False
        try:
            output, _ = child.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(child.pid, signal.SIGKILL)  # the child's own group: it and any compile workers it started
            output, _ = child.communicate()
        if result_path.exists():  # written last and atomically: complete even if a helper outlived the timeout
            result = json.loads(result_path.read_text())
        elif timed_out:
            result = {"status": "timeout", "error": f"no result within the {timeout_s:g} s timeout"}
        else:
            reason = (f"killed by signal {-child.returncode}" if child.returncode < 0
                      else f"exit status {child.returncode}")
            result = {"status": "crashed", "error": f"the process ended without a result ({reason})"}
        result["process"] = {"returncode": child.returncode, "wall_s": time.perf_counter() - start,
                             "output_tail": output[-OUTPUT_TAIL_CHARS:]}
    return result
