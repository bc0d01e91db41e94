"""Where a workload's GPU time goes, per mode: the kernels of one call (torch.profiler's CUDA activity, which
also sees kernels of cuBLAS, NVRTC modules and CUDA-graph replays), each with its mean time per call, their sum,
and the µs/call of back-to-back calls for comparison. Run on a GPU machine:

    python scripts/kernel_profile.py W7 W9 --modes fc fc-ro tc-ro

A kernel sum near the µs/call means the workload is GPU-bound: only faster kernels help; a sum well below it
means the host (launches, guards) is the limit; the
CUDA API calls the host makes per call (launches, memsets, event records) are listed too."""
import argparse
import os
import sys
import time
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def per_call_us(fn, input_sets, calls=200):
    """µs per call of back-to-back calls that take the input sets in turn (one set: the same tensors every call)."""
    import torch

    for i in range(20):
        fn(*input_sets[i % len(input_sets)])
    torch.cuda.synchronize()
    start = time.perf_counter()
    for i in range(calls):
        fn(*input_sets[i % len(input_sets)])
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def event_tables(fn, args, calls=50):
    """(kernels, host API calls): per name, mean µs per call of fn and how many times a call of fn runs it."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn(*args)
        torch.cuda.synchronize()
    tables = []
    for on_device in (True, False):
        totals, counts = defaultdict(float), defaultdict(int)
        for event in prof.events():
            if (event.device_type == torch.autograd.DeviceType.CUDA) != on_device:
                continue
            # Host side: the CUDA runtime/driver calls CUPTI records (cudaLaunchKernel, cuLaunchKernel, ...).
            if not on_device and not event.name.startswith(("cu", "cuda")):
                continue
            totals[event.name] += event.device_time if on_device else event.cpu_time
            counts[event.name] += 1
        tables.append(sorted(((name, us / calls, counts[name] / calls) for name, us in totals.items()),
                             key=lambda r: -r[1]))
    return tables


def compiled_workloads(wid, mode_names, input_sets=1):
    """(mode name, mode, compiled function, input sets) for workload `wid` at full size on the GPU in each mode,
    each past its first call (on the first set) with its kernels ready; call under torch.no_grad(), then
    mode.reset(). The input sets are `input_sets` argument tuples with fresh activations, as the benchmarks rotate
    through."""
    sys.path.insert(0, ROOT)
    from benchmarks.modes import MODES
    from benchmarks.workloads import WORKLOADS

    model, make_inputs = WORKLOADS[wid].make("cuda", 1.0)
    sets = [make_inputs() for _ in range(input_sets)]
    for name in mode_names:
        mode = MODES[name]
        fn = mode.compile(model)
        fn(*sets[0])
        mode.wait_ready()
        yield name, mode, fn, sets


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="+")
    parser.add_argument("--modes", nargs="+", default=["fc", "fc-ro", "tc-ro"])
    parser.add_argument("--input-sets", type=int, default=4,
                        help="also time calls that rotate through this many fresh inputs, as the benchmarks do")
    args = parser.parse_args()
    import torch

    for wid in args.workloads:
        with torch.no_grad():
            for name, mode, fn, sets in compiled_workloads(wid, args.modes, args.input_sets):
                inputs = sets[0]
                us, rotating_us = per_call_us(fn, [inputs]), per_call_us(fn, sets)
                kernels, host = event_tables(fn, inputs)
                print(f"\n{wid} {name}: {us:.1f} µs/call ({rotating_us:.1f} taking {args.input_sets} input sets in "
                      f"turn), kernels {sum(r[1] for r in kernels):.1f} µs/call, CUDA API calls on the host "
                      f"{sum(r[1] for r in host):.1f} µs/call")
                for kernel, t, n in kernels:
                    print(f"  {t:8.2f} µs  x{n:g}  {kernel[:110]}")
                for call, t, n in host[:8]:
                    print(f"  host {t:8.2f} µs  x{n:g}  {call}")
                mode.reset()


if __name__ == "__main__":
    main()
