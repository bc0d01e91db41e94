"""Is cuBLASLt's first heuristic query a per-process, per-handle or per-torch cost? Straight through libcublasLt
(ctypes, the library torch already loaded), W5's first product (f32 32x1024x512 with a bias epilogue), timed in
one fresh process per variant. Run on a GPU machine:

    for v in new torch-handle torch-first-new torch-first-torch-handle; do
        python scripts/cublaslt_first_query_probe.py $v; done

new / torch-handle: query on a handle of our own (then on a second new one) or on torch's cuBLAS handle (a
cublasHandle_t can stand for a cublasLtHandle_t). torch-first-*: run torch's own F.linear of that shape first.
Enum values are cublasLt.h's (also in csrc/runtime/cuda/cuda_api.h).
"""
import ctypes
import sys
import time

import torch

CUBLAS_COMPUTE_32F, CUDA_R_32F, CUBLAS_OP_N, CUBLAS_OP_T = 68, 0, 0, 1
DESC_TRANSA, DESC_TRANSB, DESC_EPILOGUE, DESC_BIAS_POINTER = 3, 4, 7, 8
EPILOGUE_BIAS, PREF_MAX_WORKSPACE_BYTES = 4, 1
HEURISTIC_RESULT_BYTES = 96  # sizeof(cublasLtMatmulHeuristicResult_t)


def set_attribute(setter, obj, attribute, ctype, value):
    v = ctype(value)
    assert setter(obj, attribute, ctypes.byref(v), ctypes.c_size_t(ctypes.sizeof(v))) == 0, attribute


def linear_descriptors(lt, bias, m, n, k, workspace_bytes):
    """cuBLASLt's descriptors for F.linear's x[m, k] @ w[n, k].T + bias in its column-major terms (w as stored
    transposed, x as stored, d [n, m]): (matmul desc, [w, x, d] layouts, preference)."""
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
                  workspace_bytes)
    return desc, layouts, preference


def query(lt, handle, bias, label, m=32, n=1024, k=512):
    """Times one heuristic query for x[m, k] @ w[n, k].T + bias."""
    desc, layouts, preference = linear_descriptors(lt, bias, m, n, k, 32 << 20)
    results = (ctypes.c_byte * (HEURISTIC_RESULT_BYTES * 8))()
    count = ctypes.c_int(0)
    start = time.perf_counter()
    status = lt.cublasLtMatmulAlgoGetHeuristic(handle, desc, layouts[0], layouts[1], layouts[2], layouts[2],
                                               preference, 8, results, ctypes.byref(count))
    print(f"  {label}: {(time.perf_counter() - start) * 1e3:.1f} ms (status {status}, {count.value} algorithms)")


def main():
    variant = sys.argv[1] if len(sys.argv) > 1 else "new"
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    torch_handle = ctypes.c_void_p(torch.cuda.current_blas_handle())
    lt = ctypes.CDLL("libcublasLt.so.13")  # the one torch loaded
    if variant.startswith("torch-first"):
        x, w, b = (torch.randn(32, 512, device="cuda"), torch.randn(1024, 512, device="cuda"),
                   torch.randn(1024, device="cuda"))
        start = time.perf_counter()
        torch.nn.functional.linear(x, w, b)
        torch.cuda.synchronize()
        print(f"  torch's first F.linear: {(time.perf_counter() - start) * 1e3:.1f} ms")
    bias = torch.randn(1024, device="cuda")
    if variant.endswith("torch-handle"):
        query(lt, torch_handle, bias, "torch's handle")
        query(lt, torch_handle, bias, "torch's handle again")
        return
    for label in ("a new handle", "another new handle"):
        handle = ctypes.c_void_p()
        assert lt.cublasLtCreate(ctypes.byref(handle)) == 0
        query(lt, handle, bias, label)


if __name__ == "__main__":
    main()
