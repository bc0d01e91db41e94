"""Compile a small transformer layer (workload W7) with fastcomp, show what was captured, and time it.

    python examples/quickstart.py            # CPU, or CUDA when available
"""
import time

import torch

import fastcomp
from benchmarks.workloads import WORKLOADS


def per_call_us(fn, inputs, repeats=50):
    sync = torch.cuda.synchronize if inputs[0].is_cuda else (lambda: None)
    fn(*inputs)
    sync()
    start = time.perf_counter()
    for _ in range(repeats):
        fn(*inputs)
    sync()
    return (time.perf_counter() - start) / repeats * 1e6


def main():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    w = WORKLOADS["W7"]
    model, make_inputs = w.make(device, 1.0 if device == "cuda" else 0.25)
    inputs = make_inputs()
    with torch.no_grad():
        print(fastcomp.explain(model)(*inputs))
        compiled = fastcomp.compile(model)
        start = time.perf_counter()
        out = compiled(*inputs)
        first_call_ms = (time.perf_counter() - start) * 1e3
        torch.testing.assert_close(out, model(*inputs), rtol=1e-4, atol=1e-5)
        eager, fast = per_call_us(model, inputs), per_call_us(compiled, inputs)
    print(f"\n{w.id} {w.name} on {device}: first call (trace + run) {first_call_ms:.1f} ms; "
          f"per call: eager {eager:.1f} us, fastcomp {fast:.1f} us")


if __name__ == "__main__":
    main()
