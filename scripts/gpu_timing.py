"""GPU time of a callable, for the probe and variant scripts here (imported as `from gpu_timing import ...`; torch
is imported only when a timing runs, so scripts can offer their GPU-free options without it).

- stream_us: launches queued back to back on the current stream, timed with events: what a call costs the GPU
  when the host keeps ahead; for products of a few µs it times the host's launches instead.
- graph_us: the same launches captured into a CUDA graph and replayed, so launch costs drop out, as they do under
  reduce-overhead.
"""


def stream_us(fn, repeats=20, rounds=3):
    """GPU µs per call of `fn`, `repeats` calls queued back to back (best of `rounds`)."""
    import torch

    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(rounds):
        start.record()
        for _ in range(repeats):
            fn()
        stop.record()
        stop.synchronize()
        best = min(best, start.elapsed_time(stop) * 1e3 / repeats)
    return best


def graph_us(fn, calls=100, rounds=5):
    """GPU µs per call of `fn`, replayed from a CUDA graph of `calls` calls after three calls outside it (best of
    `rounds` replays)."""
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(rounds):
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        best = min(best, start.elapsed_time(stop) * 1e3 / calls)
    return best
