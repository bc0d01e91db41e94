"""`python -m benchmarks`: measures each planned (section, case, mode) in its own processes and reports.

Each row gets a cold process (empty compiler caches) and, for compilers with a disk cache, a warm process
reusing them. A progress line per row goes to stderr; the JSON and markdown files are rewritten after every
row, so a run cut short still leaves its numbers; the chart is drawn at the end and the markdown printed.

`--part K/N` measures one slice of the plan (files `..._partKofN.*`; `python -m benchmarks.merge` joins the
parts), and `--budget-s S` starts no row that would not finish within S seconds of the start (each process's
timeout is also cut to what is left), so a command under a hard time limit ends with complete files.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from benchmarks import environment, isolation, plan, report_chart, report_markdown, summary, timing
from benchmarks.modes import MODES
from benchmarks.overhead_cases import OVERHEAD_CASES
from benchmarks.workloads import WORKLOADS

DEFAULT_OUT = isolation.REPO / "benchmarks" / "results"
DEFAULT_TIMEOUT_S, QUICK_TIMEOUT_S = 600.0, 120.0


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="CPU smoke run for CI: W1,W5 and two overhead cases, modes eager,tc-eager,fc, tiny "
                             "sizes, few repeats, two processes at once")
    parser.add_argument("--sections", help=f"comma-separated, from {','.join(plan.SECTIONS)} (default: "
                                           "workloads,overhead on a GPU, cpu,overhead otherwise)")
    parser.add_argument("--workloads", help="comma-separated ids, e.g. W1,W5 (default: all)")
    parser.add_argument("--overhead-cases", help=f"comma-separated, from {','.join(OVERHEAD_CASES)}")
    parser.add_argument("--modes", help=f"comma-separated, from {','.join(MODES)} (default: eager,tc,tc-ro,fc,fc-ro on "
                                        "a GPU, eager,tc-eager,fc on the CPU)")
    parser.add_argument("--warm-modes", help="comma-separated: measure warm starts only for these modes (default: "
                                             "every mode with a disk cache); e.g. fc,fc-ro leaves out "
                                             "torch.compile's 10-15 s warm starts")
    parser.add_argument("--device", help="cuda, cuda:1, cpu (default: cuda when available; cpu with --quick)")
    parser.add_argument("--scale", type=float, help="size factor for W2–W9 (default: 1 on a GPU, each "
                                                    "workload's quick scale on the CPU)")
    parser.add_argument("--repeats", type=int, help="timed loops per row; the median is reported")
    parser.add_argument("--timeout", type=float, help="seconds per process (default 600; 120 with --quick)")
    parser.add_argument("--jobs", type=int, help="processes at once (default 1; 2 with --quick); more than one "
                                                 "distorts timings")
    parser.add_argument("--threads", type=int, help="OMP_NUM_THREADS of every measurement process (default: "
                                                    "torch's own choice; cores / jobs with --jobs above 1)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    parser.add_argument("--part", help="K/N: measure only the K-th of N slices of the plan (cut between cases, "
                                       "the longest part as short as the estimates allow); merge the parts with "
                                       "python -m benchmarks.merge")
    parser.add_argument("--budget-s", type=float, help="start no row that would end later than this many seconds "
                                                       "after the start; rows left out are listed in the reports")
    parser.add_argument("--redo-skipped", type=Path, nargs="+", metavar="JSON",
                        help="measure only the rows that these earlier runs left out for their --budget-s (files "
                             "`..._redo.*`; merge them with the earlier files)")
    parser.add_argument("--note", action="append", default=[], help="a line for the report's notes (repeatable)")
    return parser.parse_args(argv)


def _names(text: str | None, default) -> list[str] | None:
    return [n.strip() for n in text.split(",") if n.strip()] if text else (list(default) if default else None)


def _finite_json(value):
    """JSON without NaN/Infinity (which strict parsers reject): non-finite floats become strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_json(v) for v in value]
    return value


def output_slug(device: str, device_name: str) -> str:
    """'nvidia-h200' for a GPU; 'cpu-<model>' for a CPU run, so CPU files are recognisable by name."""
    slug = environment.device_slug(device_name)
    return slug if device.startswith("cuda") or slug.startswith("cpu") else f"cpu-{slug}"


def output_stem(out: Path, date: str, slug: str, suffix: str = "") -> Path:
    """out/<date>_<slug><suffix>, with _2, _3 ... added when such a JSON file exists already."""
    stem = out / f"{date}_{slug}{suffix}"
    suffix = 1
    while stem.with_name(stem.name + (f"_{suffix}" if suffix > 1 else "") + ".json").exists():
        suffix += 1
    return stem.with_name(stem.name + (f"_{suffix}" if suffix > 1 else ""))


def _describe_case(job: plan.Job) -> dict:
    row = {"section": job.section, "case": job.case, "mode": job.mode, "device": job.device, "scale": job.scale}
    if job.section == "overhead" or job.case in OVERHEAD_CASES:
        return row | {"description": OVERHEAD_CASES[job.case].description, "memory_bound": False}
    workload = WORKLOADS[job.case]
    return row | {"name": workload.name, "description": workload.description,
                  "dtype": str(workload.dtype).removeprefix("torch."), "memory_bound": workload.memory_bound}


MIN_WARM_START_S = 5.0  # a warm process is not started with less of the budget left


def measure_row(job: plan.Job, effort: timing.Effort, scratch: Path, timeout_s: float,
                threads: int | None, deadline: float = math.inf) -> dict:
    """Cold (and warm) processes of one row; `deadline` (perf_counter) cuts each process's timeout."""
    spec = {"kind": "measure", "section": job.section, "case": job.case, "mode": job.mode, "device": job.device,
            "scale": job.scale, "effort": dataclasses.asdict(effort)}
    cache_dir = scratch / "-".join(job.key)
    left = lambda: deadline - time.perf_counter()  # noqa: E731
    cold_timeout_s = max(1.0, min(timeout_s, left()))
    cold = isolation.run_child(spec | {"phase": "cold"}, cache_dir, cold_timeout_s, threads)
    if cold["status"] == "timeout" and cold_timeout_s < timeout_s:
        cold["budget_cut"] = True  # the budget ended it, not --timeout: --redo-skipped measures it again
    warm = None
    if job.warm and cold["status"] == "ok":
        if left() >= MIN_WARM_START_S:
            warm = isolation.run_child(spec | {"phase": "warm"}, cache_dir, min(timeout_s, left()), threads)
        else:
            warm = {"status": "skipped", "error": f"--budget-s: {max(0.0, left()):.0f} s left for the warm start"}
    row = _describe_case(job) | {"cold": cold, "warm": warm}
    if MODES[job.mode].caveat:
        row["caveat"] = MODES[job.mode].caveat
    return row


def progress_line(index: int, total: int, row: dict) -> str:
    label = f"[{index:>{len(str(total))}}/{total}] {row['section']} {row['case']} {row['mode']}"
    cold = row["cold"]
    if cold["status"] != "ok":
        error = " ".join(str(cold.get("error", "")).split())[:160]
        return f"{label}: {cold['status']} at {cold.get('step', 'process')}: {error}"
    d = summary.derive(row, None, None)
    parts = [f"compile {d['cold_compile_ms']:.0f} ms" if d["cold_compile_ms"] is not None else None,
             f"trace {d['trace_ms']:.1f} ms" if d["trace_ms"] is not None else None,
             f"warm {d['warm_compile_ms']:.0f} ms" if d["warm_compile_ms"] is not None else None,
             f"warm ready {d['warm_ready_ms']:.0f} ms" if d["warm_ready_ms"] is not None else None,
             f"{d['us_per_call']:.1f} µs/call" if d["us_per_call"] is not None else None,
             "warm failed" if row["warm"] and row["warm"]["status"] != "ok" else None]
    caveat = f" [{row['caveat']}]" if row.get("caveat") else ""
    return f"{label}: ok, " + ", ".join(p for p in parts if p) + caveat


class Reports:
    """The JSON and markdown files of a run, rewritten as rows arrive, plus the final chart."""

    def __init__(self, results: dict, stem: Path):
        self.results, self.stem, self.lock = results, stem, threading.Lock()
        self.rows_by_index: dict[int, dict] = {}
        stem.parent.mkdir(parents=True, exist_ok=True)

    def write(self) -> str:
        summary.derive_all(self.results)
        markdown = report_markdown.render(self.results)
        self.stem.with_suffix(".json").write_text(json.dumps(_finite_json(self.results), indent=1) + "\n")
        self.stem.with_suffix(".md").write_text(markdown + "\n")
        return markdown

    def add_row(self, index: int, row: dict) -> None:
        with self.lock:
            self.rows_by_index[index] = row
            self.results["rows"] = [self.rows_by_index[i] for i in sorted(self.rows_by_index)]  # plan order
            self.write()


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter()
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    device = args.device or ("cpu" if args.quick or not torch.cuda.is_available() else "cuda")
    sections = _names(args.sections, plan.QUICK_SECTIONS if args.quick else plan.default_sections(device))
    workloads = _names(args.workloads, plan.QUICK_WORKLOADS if args.quick else None)
    overhead_cases = _names(args.overhead_cases, plan.QUICK_OVERHEAD_CASES if args.quick else OVERHEAD_CASES)
    modes = _names(args.modes, plan.CPU_MODES if args.quick else None)
    warm_modes = _names(args.warm_modes, None)
    try:
        plan.check_selection(sections, workloads or (), overhead_cases, modes)
        plan.check_names("warm mode", warm_modes or (), MODES)
        part = plan.parse_part(args.part) if args.part else None
    except ValueError as error:
        print(f"python -m benchmarks: {error}", file=sys.stderr)
        return 2
    jobs = plan.make_plan(sections, workloads, overhead_cases, modes, device, args.scale, quick=args.quick,
                          warm_modes=warm_modes)
    planned = len(jobs)
    if part:
        jobs = plan.select_part(jobs, *part)
    if args.redo_skipped:
        try:
            jobs = [plan.Job(**entry["job"]) for path in args.redo_skipped
                    for entry in json.loads(path.read_text())["meta"].get("skipped", [])]
        except (OSError, ValueError, KeyError, TypeError) as error:
            print(f"python -m benchmarks: --redo-skipped: {error}", file=sys.stderr)
            return 2
        sections = list(dict.fromkeys(job.section for job in jobs))
        if not jobs:
            print("python -m benchmarks: --redo-skipped: those runs skipped no rows", file=sys.stderr)
            return 0
    effort = timing.QUICK if args.quick else timing.FULL
    if args.repeats:
        effort = dataclasses.replace(effort, repeats=args.repeats)
    timeout_s = args.timeout or (QUICK_TIMEOUT_S if args.quick else DEFAULT_TIMEOUT_S)
    n_jobs = args.jobs or (2 if args.quick else 1)
    threads = args.threads or (max(1, (os.cpu_count() or 1) // n_jobs) if n_jobs > 1 else None)
    deadline = started + args.budget_s if args.budget_s else math.inf

    notes = list(args.note)
    if warm_modes is not None:
        notes.append(f"--warm-modes {','.join(warm_modes)}: warm starts were measured for these modes only (— in the "
                     f"warm columns of the others).")
    # Settings that change what fastcomp compiles (fastcomp.config reads them in every measurement process).
    settings = sorted(f"{k}={v}" for k, v in os.environ.items() if k.startswith("FASTCOMP_") and k not in
                      isolation.CACHE_VARIABLES)
    if settings:
        notes.append(f"fastcomp settings from the environment: {', '.join(settings)}.")
    if args.quick:
        notes.append("--quick: tiny sizes and few repeats; a smoke test of the harness, not a measurement.")
    if n_jobs > 1:
        notes.append(f"{n_jobs} processes ran at once ({threads} CPU threads each), so the timings disturb "
                     "each other.")
    elif args.threads:
        notes.append(f"--threads {args.threads}: every measurement process ran with OMP_NUM_THREADS="
                     f"{args.threads}.")
    if args.redo_skipped:
        notes.append(f"Part: the {len(jobs)} rows that {', '.join(p.name for p in args.redo_skipped)} left out "
                     "for their --budget-s.")
    elif part:
        notes.append(f"Part {part[0]} of {part[1]}: {len(jobs)} of the {planned} planned rows; "
                     "`python -m benchmarks.merge` joins the parts into one report.")
    date = datetime.date.today().isoformat()
    results = {
        "schema": 1,
        "meta": {"date": date, "started": datetime.datetime.now().isoformat(timespec="seconds"),
                 "command": " ".join(["python -m benchmarks", *argv]), "device": device, "sections": sections,
                 "effort": dataclasses.asdict(effort), "timeout_s": timeout_s, "jobs": n_jobs,
                 "part": list(part) if part else None, "budget_s": args.budget_s,
                 "git": environment.git_commit(isolation.REPO), "notes": notes,
                 "plan": [list(job.key) for job in jobs], "skipped": []},
        "environment": None, "copy_ceiling": None, "rows": [],
    }

    with tempfile.TemporaryDirectory(prefix="fastcomp-bench-") as scratch:
        scratch = Path(scratch)
        print(f"probing {device} ...", file=sys.stderr)
        probe = isolation.run_child({"kind": "probe", "device": device,
                                     "copy_ceiling": any(job.section == "workloads" for job in jobs),
                                     "effort": dataclasses.asdict(effort)}, scratch / "probe", timeout_s, threads)
        if probe["status"] != "ok":
            notes.append(f"device probe {probe['status']}: {probe.get('error')}")
        results["environment"], results["copy_ceiling"] = probe.get("environment"), probe.get("copy_ceiling")
        device_name = (results["environment"] or {}).get("device_name", device)
        suffix = "_redo" if args.redo_skipped else f"_part{part[0]}of{part[1]}" if part else ""
        reports = Reports(results, output_stem(args.out, date, output_slug(device, device_name), suffix))
        done = iter(range(1, len(jobs) + 1))
        seconds_by_mode: dict[tuple, float] = {}  # longest row per (device, mode) so far: the budget's forecast

        def run_job(index: int) -> None:
            job = jobs[index]
            start = time.perf_counter()
            forecast = seconds_by_mode.get((job.device, job.mode), plan.estimated_seconds(job))
            if deadline - start < forecast:
                with reports.lock:
                    results["meta"]["skipped"].append(
                        {"section": job.section, "case": job.case, "mode": job.mode, "job": dataclasses.asdict(job),
                         "reason": f"--budget-s: {max(0.0, deadline - start):.0f} s left, ~{forecast:.0f} s needed"})
                    print(f"[{next(done)}/{len(jobs)}] {' '.join(job.key)}: skipped, budget spent",
                          file=sys.stderr, flush=True)
                return
            row = measure_row(job, effort, scratch, timeout_s, threads, deadline)
            elapsed = time.perf_counter() - start
            if row["cold"].get("budget_cut"):
                with reports.lock:
                    results["meta"]["skipped"].append(
                        {"section": job.section, "case": job.case, "mode": job.mode, "job": dataclasses.asdict(job),
                         "reason": f"--budget-s: stopped after {elapsed:.0f} s when the budget ran out"})
            reports.add_row(index, row)
            with reports.lock:
                key = (job.device, job.mode)
                seconds_by_mode[key] = max(elapsed, seconds_by_mode.get(key, 0.0))
                line = progress_line(next(done), len(jobs), row)
            print(f"{line}  ({elapsed:.1f} s)", file=sys.stderr, flush=True)

        with ThreadPoolExecutor(max_workers=n_jobs) as pool:
            list(pool.map(run_job, range(len(jobs))))

    status = finish(results, reports)
    if part:
        others = [reports.stem.name.replace(f"_part{part[0]}of{part[1]}", f"_part{k}of{part[1]}")
                  for k in range(1, part[1] + 1)]
        print("when every part is done, merge them with:\n  python -m benchmarks.merge "
              + " ".join(str(reports.stem.parent / f"{name}.json") for name in others), file=sys.stderr)
    return status


def finish(results: dict, reports: Reports) -> int:
    """Chart, final JSON and markdown; prints the markdown."""
    summary.derive_all(results)  # merged results arrive without derived numbers; the chart needs them
    chart_problem = report_chart.write(results, reports.stem.with_suffix(".png"))
    if chart_problem:
        results["meta"]["notes"].append(f"No chart: {chart_problem}.")
    markdown = reports.write()
    print(markdown)
    print(f"wrote {reports.stem}.{{json,md{'' if chart_problem else ',png'}}}", file=sys.stderr)
    return 0
