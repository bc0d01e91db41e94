"""How many algorithms cuBLASLt's heuristic has for a product, and whether any beyond its top 8 (what fastcomp's
tuning times) is faster: each candidate for 64 asked, timed on the GPU with events, against torch's F.linear.
Shapes: W7's four fp32 products, W5's first, and a large square one. Run on a GPU machine:

    python scripts/cublaslt_candidates.py

Products are F.linear's, x[m, k] @ w[n, k].T + bias (bias epilogue), in cuBLASLt's column-major terms; enum
values as in scripts/cublaslt_first_query_probe.py.
"""
import ctypes

import torch

from cublaslt_first_query_probe import (CUBLAS_COMPUTE_32F, CUBLAS_OP_N, CUBLAS_OP_T, CUDA_R_32F, DESC_BIAS_POINTER,
                                        DESC_EPILOGUE, DESC_TRANSA, DESC_TRANSB, EPILOGUE_BIAS,
                                        HEURISTIC_RESULT_BYTES, PREF_MAX_WORKSPACE_BYTES, set_attribute)

WORKSPACE_BYTES = 32 << 20
ASKED = 64


def gpu_us(launch, repeats=20, rounds=3):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(rounds):
        start.record()
        for _ in range(repeats):
            launch()
        stop.record()
        stop.synchronize()
        best = min(best, start.elapsed_time(stop) * 1e3 / repeats)
    return best


def probe(lt, handle, workspace, m, n, k):
    x, w, bias = torch.randn(m, k, device="cuda"), torch.randn(n, k, device="cuda"), torch.randn(n, device="cuda")
    d = torch.empty(m, n, device="cuda")
    reference = torch.nn.functional.linear(x.double(), w.double(), bias.double()).float()
    desc = ctypes.c_void_p()
    assert lt.cublasLtMatmulDescCreate(ctypes.byref(desc), CUBLAS_COMPUTE_32F, CUDA_R_32F) == 0
    set_attribute(lt.cublasLtMatmulDescSetAttribute, desc, DESC_TRANSA, ctypes.c_int32, CUBLAS_OP_T)
    set_attribute(lt.cublasLtMatmulDescSetAttribute, desc, DESC_TRANSB, ctypes.c_int32, CUBLAS_OP_N)
    set_attribute(lt.cublasLtMatmulDescSetAttribute, desc, DESC_EPILOGUE, ctypes.c_uint32, EPILOGUE_BIAS)
    set_attribute(lt.cublasLtMatmulDescSetAttribute, desc, DESC_BIAS_POINTER, ctypes.c_uint64, bias.data_ptr())
    layouts = []
    for rows, cols, ld in ((k, n, k), (k, m, k), (n, m, n)):
        layout = ctypes.c_void_p()
        assert lt.cublasLtMatrixLayoutCreate(ctypes.byref(layout), CUDA_R_32F, ctypes.c_uint64(rows),
                                             ctypes.c_uint64(cols), ctypes.c_int64(ld)) == 0
        layouts.append(layout)
    preference = ctypes.c_void_p()
    assert lt.cublasLtMatmulPreferenceCreate(ctypes.byref(preference)) == 0
    set_attribute(lt.cublasLtMatmulPreferenceSetAttribute, preference, PREF_MAX_WORKSPACE_BYTES, ctypes.c_uint64,
                  WORKSPACE_BYTES)
    results = (ctypes.c_byte * (HEURISTIC_RESULT_BYTES * ASKED))()
    count = ctypes.c_int(0)
    assert lt.cublasLtMatmulAlgoGetHeuristic(handle, desc, layouts[0], layouts[1], layouts[2], layouts[2],
                                             preference, ASKED, results, ctypes.byref(count)) == 0
    alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)

    def launch(i):
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
        timed.append((gpu_us(lambda: launch(i)), i, error))
    for _ in range(3):
        torch.nn.functional.linear(x, w, bias)
    torch_us = gpu_us(lambda: torch.nn.functional.linear(x, w, bias))
    top8, best = min(t for t in timed if t[1] < 8), min(timed)
    print(f"{m}x{n}x{k}: {count.value} candidates; favourite {timed[0][0]:.1f} us; best of the top 8 {top8[0]:.1f} "
          f"us (rank {top8[1]}); best of all {best[0]:.1f} us (rank {best[1]}, rel err {best[2]:.1e}); torch "
          f"F.linear {torch_us:.1f} us", flush=True)


def main():
    torch.zeros(1, device="cuda")
    lt = ctypes.CDLL("libcublasLt.so.13")
    handle = ctypes.c_void_p()
    assert lt.cublasLtCreate(ctypes.byref(handle)) == 0
    workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
    for shape in ((1024, 1536, 512), (1024, 512, 512), (1024, 2048, 512), (1024, 512, 2048), (32, 1024, 512),
                  (4096, 4096, 4096)):
        probe(lt, handle, workspace, *shape)


if __name__ == "__main__":
    main()
