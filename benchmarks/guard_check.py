"""What a call's guard check costs on the zoo's library models, with and without the guard memo.

One process, one model at a time: the model compiled with fastcomp (default mode), warmed up, then called
back to back with `fastcomp.config.guard_memo` off and then auto, while fastcomp times every guard check
(`fastcomp._C.guard_check_stats(timed=True)`, two clock reads a check). Between checks the model runs, as in
real use, so the check finds the caches as a call leaves them.

    python -m benchmarks.guard_check --models gpt2,llama,t5 --device cuda --calls 200 --out results.md
"""
from __future__ import annotations

import argparse
import time

import torch

import fastcomp
from benchmarks import models

MODES = ("off", "auto")


def measure(name: str, batch: int, device: str, calls: int) -> dict:
    model, inputs = models.prepare(name, batch, torch.float32, device)
    compiled = fastcomp.compile(model)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    row = {"model": name, "batch": batch}
    with torch.no_grad():
        for _ in range(3):
            compiled(**inputs)
        fastcomp._C.wait_for_compiles()
        for mode in MODES:
            with fastcomp.config.patch(guard_memo=mode):
                for _ in range(3):
                    compiled(**inputs)
                sync()
                before = fastcomp._C.guard_check_stats(timed=True)
                start = time.perf_counter()
                for _ in range(calls):
                    compiled(**inputs)
                sync()
                seconds = time.perf_counter() - start
                after = fastcomp._C.guard_check_stats(timed=False)
            checks = after["checks"] - before["checks"]
            row[f"{mode}_us_per_check"] = (after["check_ns"] - before["check_ns"]) / max(checks, 1) / 1e3
            row[f"{mode}_checks_per_call"] = checks / calls
            row[f"{mode}_us_per_call"] = seconds / calls * 1e6
            row[f"{mode}_memo_passed"] = after["memo_passed"] - before["memo_passed"]
    return row


def markdown(rows: list[dict], device: str) -> str:
    lines = [f"Guard check per call, {device}: µs a check without the memo (off) and with it (auto), and the whole call.",
             "", "| model | batch | checks a call | off: µs a check | auto: µs a check | memo answered | off: µs a call | "
             "auto: µs a call |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['batch']} | {r['auto_checks_per_call']:.0f} | {r['off_us_per_check']:.1f} | "
                     f"{r['auto_us_per_check']:.1f} | {r['auto_memo_passed']} | {r['off_us_per_call']:.0f} | "
                     f"{r['auto_us_per_call']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gpt2,bert,llama,t5,vit")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    rows = []
    for name in args.models.split(","):
        rows.append(measure(name, args.batch, args.device, args.calls))
        fastcomp.reset()
        print(markdown(rows[-1:], args.device).splitlines()[-1], flush=True)
    text = markdown(rows, args.device)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
