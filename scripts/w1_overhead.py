"""Per-call time of W1 (x + 1 on 8 floats) on CUDA: eager, fastcomp with background compile on and off, and
fastcomp mode="reduce-overhead" (CUDA graph replay).
A quick check of the steady-state call path: python scripts/w1_overhead.py"""
import time

import torch

import fastcomp


def per_call_us(fn, x, n=20000):
    for _ in range(2000):
        fn(x)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            fn(x)
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / n * 1e6)
    return best


def f(x):
    return x + 1


x = torch.randn(8, device="cuda")
with torch.no_grad():
    print(f"eager {per_call_us(f, x):.2f} µs")
    for background in (False, True):
        fastcomp.reset()
        with fastcomp.config.patch(background_compile=background):
            compiled = fastcomp.compile(f)
            compiled(x)
            fastcomp.wait_for_compiles()
            print(f"fastcomp background_compile={background}: {per_call_us(compiled, x):.2f} µs, "
                  f"{fastcomp.explain(f)(x).backends}")
    fastcomp.reset()
    compiled = fastcomp.compile(f, mode="reduce-overhead")
    compiled(x)
    fastcomp.wait_for_compiles()
    print(f"fastcomp mode=reduce-overhead: {per_call_us(compiled, x):.2f} µs")
    tc = torch.compile(f, mode="reduce-overhead")
    print(f"torch.compile mode=reduce-overhead: {per_call_us(tc, x):.2f} µs")
