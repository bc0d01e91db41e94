"""python -m tests.fuzz --seed S --count N --time-budget SECONDS --workers W --out DIR [--device cuda]"""
import argparse
import sys

from tests.fuzz.fuzz import run


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz", description="Differential fuzzing of fastcomp: random "
                                 "programs run eagerly and compiled, every difference minimized into a repro file.")
    ap.add_argument("--seed", type=int, default=0, help="programs are deterministic for (seed, index)")
    ap.add_argument("--count", type=int, default=None, help="programs to run (default: until the time budget)")
    ap.add_argument("--start", type=int, default=0, help="index of the first program")
    ap.add_argument("--time-budget", type=float, default=None, help="seconds, minimizing included")
    ap.add_argument("--workers", type=int, default=1, help="worker processes (each runs one program at a time)")
    ap.add_argument("--out", default="fuzz-out", help="directory for summary.md, summary.json and repros/")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where the programs' tensors live")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds a program may take before it is a hang")
    ap.add_argument("--memory-limit-mb", type=int, default=4096, help="worker resident memory that counts as a blowup")
    ap.add_argument("--minimize-budget", type=float, default=120.0, help="seconds spent minimizing one failure")
    ap.add_argument("--max-minimize", type=int, default=5, help="failures minimized per signature (the rest are counted)")
    ap.add_argument("--only", default=None, help="comma-separated program indices to run (e.g. an earlier run's "
                    "failures, to minimize them with this code)")
    ap.add_argument("--no-verify", action="store_true", help="do not rerun each repro file in a fresh process")
    args = ap.parse_args(argv)
    if args.count is None and args.time_budget is None and args.only is None:
        ap.error("give --count, --time-budget or --only")
    report = run(seed=args.seed, count=args.count, time_budget=args.time_budget, workers=args.workers, out=args.out,
                 device=args.device, timeout=args.timeout, memory_limit_mb=args.memory_limit_mb,
                 minimize_budget=args.minimize_budget, max_minimize=args.max_minimize, start=args.start,
                 verify=not args.no_verify, only=[int(i) for i in args.only.split(",")] if args.only else None,
                 argv=["python -m tests.fuzz", *(argv if argv is not None else sys.argv[1:])])
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
