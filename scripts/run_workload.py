"""Runs one workload's compiled function a few times on the GPU, for an outside profiler (ncu, nsys) to watch:

    ncu --kernel-name k0 --launch-skip 3 --launch-count 1 python scripts/run_workload.py W7 --mode fc
"""
import argparse

from kernel_profile import compiled_workloads


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload")
    parser.add_argument("--mode", default="fc")
    parser.add_argument("--calls", type=int, default=10)
    args = parser.parse_args()
    import torch

    with torch.no_grad():
        for _, mode, fn, (inputs,) in compiled_workloads(args.workload, [args.mode]):
            for _ in range(args.calls):
                fn(*inputs)
            torch.cuda.synchronize()
            mode.reset()


if __name__ == "__main__":
    main()
