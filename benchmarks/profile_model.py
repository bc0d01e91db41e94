"""Where a library model's GPU time goes, per mode: `python -m benchmarks.profile_model --model gpt2 --modes
torch.compile,fastcomp` prints, for each mode, the wall µs per call, the GPU busy µs per call and the kernels that
take it (torch.profiler with CUDA activity, which sees fastcomp's NVRTC launches and cuBLAS as well as torch's),
grouped by kernel name, then the torch ops that launched kernels (outermost op > the op that launched, e.g. an
extern call's `aten::scaled_dot_product_attention > aten::_efficient_attention_forward`), then the host time of the
outermost torch ops (what a host-bound mode spends in torch rather than in its own launches). Models, inputs and
modes are those of `benchmarks.models`; each mode runs in a fresh process.
A diagnostic for finding what to lower or fuse next, not a measurement to quote: the profiler adds host time.
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time

from benchmarks.models import MODES, compiled, precision, prepare


def child(cfg):
    import torch
    from torch.profiler import ProfilerActivity, profile

    dtype, amp = precision(cfg["dtype"], "cuda")
    model, kwargs = prepare(cfg["model"], cfg["batch"], dtype, "cuda")
    mode = cfg["mode"]
    run = compiled(model, mode)
    calls = cfg["calls"]
    with torch.no_grad(), amp:
        run(**kwargs)
        if mode.startswith("fastcomp"):  # the first call runs through torch while the kernels compile
            import fastcomp

            fastcomp.wait_for_compiles()
        for _ in range(cfg["warmup"]):
            run(**kwargs)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            run(**kwargs)
        torch.cuda.synchronize()
        wall_us = (time.perf_counter() - start) / calls * 1e6
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                run(**kwargs)
            torch.cuda.synchronize()
    kernels = collections.defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        if e.device_type.name != "CUDA":
            continue
        k = kernels[e.name[:110]]
        k[0] += 1
        k[1] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
    launchers = collections.defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        launched = getattr(e, "kernels", None)
        if e.device_type.name != "CPU" or not launched:
            continue
        outer = e
        while outer.cpu_parent is not None:
            outer = outer.cpu_parent
        op = launchers[e.name if outer is e else f"{outer.name} > {e.name}"]
        op[0] += len(launched)
        op[1] += sum(k.duration for k in launched)
    # Host time: the outermost torch ops a call ran (their CPU time, the profiler's own cost included), so that
    # what a mode spends outside torch (its own launches, guards, Python) is the wall time less their sum.
    host = collections.defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        if e.device_type.name == "CPU" and e.cpu_parent is None:
            h = host[e.name[:110]]
            h[0] += 1
            h[1] += e.cpu_time_total
    busy = sum(v[1] for v in kernels.values()) / calls
    top = sorted(kernels.items(), key=lambda kv: -kv[1][1])[: cfg["top"]]
    top_ops = sorted(launchers.items(), key=lambda kv: -kv[1][1])[: cfg["top"]]
    top_host = sorted(host.items(), key=lambda kv: -kv[1][1])[: cfg["top"]]
    return {"wall_us": wall_us, "gpu_busy_us": busy, "launches_per_call": sum(v[0] for v in kernels.values()) / calls,
            "kernels": [(name, n / calls, us / calls) for name, (n, us) in top],
            "ops": [(name, n / calls, us / calls) for name, (n, us) in top_ops],
            "host_us": sum(v[1] for v in host.values()) / calls,
            "host": [(name, n / calls, us / calls) for name, (n, us) in top_host]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--child")
    ap.add_argument("--model", default="gpt2")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--dtype", default="f32")
    ap.add_argument("--modes", default="torch.compile,fastcomp")
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    for mode in args.modes.split(","):
        assert mode in MODES, f"unknown mode {mode!r}; one of {MODES}"
        cache = tempfile.mkdtemp(prefix="profile-model-")
        env = dict(os.environ, FASTCOMP_CACHE_DIR=cache, TORCHINDUCTOR_CACHE_DIR=cache)
        cfg = dict(model=args.model, batch=args.batch, dtype=args.dtype, mode=mode, calls=args.calls,
                   warmup=args.warmup, top=args.top)
        p = subprocess.run([sys.executable, "-m", "benchmarks.profile_model", "--child", json.dumps(cfg)], env=env,
                           capture_output=True, text=True)
        lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
        if p.returncode or not lines:
            print(f"## {args.model} {mode}: failed\n{p.stderr[-2000:]}")
            continue
        r = json.loads(lines[-1])
        print(f"## {args.model} batch {args.batch} {args.dtype} {mode}: {r['wall_us']:.0f} µs/call wall, "
              f"{r['gpu_busy_us']:.0f} µs/call GPU busy, {r['launches_per_call']:.0f} kernels/call")
        print("| kernel | per call | µs/call |\n|---|---|---|")
        for name, n, us in r["kernels"]:
            print(f"| `{name}` | {n:g} | {us:.1f} |")
        print("\n| torch op that launched kernels | kernels per call | µs/call |\n|---|---|---|")
        for name, n, us in r["ops"]:
            print(f"| `{name}` | {n:g} | {us:.1f} |")
        print(f"\n| outermost torch op on the host ({r['host_us']:.0f} µs/call in all) | per call | CPU µs/call |"
              "\n|---|---|---|")
        for name, n, us in r["host"]:
            print(f"| `{name}` | {n:g} | {us:.1f} |")
        print(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
