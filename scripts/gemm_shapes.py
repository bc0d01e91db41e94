"""One matrix product at a time: torch's F.linear next to fastcomp's compiled F.linear (its cuBLASLt plan) for the
products of a workload, µs per call from CUDA events over back-to-back calls, with fastcomp's tuning decision
(the `compile` log's cuBLASLt line). For finding which GEMM of a GPU-bound workload is slower than torch's.
Run on a GPU machine, in a fresh kernel-cache folder so tuning runs:

    FASTCOMP_CACHE_DIR=$(mktemp -d) python scripts/gemm_shapes.py [--tokens 1024] [M,K,N ...]

Default products: W7's (tokens x 512 -> 1536 QKV, 512 -> 512 output projection, 512 -> 2048 and 2048 -> 512 FF).
"""
import argparse
import logging

W7_PRODUCTS = [(512, 1536), (512, 512), (512, 2048), (2048, 512)]  # (in features, out features), with bias


def per_call_us(fn, calls=200):
    import torch

    for _ in range(20):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(calls):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / calls * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1024, help="rows of x (W7: 16 x 64)")
    parser.add_argument("products", nargs="*", help="K,N pairs (in, out features)")
    args = parser.parse_args()
    products = [tuple(map(int, p.split(","))) for p in args.products] or W7_PRODUCTS

    import torch
    import torch.nn.functional as F

    import fastcomp

    lines = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    logging.getLogger("fastcomp").addHandler(handler)
    fastcomp.set_logs(compile=logging.DEBUG)

    print(f"| x [{args.tokens}, K] @ w.T + b | torch µs | fastcomp µs | fastcomp's cuBLASLt decision |")
    print("|---|---|---|---|")
    with torch.no_grad():
        for k, n in products:
            x = torch.randn(args.tokens, k, device="cuda")
            w, b = torch.randn(n, k, device="cuda"), torch.randn(n, device="cuda")
            compiled = fastcomp.compile(lambda x, w, b: F.linear(x, w, b))
            lines.clear()
            compiled(x, w, b)
            fastcomp.wait_for_compiles()
            torch.testing.assert_close(compiled(x, w, b), F.linear(x, w, b), rtol=1e-4, atol=1e-3)
            torch_us = per_call_us(lambda: F.linear(x, w, b))
            fc_us = per_call_us(lambda: compiled(x, w, b))
            decision = [line.split(": ", 1)[1] for line in lines if line.startswith("cuBLASLt ")]
            print(f"| {k} -> {n} | {torch_us:.1f} | {fc_us:.1f} | {decision[0] if decision else '(no log line)'} |")
            fastcomp.reset()


if __name__ == "__main__":
    main()
