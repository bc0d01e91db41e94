"""Can a hand-written fp32 SIMT GEMM (plain FFMA on the CUDA cores, no TF32) beat cuBLAS by 20% on W7's four
F.linear products (and W10's)? cuBLAS reaches only 26-42 TFLOP/s of the ~60 TFLOP/s fp32 peak of an H100 on them, mostly
because each is about one wave of tiles on 132 SMs. This times one kernel template, D[M,N] = A[M,K] @ W[N,K]^T +
bias[N] (nn.Linear's layout, everything contiguous, f32), under several parameterisations (block tile BM x BN,
K step BK, per-thread tile TM x TN, warp tile WM x WN, split-K into SPLITK slices summed by a second, deterministic
kernel), each as CUDA-graph replays of 100 calls (best of 5) next to torch's F.linear (cuBLAS, TF32 off) on the
same tensors in the same process, and checks each against F.linear's output. Run on a GPU machine with CuPy:

    python scripts/sgemm_variants.py [--shapes in_proj,ff2]

Without a GPU or CuPy, `--dump DIR` writes each variant's CUDA source to DIR, and `--ptxas DIR` also compiles each
with nvcc (sm_90) and prints the registers and spills ptxas reports.
"""
import argparse
import math
import os
import re
import subprocess
import sys
import time
from collections import namedtuple

from gpu_timing import graph_us

# (name, M, N, K): D[M,N] = A[M,K] @ W[N,K]^T + bias[N]
SHAPES = [("in_proj", 1024, 1536, 512), ("out_proj", 1024, 512, 512), ("ff1", 1024, 2048, 512),
          ("ff2", 1024, 512, 2048),
          # W10's (128 tokens, d=256): cuBLAS runs each as a 32x32-tile GEMM and a split-K sum, ~8 us a product
          ("w10_in_proj", 128, 768, 256), ("w10_out_proj", 128, 256, 256), ("w10_ff1", 128, 1024, 256),
          ("w10_ff2", 128, 256, 1024)]
# Shapes with too few output tiles for 132 SMs: W7's 1024 x 512 outputs (32 to 128 tiles), all of W10's.
SPLITK_SHAPES = {"out_proj", "ff2", "w10_in_proj", "w10_out_proj", "w10_ff1", "w10_ff2"}
SPLITKS = (2, 4, 8)

# The kernel. One block computes a BM x BN tile of D (or of one split-K slice's partial sums); its THREADS =
# BM*BN/(TM*TN) threads form warps that each own a WM x WN warp tile, inside which a lane owns TM x TN outputs:
# TM/4 float4 groups of rows spaced LM*4 apart and TN/4 float4 groups of columns spaced LN*4 apart (LM x LN = 32
# lanes), so that at each k the warp's fragment reads from shared memory are contiguous float4 runs (conflict-free,
# the same float4 broadcast to the lanes that share it) and the epilogue's float4 stores of a row are contiguous.
#
# Shared memory holds one K tile of A and W together as a K-major "AW" tile: for each k a row of ROWS = BM + BN
# floats (A's BM rows of the block, then W's BN), so the inner loop reads A and W fragments as float4 along M and N.
# Global memory is K-contiguous, so each thread loads float4s of 4 consecutive k of one row and transposes them into
# 4 shared-memory rows on the store. Without care those scalar stores conflict (the BK/4 lanes that load one row's
# K tile write the same column of 4 k apart); each group of 4 k is therefore shifted by SKEW = 32/(BK/4) floats,
# which puts the 32 lanes of a store on 32 distinct banks and keeps every k row 16-byte aligned for the float4 reads.
#
# Double buffering goes through registers: at the top of K tile t each thread issues its global float4 loads of
# tile t+1, computes tile t from shared stage t%2, then stores the loaded registers into stage (t+1)%2; a single
# __syncthreads per tile suffices because stage (t+1)%2 was last read in tile t-1, before the previous barrier.
# (cp.async copies 16 bytes as they are, so it could not do the K-to-M/N transpose; with a K-contiguous shared tile
# the inner loop would read float4 along K instead, holding 4*(TM+TN) fragment registers, or pay a second
# shared-to-shared transposing pass. Register staging costs only LOADS float4 registers, 1 to 4 here.)
#
# SPLITK == 1: the epilogue adds bias and writes D. SPLITK > 1: block z covers K range [z*K/SPLITK, (z+1)*K/SPLITK)
# and writes its partial tile, without bias, to P[z] of a [SPLITK, M, N] workspace passed as D; splitk_sum then adds
# the slices in order z = 0, 1, ... and the bias (deterministic, no atomics).
KERNEL = r'''
extern "C" __global__ void __launch_bounds__(@THREADS@, @MINB@)
sgemm(const float* __restrict__ A, const float* __restrict__ W, const float* __restrict__ bias, float* __restrict__ D) {
  constexpr int M = @M@, N = @N@, K = @K@, SPLITK = @SPLITK@;
  constexpr int BM = @BM@, BN = @BN@, BK = @BK@, TM = @TM@, TN = @TN@, WM = @WM@, WN = @WN@, THREADS = @THREADS@;
  constexpr int KS = K / SPLITK, NT = KS / BK;       // K of one split-K slice, K tiles in it
  constexpr int LM = WM / TM, LN = WN / TN;           // lanes of a warp along M and along N
  constexpr int WARPS_N = BN / WN;
  constexpr int KQ = BK / 4;                          // float4s along K in one row of a K tile
  constexpr int ROWS = BM + BN;                       // A rows then W rows: one k row of the shared "AW" tile
  constexpr int SKEW = 32 / KQ;                       // shift of each group of 4 k rows (bank-conflict-free stores)
  constexpr int STAGE = BK * ROWS + (KQ - 1) * SKEW;  // floats in one shared stage
  constexpr int ITEMS = ROWS * KQ, LOADS = (ITEMS + THREADS - 1) / THREADS;  // float4s of a K tile, a thread's
  static_assert(M % BM == 0 && N % BN == 0 && K % SPLITK == 0 && KS % BK == 0, "the shape must tile evenly");
  static_assert(K % 4 == 0 && N % 4 == 0, "rows of A, W and D must be float4-aligned");
  static_assert(BK % 4 == 0 && BK <= 32 && TM % 4 == 0 && TN % 4 == 0, "float4 fragments, SKEW >= 4");
  static_assert(WM % TM == 0 && WN % TN == 0 && LM * LN == 32, "a warp tile is 32 lanes' thread tiles");
  static_assert(BM % WM == 0 && BN % WN == 0 && (BM / WM) * WARPS_N * 32 == THREADS, "one warp per warp tile");
  static_assert(ROWS % 32 == 0 && 32 % KQ == 0, "conflict-free tile stores, whole warps a load");
  static_assert(2 * STAGE * 4 <= 48 * 1024, "static shared memory");
  __shared__ __align__(16) float smem[2 * STAGE];

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN, k0 = blockIdx.z * KS;

  // Loads: item i of a K tile is the float4 (row i / KQ of AW, k quad i % KQ); thread tid does items tid + l*THREADS
  // below ITEMS (whole warps, as ITEMS is a multiple of 32).
  const float* src[LOADS];
  int dst[LOADS];
  auto has = [&](int l) { return ITEMS % THREADS == 0 || tid + l * THREADS < ITEMS; };
#pragma unroll
  for (int l = 0; l < LOADS; ++l) {
    const int item = has(l) ? tid + l * THREADS : 0, r = item / KQ, q = item % KQ;
    src[l] = (r < BM ? A + (long long)(m0 + r) * K : W + (long long)(n0 + r - BM) * K) + k0 + 4 * q;
    dst[l] = 4 * q * ROWS + q * SKEW + r;
  }
  float4 staged[LOADS];
  auto load_tile = [&](int t) {
#pragma unroll
    for (int l = 0; l < LOADS; ++l)
      if (has(l)) staged[l] = *reinterpret_cast<const float4*>(src[l] + t * BK);
  };
  auto store_tile = [&](float* s) {
#pragma unroll
    for (int l = 0; l < LOADS; ++l) {
      if (!has(l)) continue;
      s[dst[l]] = staged[l].x;
      s[dst[l] + ROWS] = staged[l].y;
      s[dst[l] + 2 * ROWS] = staged[l].z;
      s[dst[l] + 3 * ROWS] = staged[l].w;
    }
  };

  // This lane's first A row and first W row within the AW tile.
  const int am = (warp / WARPS_N) * WM + (lane / LN) * 4;
  const int wn = BM + (warp % WARPS_N) * WN + (lane % LN) * 4;

  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

  load_tile(0);
  store_tile(smem);
  __syncthreads();
#pragma unroll 1
  for (int t = 0; t < NT; ++t) {
    const float* s = smem + (t & 1) * STAGE;
    if (t + 1 < NT) load_tile(t + 1);
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      const float* sk = s + k * ROWS + (k >> 2) * SKEW;
      float a[TM], b[TN];
#pragma unroll
      for (int i = 0; i < TM / 4; ++i) {
        const float4 v = *reinterpret_cast<const float4*>(sk + am + i * LM * 4);
        a[4 * i] = v.x, a[4 * i + 1] = v.y, a[4 * i + 2] = v.z, a[4 * i + 3] = v.w;
      }
#pragma unroll
      for (int j = 0; j < TN / 4; ++j) {
        const float4 v = *reinterpret_cast<const float4*>(sk + wn + j * LN * 4);
        b[4 * j] = v.x, b[4 * j + 1] = v.y, b[4 * j + 2] = v.z, b[4 * j + 3] = v.w;
      }
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    if (t + 1 < NT) store_tile(smem + ((t + 1) & 1) * STAGE);
    __syncthreads();
  }

  // Epilogue: row m0 + am + i4*LM*4 + ii, columns n0 + (wn - BM) + j4*LN*4 + 0..3 hold acc[4*i4 + ii][4*j4 + 0..3].
  const int col0 = n0 + wn - BM;
  float4 bv[TN / 4];
#pragma unroll
  for (int j = 0; j < TN / 4; ++j)
    bv[j] = SPLITK == 1 ? *reinterpret_cast<const float4*>(bias + col0 + j * LN * 4) : float4{};
  float* out = D + (long long)blockIdx.z * M * N;  // the slice's partial tile when SPLITK > 1
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    float* d = out + (long long)(m0 + am + (i / 4) * LM * 4 + i % 4) * N + col0;
#pragma unroll
    for (int j = 0; j < TN / 4; ++j) {
      float4 o;
      if constexpr (SPLITK == 1) {
        o.x = acc[i][4 * j] + bv[j].x, o.y = acc[i][4 * j + 1] + bv[j].y;
        o.z = acc[i][4 * j + 2] + bv[j].z, o.w = acc[i][4 * j + 3] + bv[j].w;
      } else {
        o.x = acc[i][4 * j], o.y = acc[i][4 * j + 1], o.z = acc[i][4 * j + 2], o.w = acc[i][4 * j + 3];
      }
      *reinterpret_cast<float4*>(d + j * LN * 4) = o;
    }
  }
}
'''

# D = P[0] + P[1] + ... + P[SPLITK-1] + bias, in that order, a float4 a thread.
SPLITK_SUM = r'''
extern "C" __global__ void __launch_bounds__(256)
splitk_sum(const float4* __restrict__ P, const float* __restrict__ bias, float4* __restrict__ D) {
  constexpr int SPLITK = @SPLITK@, MN4 = @MN4@, N4 = @N4@;
  const int i = blockIdx.x * 256 + threadIdx.x;
  if (i >= MN4) return;
  float4 s = P[i];
#pragma unroll
  for (int z = 1; z < SPLITK; ++z) {
    const float4 p = P[(long long)z * MN4 + i];
    s.x += p.x, s.y += p.y, s.z += p.z, s.w += p.w;
  }
  const float4 b = reinterpret_cast<const float4*>(bias)[i % N4];
  s.x += b.x, s.y += b.y, s.z += b.z, s.w += b.w;
  D[i] = s;
}
'''

Variant = namedtuple("Variant", "bm bn bk tm tn wm wn splitk minb")

# (BM, BN, TM, TN, WM, WN, min blocks an SM for __launch_bounds__)
TILES = [
    (128, 128, 8, 8, 32, 64, 1),  # 256 threads
    (128, 64, 8, 4, 32, 32, 2),  # 256 threads
    (64, 128, 8, 4, 32, 32, 2),  # 256 threads
    (64, 64, 4, 4, 16, 32, 2),  # 256 threads
    (64, 64, 8, 4, 32, 32, 2),  # 128 threads
    (128, 64, 8, 8, 32, 64, 2),  # 128 threads
    (64, 128, 8, 8, 32, 64, 2),  # 128 threads
]
BKS = (8, 16)


def threads(v):
    return v.bm * v.bn // (v.tm * v.tn)


def name(v):
    s = f"{v.bm}x{v.bn}x{v.bk} t{v.tm}x{v.tn} w{v.wm}x{v.wn} {threads(v)}thr"
    return s + (f" sk{v.splitk}" if v.splitk > 1 else "")


def slug(v):
    return re.sub(r"[^0-9A-Za-z]+", "_", name(v))


def variants(shape):
    """The variants tried on a shape (name, M, N, K)."""
    out = [Variant(bm, bn, bk, tm, tn, wm, wn, 1, minb) for bm, bn, tm, tn, wm, wn, minb in TILES for bk in BKS]
    if shape[0] in SPLITK_SHAPES:
        out += [v._replace(splitk=s) for s in SPLITKS for v in out]
    return out


def unfit(v, M, N, K):
    """Why variant v can't run on M x N x K (mirrors the kernel's static_asserts), or None."""
    if M % v.bm or N % v.bn or K % v.splitk or (K // v.splitk) % v.bk:
        return "does not tile evenly"
    if K % 4 or N % 4:
        return "rows not float4-aligned"
    lm, ln = v.wm // v.tm, v.wn // v.tn
    if v.bk % 4 or v.bk > 32 or v.tm % 4 or v.tn % 4 or v.wm % v.tm or v.wn % v.tn or lm * ln != 32:
        return "bad thread/warp tile"
    if v.bm % v.wm or v.bn % v.wn or (v.bm // v.wm) * (v.bn // v.wn) * 32 != threads(v):
        return "bad warp layout"
    kq = v.bk // 4
    rows = v.bm + v.bn
    if rows % 32 or 32 % kq:
        return "uneven tile loads"
    if 2 * (v.bk * rows + (kq - 1) * (32 // kq)) * 4 > 48 * 1024:
        return "over 48 KiB of static shared memory"
    return None


def fill(template, **fields):
    for marker, value in fields.items():
        template = template.replace(f"@{marker}@", str(value))
    assert "@" not in template, template
    return template


def kernel_source(v, M, N, K):
    return fill(KERNEL, M=M, N=N, K=K, SPLITK=v.splitk, BM=v.bm, BN=v.bn, BK=v.bk, TM=v.tm, TN=v.tn, WM=v.wm,
                WN=v.wn, THREADS=threads(v), MINB=v.minb)


def splitk_sum_source(splitk, M, N):
    return fill(SPLITK_SUM, SPLITK=splitk, MN4=M * N // 4, N4=N // 4)


def selected_shapes(arg):
    if not arg:
        return SHAPES
    names = arg.split(",")
    unknown = set(names) - {s[0] for s in SHAPES}
    if unknown:
        sys.exit(f"unknown shapes {sorted(unknown)}; known: {[s[0] for s in SHAPES]}")
    return [s for s in SHAPES if s[0] in names]


def dump(directory, shapes):
    """Writes every variant's kernel source (and the split-K sums) to `directory`; returns the file paths."""
    os.makedirs(directory, exist_ok=True)
    paths = []
    for shape, M, N, K in shapes:
        for v in variants((shape, M, N, K)):
            if unfit(v, M, N, K):
                continue
            paths.append(os.path.join(directory, f"{shape}__{slug(v)}.cu"))
            with open(paths[-1], "w") as f:
                f.write(kernel_source(v, M, N, K))
        if shape in SPLITK_SHAPES:
            for s in SPLITKS:
                paths.append(os.path.join(directory, f"{shape}__splitk_sum_{s}.cu"))
                with open(paths[-1], "w") as f:
                    f.write(splitk_sum_source(s, M, N))
    return paths


def ptxas(directory, shapes, nvcc="nvcc"):
    """Dumps the sources and compiles each with nvcc for sm_90, printing ptxas's registers and spills."""
    bad = 0
    for path in dump(directory, shapes):
        cmd = [nvcc, "-cubin", "-arch=sm_90", "-std=c++17", "--resource-usage", "-o", path[:-3] + ".cubin", path]
        start = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True)
        text = p.stdout + p.stderr
        regs = re.search(r"Used (\d+) registers", text)
        spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", text)
        stack = re.search(r"(\d+) bytes stack frame", text)
        ok = p.returncode == 0 and regs and spills and spills.group(1) == "0" and spills.group(2) == "0"
        bad += not ok
        print(f"{os.path.basename(path):60s} {'ok  ' if ok else 'FAIL'} regs {regs.group(1) if regs else '?':>3s} "
              f"spill st/ld {spills.group(1) if spills else '?'}/{spills.group(2) if spills else '?'} "
              f"stack {stack.group(1) if stack else '?'} ({time.time() - start:.1f} s)")
        if p.returncode:
            print(text)
    print(f"{bad} of the compiles failed or spilled")
    return bad


def device_info():
    import torch

    props = torch.cuda.get_device_properties(0)
    print(f"device: {torch.cuda.get_device_name()} ({props.multi_processor_count} SMs), torch {torch.__version__}, "
          f"CUDA {torch.version.cuda}")
    try:  # clocks are cheap to ask nvidia-smi for; skip them if it isn't there
        q = "clocks.sm,clocks.max.sm,clocks.mem,power.limit"
        line = subprocess.run(["nvidia-smi", "-i", "0", f"--query-gpu={q}", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
        print(f"nvidia-smi {q}: {line}")
        max_mhz = float(line.split(",")[1].split()[0])
        print(f"fp32 FFMA peak at the max SM clock: {props.multi_processor_count * 128 * 2 * max_mhz * 1e6 / 1e12:.1f}"
              " TFLOP/s")
    except Exception as e:  # noqa: BLE001 -- informational only
        print(f"(no clock info: {e})")


def run_shape(shape, M, N, K):
    """Times every variant on one shape; returns (F.linear µs, fastcomp's tuned cuBLASLt µs, best variant's (name,
    µs) or None)."""
    import cupy
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    A = torch.randn(M, K, device="cuda")
    W = torch.randn(N, K, device="cuda") / math.sqrt(K)
    b = torch.randn(N, device="cuda")
    D = torch.empty(M, N, device="cuda")
    ref = F.linear(A, W, b)
    ref64 = F.linear(A.double(), W.double(), b.double())
    scale = ref.abs().max().item()
    tol = 1e-4 * scale  # rtol 1e-4 and atol 1e-4, both relative to the output's scale
    flop = 2 * M * N * K
    cublas = graph_us(lambda: F.linear(A, W, b))
    tuned = tuned_cublaslt_us(A, W, b, D, M, N, K)
    print(f"\n=== {shape}: M={M} N={N} K={K}  F.linear {cublas:.2f} us = {flop / cublas / 1e6:.1f} TFLOP/s  "
          f"(max |out| {scale:.2f}, F.linear's max abs err vs float64 {(ref.double() - ref64).abs().max().item():.1e})"
          f"; fastcomp's tuned cuBLASLt plan {tuned:.2f} us")
    print(f"{'variant':38s} {'blocks':>6s} {'regs':>4s} {'us':>8s} {'TFLOP/s':>7s} {'speedup':>7s} {'max abs err':>11s}"
          f" {'vs f64':>7s}")
    stream = lambda: cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)  # noqa: E731
    sums, results = {}, []
    for v in variants((shape, M, N, K)):
        why = unfit(v, M, N, K)
        if why:
            print(f"{name(v):38s} skipped: {why}")
            continue
        try:
            kernel = cupy.RawKernel(kernel_source(v, M, N, K), "sgemm", options=("-std=c++17",))
            grid = (N // v.bn, M // v.bm, v.splitk)
            if v.splitk == 1:
                args = tuple(cupy.from_dlpack(t) for t in (A, W, b, D))
                launch_sum = None
            else:
                if v.splitk not in sums:
                    sums[v.splitk] = (cupy.RawKernel(splitk_sum_source(v.splitk, M, N), "splitk_sum",
                                                     options=("-std=c++17",)),
                                      torch.empty(v.splitk, M, N, device="cuda"))
                summer, ws = sums[v.splitk]
                args = tuple(cupy.from_dlpack(t) for t in (A, W, b, ws))
                sum_args = tuple(cupy.from_dlpack(t) for t in (ws, b, D))
                sum_grid = (-(-(M * N // 4) // 256),)
                launch_sum = lambda: summer(sum_grid, (256,), sum_args)  # noqa: E731

            def launch():  # on torch's stream, so that torch's graph capture records it
                with stream():
                    kernel(grid, (threads(v),), args)
                    if launch_sum:
                        launch_sum()

            D.fill_(float("nan"))  # so that an output the kernel misses shows as an error
            launch()
            torch.cuda.synchronize()
            err = (D - ref).abs().max().item()
            err64 = (D.double() - ref64).abs().max().item()
            ok = err <= tol  # False for NaN too
            try:
                regs = f"{kernel.num_regs}" + ("" if kernel.local_size_bytes == 0 else f"+{kernel.local_size_bytes}L")
            except Exception:  # noqa: BLE001 -- informational only
                regs = "?"
            us = graph_us(launch)
            print(f"{name(v):38s} {grid[0] * grid[1] * grid[2]:6d} {regs:>4s} {us:8.2f} {flop / us / 1e6:7.1f} "
                  f"{cublas / us:7.2f} {err:11.1e} {err64:7.1e}{'' if ok else '  FAIL'}")
            if ok:
                results.append((us, name(v)))
        except Exception as e:  # noqa: BLE001 -- e.g. a compile error: report it, go on with the others
            print(f"{name(v):38s} failed: {str(e)[:300]}")
    cublas_again = graph_us(lambda: F.linear(A, W, b))
    print(f"F.linear again after the variants: {cublas_again:.2f} us")
    cublas = min(cublas, cublas_again)
    if not results:
        print(f"best for {shape}: none passed")
        return cublas, tuned, None
    us, best = min(results)
    print(f"best for {shape}: {best}: {us:.2f} us = {flop / us / 1e6:.1f} TFLOP/s, {cublas / us:.2f}x F.linear's "
          f"{cublas:.2f} us")
    return cublas, tuned, (best, us)


def tuned_cublaslt_us(A, W, b, D, M, N, K):
    """The product as fastcomp runs it: a cuBLASLt plan with the bias epilogue, tuned on its first run (candidates
    timed, as in a compiled model), then timed like the variants."""
    import torch
    from fastcomp import _C

    workspace = torch.empty(32 << 20, dtype=torch.uint8, device="cuda")
    plan = _C._testing.MatmulPlan(0, 32 << 20, m=M, n=N, k=K, dtype="f32", a_row_stride=K, a_col_stride=1,
                                  b_row_stride=1, b_col_stride=K, d_row_stride=N, epilogue="bias")

    def run():
        plan.run(A.data_ptr(), W.data_ptr(), 0, D.data_ptr(), b.data_ptr(), workspace.data_ptr(),
                 torch.cuda.current_stream().cuda_stream)

    run()
    torch.cuda.synchronize()
    return graph_us(run)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", help="comma-separated subset of " + ",".join(s[0] for s in SHAPES))
    parser.add_argument("--dump", metavar="DIR", help="write each variant's CUDA source to DIR and exit (no GPU)")
    parser.add_argument("--ptxas", metavar="DIR", help="--dump DIR, then compile each with nvcc -arch=sm_90 and "
                        "print registers and spills (no GPU)")
    parser.add_argument("--nvcc", default="nvcc", help="the nvcc for --ptxas")
    args = parser.parse_args()
    shapes = selected_shapes(args.shapes)
    if args.ptxas:
        sys.exit(1 if ptxas(args.ptxas, shapes, args.nvcc) else 0)
    if args.dump:
        print(f"wrote {len(dump(args.dump, shapes))} files to {args.dump}")
        return

    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    assert not torch.backends.cuda.matmul.allow_tf32, "F.linear must be plain fp32 for the comparison"
    device_info()
    print("speedup = F.linear's us / the variant's us (the goal: >= 1.20); errors are max abs vs F.linear's output "
          "(FAIL above 1e-4 x max |out|) and vs a float64 F.linear")
    start = time.time()
    totals = []
    for shape, M, N, K in shapes:
        totals.append((shape, *run_shape(shape, M, N, K)))
    print("\n=== summary")
    best_sum = cublas_sum = tuned_sum = 0.0
    for shape, cublas, tuned, best in totals:
        print(f"{shape:9s} F.linear {cublas:8.2f} us   fastcomp's cuBLASLt {tuned:8.2f} us   best "
              f"{best[1] if best else float('nan'):8.2f} us ({best[0] if best else 'none'})")
        cublas_sum += cublas
        tuned_sum += tuned
        best_sum += best[1] if best else float("nan")
    print(f"sum of best times {best_sum:.2f} us vs sum of F.linear times {cublas_sum:.2f} us: "
          f"{cublas_sum / best_sum:.2f}x, vs fastcomp's tuned cuBLASLt {tuned_sum:.2f} us: {tuned_sum / best_sum:.2f}x "
          f"({time.time() - start:.0f} s)")


if __name__ == "__main__":
    main()
