"""Where cuBLASLt planning time goes: milliseconds to build fastcomp's MatmulPlan (descriptors + the heuristic
query) for a sequence of products in one fresh process, so that the first query's cost can be told apart from
each new kind of product's and from a repeat of the same one. Run on a GPU machine:

    python scripts/cublaslt_plan_time.py [--torch-first] [--workspace-mib 32]

--torch-first runs W5's products through torch (eager F.linear) before planning, as the benchmark's eager
warm-up does, to see whether torch's own cuBLASLt use warms what fastcomp's query pays for.
"""
import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))


def linear(m, n, k, dtype="f32", epilogue="bias", **extra):
    """x [m, k] @ w.t() with w [n, k], both contiguous: F.linear's product."""
    return dict(m=m, n=n, k=k, dtype=dtype, a_row_stride=k, a_col_stride=1, b_row_stride=1, b_col_stride=k,
                d_row_stride=n, epilogue=epilogue, **extra)


PRODUCTS = [
    ("W5 fc1 f32 32x1024x512 bias", linear(32, 1024, 512)),
    ("W5 fc1 again (same desc)", linear(32, 1024, 512)),
    ("W5 fc2 f32 32x512x1024 bias", linear(32, 512, 1024)),
    ("f32 32x1024x512 no epilogue", linear(32, 1024, 512, epilogue="none")),
    ("f32 1024x2048x512 bias (W7 ff1)", linear(1024, 2048, 512)),
    ("f32 32x1024x512 bias, tf32 allowed", linear(32, 1024, 512, allow_tf32=True)),
    ("f16 32x1024x512 bias", linear(32, 1024, 512, dtype="f16")),
    ("f16 16384x512x512 bias (W4)", linear(16384, 512, 512, dtype="f16")),
    ("bf16 2048x2816x1024 none (W9)", linear(2048, 2816, 1024, dtype="bf16", epilogue="none")),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch-first", action="store_true")
    parser.add_argument("--workspace-mib", type=int, default=32)
    args = parser.parse_args()
    os.environ.setdefault("FASTCOMP_MATMUL_TUNING", "0")
    import torch

    from fastcomp import _C

    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    if args.torch_first:
        x = torch.randn(32, 512, device="cuda")
        w1, b1 = torch.randn(1024, 512, device="cuda"), torch.randn(1024, device="cuda")
        w2, b2 = torch.randn(512, 1024, device="cuda"), torch.randn(512, device="cuda")
        start = time.perf_counter()
        torch.nn.functional.linear(torch.nn.functional.gelu(torch.nn.functional.linear(x, w1, b1)), w2, b2)
        torch.cuda.synchronize()
        print(f"torch's W5 first call: {(time.perf_counter() - start) * 1e3:.1f} ms")
    start = time.perf_counter()
    print(f"cuBLASLt {_C._testing.cublaslt_version()} loaded in {(time.perf_counter() - start) * 1e3:.1f} ms")
    plans = []
    for name, desc in PRODUCTS:
        start = time.perf_counter()
        plans.append(_C._testing.MatmulPlan(0, args.workspace_mib << 20, **desc))
        print(f"{(time.perf_counter() - start) * 1e3:8.1f} ms  {name}", flush=True)


if __name__ == "__main__":
    main()
