"""The fuzzing loop: generate program i of the seed, run it in a worker, minimize what fails, write repros."""
import itertools
import os
import threading
import time

from tests.fuzz.generator import generate
from tests.fuzz.minimize import minimize
from tests.fuzz.report import Report, signature, verify_repro
from tests.fuzz.runner import Worker, job_for


def run(seed=0, count=None, time_budget=None, workers=1, out="fuzz-out", device="cpu", timeout=60.0,
        memory_limit_mb=4096, minimize_budget=120.0, max_minimize=5, start=0, verify=True, log=print, argv=None,
        only=None):
    """Fuzzes until `count` programs ran or `time_budget` seconds passed (minimizing included). Returns the Report.

    Program i is the same for a given seed whatever the worker count; which ones run before the time budget
    ends is not. `only` runs just the programs with those indices (an earlier run's failures, say)."""
    report = Report(out, seed, device, argv)
    deadline = time.monotonic() + time_budget if time_budget else float("inf")
    indices = iter(only) if only is not None else itertools.count(start)
    stop_at = start + count if count is not None and only is None else float("inf")
    lock, gen_lock = threading.Lock(), threading.Lock()
    last_log = [time.monotonic()]
    log_dir = os.path.join(out, "worker-logs")
    os.makedirs(log_dir, exist_ok=True)

    stop = threading.Event()  # Ctrl-C: the current program finishes, its minimizing is cut short

    def remaining():
        return 0.0 if stop.is_set() else deadline - time.monotonic()

    def loop():
        worker = Worker(timeout, memory_limit_mb, log_dir=log_dir)
        helper = {}  # worker kinds used while minimizing
        batch = []  # programs this worker process ran: one of them may crash the process at exit
        tags = itertools.count()
        try:
            while remaining() > 0:
                with lock:
                    i = next(indices, None)
                if i is None or i >= stop_at:
                    break
                with gen_lock:  # generating runs torch ops under its global RNG: one thread at a time
                    try:
                        program = generate(seed, i, device)
                    except Exception as e:  # noqa: BLE001 - a statement that ran once raised when re-run
                        with lock:
                            report.totals["generator_errors"] = report.totals.get("generator_errors", 0) + 1
                        log(f"[fuzz] program {i}: the generator failed ({type(e).__name__}: {e}); skipped")
                        continue
                outcome = worker.run(job_for(program, f"fuzz_{seed}_{i}"))
                batch.append(program)
                with lock:
                    report.add_outcome(program, outcome)
                failure = outcome["failure"]
                if failure is None and outcome.get("exit_crash"):
                    program, failure = _exit_crash(batch, helper, timeout, memory_limit_mb, log_dir, remaining) or (program, None)
                if worker.proc is None:
                    batch = []
                if failure is not None:
                    _handle_failure(program, failure, worker, helper, report, lock, tags, seed, timeout,
                                    memory_limit_mb, log_dir, minimize_budget, max_minimize, remaining, verify, log)
                with lock:
                    if time.monotonic() - last_log[0] > 30:
                        last_log[0] = time.monotonic()
                        log(f"[fuzz] {report.programs} programs, {time.time() - report.started:.0f} s, "
                            f"failures: {report.by_class() or 'none'}")
        finally:
            with lock:
                report.totals["worker_restarts"] += max(0, worker.starts - 1)
            worker.stop()
            for w in helper.values():
                w.stop()

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(workers)]
    for t in threads:
        t.start()
    try:
        while any(t.is_alive() for t in threads):
            threads[0].join(0.5) if threads[0].is_alive() else next(t for t in threads if t.is_alive()).join(0.5)
    except KeyboardInterrupt:
        log("[fuzz] interrupted: finishing the programs in flight")
        stop.set()
        for t in threads:
            t.join()
    finally:
        report.write()
    log(f"[fuzz] done: {report.programs} programs in {time.time() - report.started:.0f} s; "
        f"failures: {report.by_class() or 'none'}; summary: {os.path.join(out, 'summary.md')}")
    return report


def _exit_crash(batch, helper, timeout, memory_limit_mb, log_dir, remaining):
    """A worker crashed at interpreter exit: finds which program of its batch does that on its own."""
    one_shot = helper.setdefault("exit", Worker(timeout, memory_limit_mb, max_jobs=1, log_dir=log_dir))
    for program in reversed(batch):
        if remaining() <= 0:
            return None
        outcome = one_shot.run(job_for(program, f"fuzz_{program.seed}_{program.index}_exit"), exit_check=True)
        if outcome["failure"] is not None:
            return program, outcome["failure"]
    return None


def _handle_failure(program, failure, worker, helper, report, lock, tags, seed, timeout, memory_limit_mb, log_dir,
                    minimize_budget, max_minimize, remaining, verify, log):
    sig = signature(failure)
    with lock:
        wanted = report.worth_minimizing(sig, program, max_minimize)
    if not wanted or remaining() <= 5:
        with lock:
            report.add_failure(program, failure, None)
        return
    if failure.get("variant") == "exit":
        runner = helper.setdefault("exit", Worker(timeout, memory_limit_mb, max_jobs=1, log_dir=log_dir))
    elif failure["cls"] == "hang":
        runner = helper.setdefault("hang", Worker(min(timeout, 30.0), memory_limit_mb, log_dir=log_dir))
    else:
        runner = worker

    def run_one(candidate):
        tag = f"fuzz_{seed}_{program.index}_m{next(tags)}"
        return runner.run(job_for(candidate, tag), exit_check=failure.get("variant") == "exit")["failure"]

    small, small_failure, runs = minimize(program, failure, run_one, min(minimize_budget, max(5.0, remaining())))
    with lock:
        entry = report.add_failure(program, failure, (small, small_failure), runs)
    if verify and entry["repro"]:
        entry["verified"] = verify_repro(entry["repro"], timeout=max(60.0, 2 * timeout))
        with lock:
            report.write()
    log(f"[fuzz] program {program.index}: {sig} -> {entry['repro']} ({runs} runs"
        f"{'' if entry['verified'] is not False else ', NOT reproduced standalone'})")
