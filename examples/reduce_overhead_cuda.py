"""mode="reduce-overhead": each graph on the CUDA backend is captured into a CUDA graph after one warm-up call and
replayed with a single launch, which removes the host's per-kernel launch cost of small, launch-bound models.

    python3 examples/reduce_overhead_cuda.py     # needs a CUDA GPU; on a CPU-only machine it says so and exits

Inputs are read where they were at capture (pass the same tensors, or refill them with copy_()); outputs are
reused by the next replay, never while you still hold them. FASTCOMP_LOGS=cudagraphs logs every capture.
"""
import sys
import time

import torch

import fastcomp


def per_call_us(fn, x, repeats=500):
    fn(x)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        fn(x)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeats * 1e6


def main():
    if not torch.cuda.is_available():
        print("no CUDA device: mode='reduce-overhead' replays CUDA graphs, so there is nothing to show on the CPU "
              "(on CPU tensors it compiles as the default mode)")
        return 0
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.GELU())
                                  for _ in range(6)]).cuda().eval()
    x = torch.randn(4, 128, device="cuda")
    default = fastcomp.compile(model)
    replayed = fastcomp.compile(model, mode="reduce-overhead")
    with torch.no_grad():
        for f in (default, replayed):
            f(x)
            fastcomp.wait_for_compiles()  # kernels compile in the background; the next calls use them
            f(x)  # reduce-overhead: warm-up with the final kernels, then capture
            torch.testing.assert_close(f(x), model(x), rtol=1e-4, atol=1e-5)
        print(fastcomp.explain(model, mode="reduce-overhead")(x).backends)
        eager, fast, graph = per_call_us(model, x), per_call_us(default, x), per_call_us(replayed, x)
    print(f"per call: eager {eager:.1f} us, fastcomp {fast:.1f} us, fastcomp reduce-overhead {graph:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
