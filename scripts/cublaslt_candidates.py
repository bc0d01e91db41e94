"""How many algorithms cuBLASLt's heuristic has for a product, and whether any beyond its top 8 (what fastcomp's
tuning times) is faster: each candidate for 64 asked, timed on the GPU with events, against torch's F.linear.
Shapes: W7's four fp32 products, W5's first, W10's four, and a large square one. Run on a GPU machine:

    python scripts/cublaslt_candidates.py [--graph]

--graph times every candidate as replays of a CUDA graph of its launches instead of launches on the stream, as
reduce-overhead runs them: products of a few µs (W10's) are otherwise timed by their launch cost, which is why
fastcomp's tuning leaves them to the heuristic.

Products are F.linear's, x[m, k] @ w[n, k].T + bias (bias epilogue), described as
scripts/cublaslt_first_query_probe.py's linear_descriptors does.
"""
import argparse
import ctypes

import torch

from cublaslt_first_query_probe import HEURISTIC_RESULT_BYTES, linear_descriptors
from gpu_timing import graph_us, stream_us

WORKSPACE_BYTES = 32 << 20
ASKED = 64


def cold_l2_us(fn, repeats=20):
    """Median GPU µs of one call of `fn` right after writing 256 MiB (more than any L2), timed alone with events:
    the product as it runs inside a model whose other data has pushed its operands out of L2."""
    import statistics

    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeats):
        flush.zero_()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3)
    return statistics.median(times)


def probe(lt, handle, workspace, m, n, k, timer=stream_us, both=False):
    x, w, bias = torch.randn(m, k, device="cuda"), torch.randn(n, k, device="cuda"), torch.randn(n, device="cuda")
    d = torch.empty(m, n, device="cuda")
    reference = torch.nn.functional.linear(x.double(), w.double(), bias.double()).float()
    desc, layouts, preference = linear_descriptors(lt, bias, m, n, k, WORKSPACE_BYTES)
    results = (ctypes.c_byte * (HEURISTIC_RESULT_BYTES * ASKED))()
    count = ctypes.c_int(0)
    assert lt.cublasLtMatmulAlgoGetHeuristic(handle, desc, layouts[0], layouts[1], layouts[2], layouts[2],
                                             preference, ASKED, results, ctypes.byref(count)) == 0
    alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
    def launch(i):
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)  # the capture's, under --graph
        algo = ctypes.c_void_p(ctypes.addressof(results) + i * HEURISTIC_RESULT_BYTES)
        return lt.cublasLtMatmul(handle, desc, ctypes.byref(alpha), ctypes.c_void_p(w.data_ptr()), layouts[0],
                                 ctypes.c_void_p(x.data_ptr()), layouts[1], ctypes.byref(beta),
                                 ctypes.c_void_p(d.data_ptr()), layouts[2], ctypes.c_void_p(d.data_ptr()),
                                 layouts[2], algo, ctypes.c_void_p(workspace.data_ptr()),
                                 ctypes.c_size_t(WORKSPACE_BYTES), stream)

    timed = []  # (µs, rank, relative error) of each candidate cuBLASLt runs
    for i in range(count.value):
        if launch(i) != 0:
            continue
        torch.cuda.synchronize()
        error = ((d - reference).norm() / reference.norm()).item()
        timed.append((timer(lambda: launch(i)), i, error))
        if both and i < 8:
            print(f"  {m}x{n}x{k} rank {i}: {stream_us(lambda: launch(i)):.1f} us on the stream, "
                  f"{graph_us(lambda: launch(i), calls=20, rounds=3):.1f} us in a CUDA graph, "
                  f"{cold_l2_us(lambda: launch(i)):.1f} us after an L2 flush", flush=True)
    for _ in range(3):
        torch.nn.functional.linear(x, w, bias)
    torch_us = timer(lambda: torch.nn.functional.linear(x, w, bias))
    top8, best = min(t for t in timed if t[1] < 8), min(timed)
    print(f"{m}x{n}x{k}: {count.value} candidates; favourite {timed[0][0]:.1f} us; best of the top 8 {top8[0]:.1f} "
          f"us (rank {top8[1]}); best of all {best[0]:.1f} us (rank {best[1]}, rel err {best[2]:.1e}); torch "
          f"F.linear {torch_us:.1f} us", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", action="store_true", help="time CUDA-graph replays of the launches")
    parser.add_argument("--both", action="store_true",
                        help="also print each of the top 8 candidates' time both ways (stream and CUDA graph)")
    parser.add_argument("--shapes", help="m,n,k[;m,n,k...] instead of the built-in list")
    args = parser.parse_args()
    torch.zeros(1, device="cuda")
    lt = ctypes.CDLL("libcublasLt.so.13")
    handle = ctypes.c_void_p()
    assert lt.cublasLtCreate(ctypes.byref(handle)) == 0
    workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
    timer = (lambda fn: graph_us(fn, calls=20, rounds=3)) if args.graph else stream_us
    shapes = ((1024, 1536, 512), (1024, 512, 512), (1024, 2048, 512), (1024, 512, 2048), (32, 1024, 512),
              (128, 768, 256), (128, 256, 256), (128, 1024, 256), (128, 256, 1024), (4096, 4096, 4096))
    if args.shapes:
        shapes = [tuple(int(x) for x in s.split(",")) for s in args.shapes.split(";")]
    for shape in shapes:
        probe(lt, handle, workspace, *shape, timer=timer, both=args.both)


if __name__ == "__main__":
    main()
