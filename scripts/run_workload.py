"""Runs one workload's compiled function a few times on the GPU, for an outside profiler (ncu, nsys) to watch:

    ncu --kernel-name k0 --launch-skip 3 --launch-count 1 python scripts/run_workload.py W7 --mode fc
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload")
    parser.add_argument("--mode", default="fc")
    parser.add_argument("--calls", type=int, default=10)
    args = parser.parse_args()
    import torch

    from benchmarks.modes import MODES
    from benchmarks.workloads import WORKLOADS

    model, make_inputs = WORKLOADS[args.workload].make("cuda", 1.0)
    inputs = make_inputs()
    mode = MODES[args.mode]
    with torch.no_grad():
        fn = mode.compile(model)
        fn(*inputs)
        mode.wait_ready()
        for _ in range(args.calls):
            fn(*inputs)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
