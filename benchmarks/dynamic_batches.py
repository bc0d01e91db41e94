"""Dynamic shapes: W5 and W7 called with 50 different batch sizes, fastcomp against torch.compile (both with
their default `dynamic=None`, each in a fresh process with empty compiler caches).

Per (workload, mode) one process measures:
- `total_s`: wall time of `compile()` and the 50 calls (one per batch size, each synchronized), including every
  compile they trigger and, for fastcomp, the kernels still compiling in the background at the end;
- `compiles`: frames the compiler compiled on the way (Dynamo's frame count; fastcomp's CompileCounter);
- `dynamic_us` / `static_us`: steady-state µs/call at one batch size, through the entry the 50 calls left (the
  dynamic one) and through a fresh static compile (`dynamic=False`) of the same model, and their ratio.

    python -m benchmarks.dynamic_batches                       # GPU: full sizes
    python -m benchmarks.dynamic_batches --quick --device cpu  # smoke run (small sizes, few repeats)

Target (issue 7): fastcomp's total at least 10× below torch.compile's, and dynamic µs/call within 15% of static.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

N_SIZES = 50
STEADY_BATCH = 24  # the batch size of the steady-state measurement (not the first size, so the dynamic entry runs)
WORKLOADS = ("W5", "W7")
MODES = ("tc", "fc")


def steady_batch(n: int) -> int:
    return min(STEADY_BATCH, n)


def batch_sizes(n: int = N_SIZES, seed: int = 0) -> list[int]:
    """1..n in a fixed shuffled order (1 and the primes included), the steady-state size last."""
    sizes = list(range(1, n + 1))
    random.Random(seed).shuffle(sizes)
    sizes.remove(steady_batch(n))
    return sizes + [steady_batch(n)]


def _frames_compiled(mode_name: str):
    """A callable returning how many frames the mode's compiler has compiled so far in this process."""
    if mode_name.startswith("fc"):
        from fastcomp.testing import CompileCounter
        counter = CompileCounter().__enter__()
        return lambda: counter.frame_count
    import torch._dynamo.utils as dynamo_utils
    return lambda: dynamo_utils.counters["stats"]["unique_graphs"]


def measure(spec: dict) -> dict:
    """Child side (benchmarks.child, kind "dynamic_batches")."""
    import torch

    from benchmarks import timing
    from benchmarks.modes import MODES as ALL_MODES
    from benchmarks.workloads import WORKLOADS as ALL_WORKLOADS
    device = torch.device(spec["device"])
    mode = ALL_MODES[spec["mode"]]
    effort = timing.Effort(**spec["effort"])
    sync = timing.synchronizer(device)
    model, make_inputs = ALL_WORKLOADS[spec["workload"]].make(device, spec["scale"])
    template = make_inputs()[0]  # W5 and W7 take one input whose dimension 0 is the batch

    def inputs(batch: int) -> tuple:
        return (torch.randn((batch,) + tuple(template.shape[1:]), dtype=template.dtype, device=device),)

    sizes = batch_sizes(spec.get("n_sizes", N_SIZES))
    __import__(mode.compiler_module)
    frames = _frames_compiled(mode.name)
    with torch.no_grad():
        start = time.perf_counter()
        compiled = mode.compile(model)
        for b in sizes:
            compiled(*inputs(b))
            sync()
        if mode.wait_ready:
            mode.wait_ready()
        total_s = time.perf_counter() - start
        compiles = frames()
        steady_sets = [inputs(steady_batch(len(sizes))) for _ in range(3)]
        dynamic = timing.microseconds_per_call(compiled, steady_sets, sync, effort)
        mode.reset()
        static_fn = mode.compile(model, dynamic=False)
        timing.warm_up(static_fn, steady_sets, sync, effort)
        if mode.wait_ready:
            mode.wait_ready()
        timing.warm_up(static_fn, steady_sets, sync, effort)
        static = timing.microseconds_per_call(static_fn, steady_sets, sync, effort)
    return {"status": "ok", "workload": spec["workload"], "mode": spec["mode"], "sizes": sizes,
            "total_s": total_s, "compiles": compiles, "dynamic_us": dynamic["us_per_call"],
            "static_us": static["us_per_call"], "dynamic_over_static": dynamic["us_per_call"] / static["us_per_call"]}


def report(rows: list[dict], device: str, env: dict) -> str:
    n = len(rows[0].get("sizes", [])) if rows else 0
    commit = env.get("commit") or "?"
    lines = [f"# Dynamic batch sizes ({n} sizes, {device})", "",
             f"{env.get('device_name')} (driver {env.get('driver')}), torch {env.get('torch')}, CUDA {env.get('cuda')}, "
             f"Python {env.get('python')}, fastcomp commit {commit[:12]}{' (uncommitted changes)' if env.get('dirty') else ''}",
             "",
             "| workload | mode | total s (compiles + all calls) | frames compiled | dynamic µs/call | static µs/call "
             "| dynamic / static |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("status") != "ok":
            lines.append(f"| {r.get('workload')} | {r.get('mode')} | {r.get('status')}: {r.get('error', '')[:80]} "
                         "| | | | |")
            continue
        lines.append(f"| {r['workload']} | {r['mode']} | {r['total_s']:.2f} | {r['compiles']} | {r['dynamic_us']:.1f} "
                     f"| {r['static_us']:.1f} | {r['dynamic_over_static']:.2f} |")
    lines.append("")
    for w in sorted({r["workload"] for r in rows}):
        by_mode = {r["mode"]: r for r in rows if r["workload"] == w and r.get("status") == "ok"}
        if "tc" in by_mode and "fc" in by_mode:
            ratio = by_mode["tc"]["total_s"] / by_mode["fc"]["total_s"]
            verdict = "meets" if ratio >= 10 else "misses"
            lines.append(f"- {w}: torch.compile's total is {ratio:.1f}× fastcomp's ({verdict} the 10× target); "
                         f"fastcomp's dynamic µs/call is {by_mode['fc']['dynamic_over_static']:.2f}× its static one "
                         f"({'meets' if by_mode['fc']['dynamic_over_static'] <= 1.15 else 'misses'} the 15% target)")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from benchmarks import timing
    from benchmarks.isolation import run_child
    from benchmarks.workloads import WORKLOADS as ALL_WORKLOADS
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default=None, help="cuda when available, else cpu")
    parser.add_argument("--quick", action="store_true", help="small sizes, few repeats: a smoke run, not a measurement")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--sizes", type=int, default=N_SIZES, help="how many batch sizes (1..N)")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--out", default=None, help="folder for dynamic_batches.{md,json} (default: print only)")
    args = parser.parse_args(argv)
    if args.device is None:
        import torch
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    effort = timing.QUICK if args.quick else timing.FULL
    rows = []
    for w in args.workloads.split(","):
        scale = ALL_WORKLOADS[w].quick_scale if (args.quick or args.device == "cpu") else 1.0
        for m in args.modes.split(","):
            spec = {"kind": "dynamic_batches", "workload": w, "mode": m, "device": args.device, "scale": scale,
                    "n_sizes": args.sizes, "effort": effort.__dict__}
            with tempfile.TemporaryDirectory(prefix="dynamic-batches-") as cache:
                result = run_child(spec, Path(cache), args.timeout)
            result.setdefault("workload", w)
            result.setdefault("mode", m)
            rows.append(result)
            print(json.dumps({k: v for k, v in result.items() if k not in ("process", "sizes")}), flush=True)
    import torch
    from benchmarks import environment
    env = {**environment.describe(torch.device(args.device)), **environment.git_commit(Path(__file__).resolve().parents[1])}
    text = report(rows, args.device, env)
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "dynamic_batches.md").write_text(text)
        (out / "dynamic_batches.json").write_text(json.dumps(rows, indent=1))
        (out / "dynamic_batches_environment.json").write_text(json.dumps(env, indent=1))
    return 0 if all(r.get("status") == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
