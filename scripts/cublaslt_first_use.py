"""What the first cuBLASLt use costs a process, step by step: loading the library, creating a handle, the first plan (its own
handle and first heuristic query), a second plan, and the first run. With --torch-first, torch runs a matmul before (as a
program whose eager code already multiplied would). Usage on a GPU machine, in a fresh process each:
    python scripts/cublaslt_first_use.py [--torch-first]
"""
import ctypes
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main():
    import torch

    from fastcomp._C import _testing as T
    from tests.runtime.test_cublaslt import WORKSPACE_BYTES, cublaslt_matmul, desc_of, new_output

    a = torch.randn(32, 512, device="cuda")
    w1, w2 = torch.randn(1024, 512, device="cuda").t(), torch.randn(512, 1024, device="cuda").t()
    torch.cuda.synchronize()
    if "--torch-first" in sys.argv:
        t = time.perf_counter()
        (a @ a.t()).sum().item()
        print(f"torch's first matmul: {(time.perf_counter() - t) * 1e3:.1f} ms")
    steps = []

    def step(name, fn):
        t = time.perf_counter()
        out = fn()
        steps.append(f"{name}: {(time.perf_counter() - t) * 1e3:.1f} ms")
        return out

    step("load cuBLASLt", T.cublaslt_version)
    lt = ctypes.CDLL("libcublasLt.so.13")  # the copy just loaded
    handles = [ctypes.c_void_p() for _ in range(2)]
    step("cublasLtCreate (a handle of our own)", lambda: lt.cublasLtCreate(ctypes.byref(handles[0])))
    step("cublasLtCreate again", lambda: lt.cublasLtCreate(ctypes.byref(handles[1])))
    h = new_output(torch, a, w1, a.dtype)
    plan1 = step("first plan (handle, first heuristic)",
                 lambda: T.MatmulPlan(0, WORKSPACE_BYTES, **desc_of(a, w1, h, epilogue="bias")))
    plan2 = step("second plan", lambda: T.MatmulPlan(0, WORKSPACE_BYTES, **desc_of(h, w2, new_output(torch, h, w2, a.dtype))))
    bias = torch.randn(1024, device="cuda")
    step("first run (tuning on)", lambda: (cublaslt_matmul(a, w1, bias=bias, plan=plan1), torch.cuda.synchronize()))
    step("second plan's first run", lambda: (cublaslt_matmul(h, w2, plan=plan2), torch.cuda.synchronize()))
    print("\n".join(steps))


if __name__ == "__main__":
    main()
