"""What one NVRTC program per graph costs against one program per kernel compiled side by side: the data for
deciding issue 4's "every kernel of one graph in one NVRTC program" against its 150 ms cold-start target.

For each workload, the program fastcomp emits (traced on CPU tensors with the CUDA backend in rehearsal, so no GPU
is needed) is compiled to an sm_90 cubin (a) whole, with NVRTC's --split-compile at 1 and at fastcomp's default
thread count, and (b) cut at its kernels into one program each (the shared prelude in every one), all compiled at
once on a thread each. Best of --rounds wall times, ms:

    python scripts/nvrtc_parallel_programs.py [W7 W9 ...] [--rounds 3]

Each kernel alone is also timed, so the table shows the fixed cost every program pays and the slowest kernel,
which bounds (b) from below.
"""
import argparse
import os
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("FASTCOMP_NVRTC_THREADS", "1")  # the options below say the thread count themselves


def program_of(wid):
    import torch

    import fastcomp
    from benchmarks.workloads import WORKLOADS
    from fastcomp import _C
    from fastcomp.testing import CompileCounter

    model, make_inputs = WORKLOADS[wid].make("cpu", 1.0)
    _C.set_rehearse_cuda_backend(True)
    try:
        with torch.no_grad(), CompileCounter() as cc:
            fastcomp.compile(model)(*make_inputs())
    finally:
        _C.set_rehearse_cuda_backend(False)
        fastcomp.reset()
    sources = [r["cuda_source"] for r in cc.records if r.get("cuda_source")]
    return sources[0] if sources else None


def best_ms(compile_once, rounds):
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        compile_once()
        best = min(best, (time.perf_counter() - start) * 1e3)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="*", default=["W2", "W4", "W7", "W9"])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from fastcomp import _C

    threads = _C._testing.nvrtc_threads(0, _C._testing.usable_cores())

    def nvrtc(source, split=1):
        options = [f"--split-compile={split}"] if split > 1 else []
        _C._testing.nvrtc_compile(source, "fastcomp_graph", 9, 0, "cubin", options)

    nvrtc('extern "C" __global__ void warm_up() {}')  # NVRTC's first use in the process
    print(f"NVRTC {'.'.join(map(str, _C._testing.nvrtc_version()))}, {_C._testing.usable_cores()} usable cores, "
          f"fastcomp's --split-compile: {threads}\n")
    print("| workload | kernels | fixed (prelude + empty kernel) | each kernel alone | one program, 1 thread | "
          f"one program, split {threads} | a program per kernel, at once |")
    print("|---|---|---|---|---|---|---|")
    for wid in args.workloads:
        source = program_of(wid)
        if source is None:
            print(f"| {wid} | 0 | | | | | |")
            continue
        parts = re.split(r"\n(?=// k\d+: )", source)
        prelude, kernels = parts[0], parts[1:]
        fixed = best_ms(lambda: nvrtc(prelude + '\nextern "C" __global__ void empty() {}'), args.rounds)
        alone = [best_ms(lambda k=k: nvrtc(prelude + "\n" + k), args.rounds) for k in kernels]
        whole_1 = best_ms(lambda: nvrtc(source), args.rounds)
        whole_n = best_ms(lambda: nvrtc(source, threads), args.rounds)
        with ThreadPoolExecutor(len(kernels)) as pool:
            apart = best_ms(lambda: list(pool.map(lambda k: nvrtc(prelude + "\n" + k), kernels)), args.rounds)
        print(f"| {wid} | {len(kernels)} | {fixed:.0f} | {' / '.join(f'{a:.0f}' for a in alone)} | {whole_1:.0f} | "
              f"{whole_n:.0f} | {apart:.0f} |", flush=True)


if __name__ == "__main__":
    main()
