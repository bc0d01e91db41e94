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
EXIT_GRACE_S = 0.2  # how long a child that wrote its result may take to exit before it is ended
POLL_S = 0.02


def child_environment(cache_dir: Path, threads: int | None) -> dict:
    env = dict(os.environ)
    env.update({name: str(cache_dir / sub) for name, sub in CACHE_VARIABLES.items()})
    # The folders exist, as on a user's machine: a compiler may behave differently for a missing one (NVRTC 12.9+
    # opens its own cache, ~200 ms on an H200 host, only when the folder exists).
    for sub in CACHE_VARIABLES.values():
        (cache_dir / sub).mkdir(parents=True, exist_ok=True)
    if threads:  # processes running side by side must not oversubscribe the cores (OpenMP spins)
        env["OMP_NUM_THREADS"] = str(threads)
    # The harness itself, and a developer build of fastcomp (scripts/dev-build.sh) when there is one.
    paths = [str(REPO)]
    if any((REPO / "python" / "fastcomp").glob("_C*.so")):
        paths.append(str(REPO / "python"))
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def run_child(spec: dict, cache_dir: Path, timeout_s: float, threads: int | None = None) -> dict:
    """The child's result dict, or a `timeout` / `crashed` result; both carry the end of its output.

    A child whose result is written has measured everything; what it does afterwards is interpreter shutdown
    (about a second even for eager torch on a 2-core CPU, more with compile workers). After EXIT_GRACE_S the
    harness ends it instead of waiting, and records how long the wait was (`exit_wait_s`, `exit_cut`). Its caches are complete
    by then: every compiler writes them before the first call returns, long before the result.
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="result-") as scratch:
        result_path = Path(scratch) / "result.json"
        output_path = Path(scratch) / "output.txt"
        start = time.perf_counter()
        with open(output_path, "w") as output_file:  # a file, not a pipe: nobody has to drain it while polling
            child = subprocess.Popen([sys.executable, "-m", "benchmarks.child", json.dumps(spec), str(result_path)],
                                     cwd=REPO, env=child_environment(cache_dir, threads), stdout=output_file,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        timed_out, exit_cut, result_seen = False, False, None
        while child.poll() is None:
            now = time.perf_counter()
            if result_seen is None and result_path.exists():
                result_seen = now
            if result_seen is not None and now - result_seen > EXIT_GRACE_S:
                exit_cut = True
            elif now - start > timeout_s:
                timed_out = True
            else:
                time.sleep(POLL_S)
                continue
            os.killpg(child.pid, signal.SIGKILL)  # the child's own group: it and any compile workers it started
            child.wait()
            break
        else:
            _end_group(child.pid)  # compile workers that outlived a child which exited by itself
        end = time.perf_counter()
        if result_path.exists():  # written last and atomically: complete even if a helper outlived the timeout
            result = json.loads(result_path.read_text())
        elif timed_out:
            result = {"status": "timeout", "error": f"no result within the {timeout_s:g} s timeout"}
        else:
            reason = (f"killed by signal {-child.returncode}" if child.returncode < 0
                      else f"exit status {child.returncode}")
            result = {"status": "crashed", "error": f"the process ended without a result ({reason})"}
        output = output_path.read_text(errors="replace")
        result["process"] = {"returncode": child.returncode, "wall_s": end - start,
                             "exit_wait_s": end - result_seen if result_seen is not None else None,
                             "exit_cut": exit_cut, "output_tail": output[-OUTPUT_TAIL_CHARS:]}
    return result


def _end_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
