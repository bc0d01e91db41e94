"""Worker processes: each runs programs through tests/fuzz/harness.py and answers over a pipe, so a crash
(SIGSEGV, SIGABRT), a hang or a memory blowup costs a restart, not the fuzzer.

Parent side: `Worker.run(job)` returns an outcome {"failure": dict or None, "stats": [...], "seconds": float}.
Worker side: `python -m tests.fuzz.runner` reads one JSON job a line on stdin, writes progress lines and a result.
Each worker process gets a fresh FASTCOMP_CACHE_DIR (automatic-dynamic decisions a previous run left on disk hide
bugs), and each program variant is compiled from a file name of its own, so decisions never carry over between
programs either.
"""
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback

from tests.helpers import pythonpath_with_this_fastcomp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def job_for(program, tag):
    """The JSON job that runs every variant of `program` (a tests.fuzz.program.Program)."""
    return {"tag": tag, "source": program.source(),
            "variants": [{"name": n, "dynamic": d, "steps": s} for n, d, s in program.variants()]}


class Worker:
    """One worker process, restarted after a crash, a hang, a memory blowup or `max_jobs` jobs."""

    def __init__(self, timeout=60.0, memory_limit_mb=4096, max_jobs=200, log_dir=None):
        self.timeout, self.memory_limit_mb, self.max_jobs = timeout, memory_limit_mb, max_jobs
        self.log_dir = log_dir or tempfile.mkdtemp(prefix="fastcomp-fuzz-logs-")
        self.proc = None
        self.jobs = 0
        self.starts = 0

    def start(self):
        self.starts += 1
        cache = tempfile.mkdtemp(prefix="fastcomp-fuzz-cache-")
        env = dict(os.environ, FASTCOMP_CACHE_DIR=cache, PYTHONFAULTHANDLER="1", OMP_NUM_THREADS="1",
                   MKL_NUM_THREADS="1", PYTHONPATH=_python_path())
        self.stderr_path = os.path.join(self.log_dir, f"worker-{os.getpid()}-{id(self)}-{self.starts}.log")
        self.stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.fuzz.runner"], cwd=ROOT, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                                     start_new_session=True)
        self.buffer = b""
        self.jobs = 0
        # Imports take seconds on a busy machine; a job's timeout starts when the worker is ready.
        line = self._readline(time.monotonic() + 300)
        if not line or json.loads(line).get("ready") is not True:
            tail = self.stderr_tail()
            self.kill()
            raise RuntimeError(f"fuzz worker did not start: {line!r}\n{tail}")

    def kill(self):
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self._close()

    def _close(self):
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        self.stderr.close()
        self.proc = None

    def stop(self):
        """Ends the process normally. Returns its exit status (a crash at exit is a failure too)."""
        if self.proc is None:
            return 0
        try:
            self.proc.stdin.close()
            rc = self.proc.wait(timeout=60)
        except (subprocess.TimeoutExpired, OSError):
            self.kill()
            return 0
        self._close()
        return rc

    def _rss_mb(self):
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0

    def stderr_tail(self, lines=25):
        try:
            with open(self.stderr_path, "rb") as f:
                f.seek(max(0, os.path.getsize(self.stderr_path) - 8000))
                return "\n".join(f.read().decode(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def run(self, job, exit_check=False):
        """Runs one job. With `exit_check` the process ends after it, and a crash at exit is the job's failure."""
        if self.proc is None:
            self.start()
        started = time.monotonic()
        progress = "start"
        try:
            self.proc.stdin.write((json.dumps(job) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            pass
        deadline = started + self.timeout
        while True:
            line = self._readline(min(deadline, time.monotonic() + 0.25))
            if line is None:  # nothing yet
                if time.monotonic() > deadline:
                    self.kill()
                    return self._lost("hang", f"no answer after {self.timeout:.0f} s", progress, started)
                if self._rss_mb() > self.memory_limit_mb:
                    self.kill()
                    return self._lost("memory", f"over {self.memory_limit_mb} MB resident", progress, started)
                continue
            if line == b"":  # the process is gone
                rc = self.proc.wait()
                tail = self.stderr_tail()
                self._close()
                return self._lost("crash", _status_name(rc), progress, started, tail)
            msg = json.loads(line)
            if "progress" in msg:
                progress = msg["progress"]
                continue
            self.jobs += 1
            outcome = {"failure": None, "stats": msg.get("results", []), "seconds": time.monotonic() - started,
                       "error": msg.get("error")}
            for r in msg.get("results", []):  # the worst failure, else the first warning
                f = r["failure"]
                if f and (outcome["failure"] is None or outcome["failure"]["cls"] == "internal-error warning" and
                          f["cls"] != "internal-error warning"):
                    outcome["failure"] = dict(f, variant=r["variant"])
            if b"device-side assert" in line:  # a CUDA context that asserted fails every later call: a new process
                self.kill()
            elif exit_check or self.jobs >= self.max_jobs:
                rc = self.stop()
                if rc != 0 and outcome["failure"] is None:
                    outcome["exit_crash"] = _status_name(rc)
                    if exit_check:
                        outcome["failure"] = {"cls": "crash", "variant": "exit", "step": "interpreter exit",
                                              "step_index": -1, "detail": f"{_status_name(rc)} at exit", "where": "exit",
                                              "eager": "", "compiled": self.stderr_tail()}
            return outcome

    def _readline(self, until):
        while b"\n" not in self.buffer:
            wait = until - time.monotonic()
            if wait <= 0:
                return None
            ready, _, _ = select.select([self.proc.stdout], [], [], wait)
            if not ready:
                return None
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                return b""
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    def _lost(self, cls, detail, progress, started, tail=""):
        variant, _, step = progress.partition(": ")
        return {"failure": {"cls": cls, "variant": variant, "step": step or progress, "step_index": -1,
                            "detail": detail, "where": "process", "eager": "", "compiled": tail},
                "stats": [], "seconds": time.monotonic() - started}


def _python_path():
    """The worker imports the same fastcomp as this process would (a checkout's python/ or site-packages)."""
    return pythonpath_with_this_fastcomp(ROOT)


def _status_name(rc):
    if rc < 0:
        try:
            return signal.Signals(-rc).name
        except ValueError:
            return f"signal {-rc}"
    return f"exit status {rc}"


def worker_main():
    # The protocol owns the original stdout; anything a program or fastcomp prints goes to stderr instead.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.path.insert(0, ROOT)
    import torch

    torch.set_num_threads(1)
    from tests.fuzz import harness

    proto.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        job = json.loads(line)
        results = []
        try:
            for v in job["variants"]:
                def progress(step, name=v["name"]):
                    proto.write(json.dumps({"progress": f"{name}: {step}"}) + "\n")

                r = harness.run_variant(job["source"], f"{job['tag']}_{v['name']}.py", v["dynamic"], v["steps"], progress)
                r["variant"] = v["name"]
                results.append(r)
                if r["failure"] and r["failure"]["cls"] != "internal-error warning" or \
                        r["stats"].get("device_assert"):  # the CUDA context fails every later call
                    break
            proto.write(json.dumps({"results": results}) + "\n")
        except Exception:  # noqa: BLE001 - a harness problem, reported apart from fastcomp's failures
            proto.write(json.dumps({"results": results, "error": traceback.format_exc()}) + "\n")


if __name__ == "__main__":
    worker_main()
