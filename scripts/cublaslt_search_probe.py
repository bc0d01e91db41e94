"""Is there a faster cuBLASLt configuration than the heuristic's top 8 (what fastcomp's tuning times)? For each
product, every algorithm id cuBLASLt has for f32 (cublasLtMatmulAlgoGetIds) with each tile and stage count it
supports is timed at split-K 1; the fastest few are then tried with split-K 2-16 (each reduction scheme),
CTA swizzling and custom options. Printed per product: the heuristic's favourite, the best of its top 8, the
best found, its configuration and its error against float64. Run on a GPU machine:

    python scripts/cublaslt_search_probe.py [--seconds 6]

Products are F.linear's (bias epilogue), as scripts/cublaslt_first_query_probe.py describes them: W7's four, W5's
first, and W6's q/k/v one. Enum values are cublasLt.h's.
"""
import argparse
import ctypes
import itertools
import time

import torch

from cublaslt_first_query_probe import HEURISTIC_RESULT_BYTES, linear_descriptors
from gpu_timing import stream_us

CUBLAS_COMPUTE_32F, CUDA_R_32F = 68, 0
ALGO_BYTES = 64
CAP_SPLITK_SUPPORT, CAP_REDUCTION_SCHEME_MASK, CAP_CTA_SWIZZLING_SUPPORT = 0, 1, 2
CAP_TILE_IDS, CAP_CUSTOM_OPTION_MAX, CAP_STAGES_IDS = 6, 7, 13
CONFIG_ID, CONFIG_TILE_ID, CONFIG_SPLITK_NUM, CONFIG_REDUCTION_SCHEME = 0, 1, 2, 3
CONFIG_CTA_SWIZZLING, CONFIG_CUSTOM_OPTION, CONFIG_STAGES_ID = 4, 5, 6
WORKSPACE_BYTES = 32 << 20


class Lt:
    def __init__(self):
        self.lib = ctypes.CDLL("libcublasLt.so.13")
        self.handle = ctypes.c_void_p()
        assert self.lib.cublasLtCreate(ctypes.byref(self.handle)) == 0

    def cap(self, algo, attribute, ctype=ctypes.c_uint32):
        """A capability of `algo`: one value, or a list for array attributes."""
        size = ctypes.c_size_t(0)
        if self.lib.cublasLtMatmulAlgoCapGetAttribute(algo, attribute, None, ctypes.c_size_t(0), ctypes.byref(size)):
            return None
        n = size.value // ctypes.sizeof(ctype)
        buf = (ctype * max(n, 1))()
        assert self.lib.cublasLtMatmulAlgoCapGetAttribute(algo, attribute, buf, size, ctypes.byref(size)) == 0
        return list(buf[:n]) if attribute in (CAP_TILE_IDS, CAP_STAGES_IDS) else buf[0]

    def config(self, algo, attribute, ctype=ctypes.c_uint32):
        v = ctype(0)
        written = ctypes.c_size_t(0)
        status = self.lib.cublasLtMatmulAlgoConfigGetAttribute(algo, attribute, ctypes.byref(v),
                                                               ctypes.c_size_t(ctypes.sizeof(v)),
                                                               ctypes.byref(written))
        return v.value if status == 0 else None

    def set_config(self, algo, attribute, value, ctype=ctypes.c_uint32):
        v = ctype(value)
        return self.lib.cublasLtMatmulAlgoConfigSetAttribute(algo, attribute, ctypes.byref(v),
                                                             ctypes.c_size_t(ctypes.sizeof(v)))

    def algo(self, algo_id, tile, stages, splitk=1, reduction=0, swizzle=0, custom=0):
        algo = (ctypes.c_byte * ALGO_BYTES)()
        if self.lib.cublasLtMatmulAlgoInit(self.handle, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F,
                                           CUDA_R_32F, CUDA_R_32F, algo_id, algo):
            return None
        for attribute, value in ((CONFIG_TILE_ID, tile), (CONFIG_STAGES_ID, stages), (CONFIG_SPLITK_NUM, splitk),
                                 (CONFIG_REDUCTION_SCHEME, reduction), (CONFIG_CTA_SWIZZLING, swizzle),
                                 (CONFIG_CUSTOM_OPTION, custom)):
            if self.set_config(algo, attribute, value):
                return None
        return algo

    def describe(self, algo):
        names = ("id", "tile", "splitk", "reduction", "swizzle", "custom", "stages")
        ids = (CONFIG_ID, CONFIG_TILE_ID, CONFIG_SPLITK_NUM, CONFIG_REDUCTION_SCHEME, CONFIG_CTA_SWIZZLING,
               CONFIG_CUSTOM_OPTION, CONFIG_STAGES_ID)
        return " ".join(f"{n}={self.config(algo, i, ctypes.c_int32 if i == CONFIG_ID else ctypes.c_uint32)}"
                        for n, i in zip(names, ids))


def search(lt, workspace, m, n, k, seconds):
    x, w, bias = torch.randn(m, k, device="cuda"), torch.randn(n, k, device="cuda"), torch.randn(n, device="cuda")
    d = torch.empty(m, n, device="cuda")
    reference = torch.nn.functional.linear(x.double(), w.double(), bias.double())
    desc, layouts, preference = linear_descriptors(lt.lib, bias, m, n, k, WORKSPACE_BYTES)
    alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    check = (ctypes.c_byte * HEURISTIC_RESULT_BYTES)()

    def launch(algo):
        return lt.lib.cublasLtMatmul(lt.handle, desc, ctypes.byref(alpha), ctypes.c_void_p(w.data_ptr()), layouts[0],
                                     ctypes.c_void_p(x.data_ptr()), layouts[1], ctypes.byref(beta),
                                     ctypes.c_void_p(d.data_ptr()), layouts[2], ctypes.c_void_p(d.data_ptr()),
                                     layouts[2], algo, ctypes.c_void_p(workspace.data_ptr()),
                                     ctypes.c_size_t(WORKSPACE_BYTES), stream)

    def timed(algo):
        if algo is None or lt.lib.cublasLtMatmulAlgoCheck(lt.handle, desc, layouts[0], layouts[1], layouts[2],
                                                          layouts[2], algo, check):
            return None
        if int.from_bytes(bytes(check)[64:72], "little") > WORKSPACE_BYTES or launch(algo):
            return None
        torch.cuda.synchronize()
        error = ((d.double() - reference).norm() / reference.norm()).item()
        if error > 1e-5:
            return None
        return stream_us(lambda: launch(algo), repeats=10, rounds=2), error

    results = (ctypes.c_byte * (HEURISTIC_RESULT_BYTES * 8))()
    count = ctypes.c_int(0)
    assert lt.lib.cublasLtMatmulAlgoGetHeuristic(lt.handle, desc, layouts[0], layouts[1], layouts[2], layouts[2],
                                                 preference, 8, results, ctypes.byref(count)) == 0
    heuristic = []
    for i in range(count.value):
        algo = (ctypes.c_byte * ALGO_BYTES).from_buffer_copy(bytes(results)[i * HEURISTIC_RESULT_BYTES:][:ALGO_BYTES])
        t = timed(algo)
        if t:
            heuristic.append((t[0], i, lt.describe(algo)))
    ids = (ctypes.c_int * 256)()
    n_ids = ctypes.c_int(0)
    assert lt.lib.cublasLtMatmulAlgoGetIds(lt.handle, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F,
                                           CUDA_R_32F, CUDA_R_32F, 256, ids, ctypes.byref(n_ids)) == 0
    deadline = time.perf_counter() + seconds
    first = []  # (us, config) at split-K 1
    for algo_id in ids[:n_ids.value]:
        probe = lt.algo(algo_id, 0, 0)
        if probe is None:
            continue
        tiles = lt.cap(probe, CAP_TILE_IDS) or [0]
        stages = lt.cap(probe, CAP_STAGES_IDS) or [0]
        for tile, stage in itertools.product(tiles, stages):
            if time.perf_counter() > deadline:
                break
            t = timed(lt.algo(algo_id, tile, stage))
            if t:
                first.append((t[0], (algo_id, tile, stage)))
    first.sort()
    best = list(first[:1])
    for _, (algo_id, tile, stage) in first[:6]:
        probe = lt.algo(algo_id, tile, stage)
        splitk = [1, 2, 3, 4, 6, 8, 16] if lt.cap(probe, CAP_SPLITK_SUPPORT) else [1]
        mask = lt.cap(probe, CAP_REDUCTION_SCHEME_MASK) or 0
        schemes = [s for s in (1, 2, 4) if mask & s] or [0]
        swizzles = [0, 1] if lt.cap(probe, CAP_CTA_SWIZZLING_SUPPORT) else [0]
        customs = range((lt.cap(probe, CAP_CUSTOM_OPTION_MAX, ctypes.c_int32) or 0) + 1)
        for s, r, z, c in itertools.product(splitk, schemes, swizzles, customs):
            if s == 1 and r != schemes[0]:
                continue
            t = timed(lt.algo(algo_id, tile, stage, s, r if s > 1 else 0, z, c))
            if t:
                best.append((t[0], (algo_id, tile, stage, s, r if s > 1 else 0, z, c)))
    best.sort()
    flops = 2 * m * n * k
    fav, top = heuristic[0], min(heuristic)
    found_us, found = best[0]
    print(f"{m}x{n}x{k}: heuristic favourite {fav[0]:.1f} us ({fav[2]}); best of its top {len(heuristic)} "
          f"{top[0]:.1f} us (rank {top[1]}, {flops / top[0] / 1e6:.1f} TFLOP/s); searched {len(first)} "
          f"tile/stage pairs of {n_ids.value} ids: best {found_us:.1f} us ({flops / found_us / 1e6:.1f} TFLOP/s) "
          f"id/tile/stages/splitk/reduction/swizzle/custom={found}", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args()
    torch.zeros(1, device="cuda")
    lt = Lt()
    workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
    for shape in ((1024, 1536, 512), (1024, 512, 512), (1024, 2048, 512), (1024, 512, 2048), (32, 1024, 512),
                  (1024, 1024, 1024)):
        search(lt, workspace, *shape, args.seconds)


if __name__ == "__main__":
    main()
