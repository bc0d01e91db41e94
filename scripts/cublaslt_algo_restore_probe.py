"""Can a cuBLASLt algorithm chosen in one process be used in the next without asking the heuristic again (whose
first query of a dtype costs a process ~100 ms)? Straight through libcublasLt (ctypes, the library torch loaded),
F.linear's products of W5 and W7 (f32 with a bias epilogue). Run on a GPU machine, each step a fresh process:

    python scripts/cublaslt_algo_restore_probe.py save /tmp/algos.json     # heuristic, pick, config, run
    python scripts/cublaslt_algo_restore_probe.py bytes /tmp/algos.json    # the 64 saved bytes as the algorithm
    python scripts/cublaslt_algo_restore_probe.py torch-bytes /tmp/algos.json  # torch's F.linear first, then bytes

Each prints per product the milliseconds of each step, whether the result equals torch's F.linear, and how long
the heuristic takes afterwards (and whether its favourite has the saved bytes). Enum values are cublasLt.h's.
"""
import ctypes
import json
import sys
import time

import torch

from cublaslt_first_query_probe import HEURISTIC_RESULT_BYTES, linear_descriptors

ALGO_BYTES = 64  # sizeof(cublasLtMatmulAlgo_t)
WORKSPACE = 32 << 20
PRODUCTS = [(32, 1024, 512), (32, 512, 1024), (1024, 1536, 512), (1024, 2048, 512), (1024, 512, 2048)]


def ms_since(start):
    return (time.perf_counter() - start) * 1e3


def run_product(lt, handle, algo, m, n, k, workspace, label):
    x, w, b = (torch.randn(m, k, device="cuda"), torch.randn(n, k, device="cuda"), torch.randn(n, device="cuda"))
    d = torch.empty(m, n, device="cuda")
    desc, layouts, _ = linear_descriptors(lt, b, m, n, k, WORKSPACE)
    alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    times = []
    for _ in range(2):
        start = time.perf_counter()
        status = lt.cublasLtMatmul(handle, desc, ctypes.byref(alpha), ctypes.c_void_p(w.data_ptr()), layouts[0],
                                   ctypes.c_void_p(x.data_ptr()), layouts[1], ctypes.byref(beta),
                                   ctypes.c_void_p(d.data_ptr()), layouts[2], ctypes.c_void_p(d.data_ptr()),
                                   layouts[2], algo, ctypes.c_void_p(workspace.data_ptr()),
                                   ctypes.c_size_t(WORKSPACE), stream)
        torch.cuda.synchronize()
        times.append(ms_since(start))
    ref = torch.nn.functional.linear(x.double(), w.double(), b.double())
    err = ((d.double() - ref).norm() / ref.norm()).item()
    print(f"  {label}: run status {status}, first {times[0]:.2f} ms, second {times[1]:.2f} ms, rel err {err:.1e}")


def main():
    step, path = sys.argv[1], sys.argv[2]
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    lt = ctypes.CDLL("libcublasLt.so.13")
    handle = ctypes.c_void_p()
    assert lt.cublasLtCreate(ctypes.byref(handle)) == 0
    workspace = torch.empty(WORKSPACE, dtype=torch.uint8, device="cuda")
    saved = json.load(open(path)) if step != "save" else {}
    for m, n, k in PRODUCTS:
        key = f"{m}x{n}x{k}"
        print(f"{key} (f32, bias):")
        b = torch.randn(n, device="cuda")
        desc, layouts, preference = linear_descriptors(lt, b, m, n, k, WORKSPACE)
        algo = (ctypes.c_byte * ALGO_BYTES)()
        if step == "save":
            results, count = (ctypes.c_byte * (HEURISTIC_RESULT_BYTES * 8))(), ctypes.c_int(0)
            start = time.perf_counter()
            status = lt.cublasLtMatmulAlgoGetHeuristic(handle, desc, layouts[0], layouts[1], layouts[2], layouts[2],
                                                       preference, 8, results, ctypes.byref(count))
            print(f"  heuristic: {ms_since(start):.1f} ms (status {status}, {count.value} algorithms)")
            ctypes.memmove(algo, results, ALGO_BYTES)
            saved[key] = {"bytes": bytes(algo).hex()}
        elif step == "bytes":
            ctypes.memmove(algo, bytes.fromhex(saved[key]["bytes"]), ALGO_BYTES)
        else:  # torch-bytes
            x, w = torch.randn(m, k, device="cuda"), torch.randn(n, k, device="cuda")
            start = time.perf_counter()
            torch.nn.functional.linear(x, w, b)
            torch.cuda.synchronize()
            print(f"  torch's F.linear first: {ms_since(start):.1f} ms")
            ctypes.memmove(algo, bytes.fromhex(saved[key]["bytes"]), ALGO_BYTES)
        run_product(lt, handle, algo, m, n, k, workspace, step)
        if step != "save":
            results, count = (ctypes.c_byte * (HEURISTIC_RESULT_BYTES * 8))(), ctypes.c_int(0)
            start = time.perf_counter()
            lt.cublasLtMatmulAlgoGetHeuristic(handle, desc, layouts[0], layouts[1], layouts[2], layouts[2],
                                              preference, 8, results, ctypes.byref(count))
            print(f"  heuristic afterwards: {ms_since(start):.1f} ms; its favourite's bytes equal the saved ones: "
                  f"{bytes(results)[:ALGO_BYTES].hex() == saved[key]['bytes']}")
    if step == "save":
        json.dump(saved, open(path, "w"), indent=1)


if __name__ == "__main__":
    main()
