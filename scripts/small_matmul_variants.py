"""The small-matmul kernel's launch choices (rows a block R, elements a load V, warps splitting K), each timed on
a few F.linear shapes against torch's F.linear (cuBLAS), all as CUDA-graph replays of 100 calls so that launch
costs drop out: the data behind csrc/codegen/emit_small_matmul.cpp's choice. The kernel is the emitter's, written
out with those three as parameters (f32, contiguous rows, a bias). Run on a GPU machine with CuPy:

    python scripts/small_matmul_variants.py
"""
import cupy
import torch

from gpu_timing import graph_us

T = r'''
template <int N, typename T> struct alignas(sizeof(T) * N) vec_t { T v[N]; };
extern "C" __global__ void __launch_bounds__(@WARPS@ * 32) k(const float* __restrict__ A, const float* __restrict__ W, const float* __restrict__ bias, float* __restrict__ D) {
  constexpr int R = @RR@, V = @VV@, M = @MM@, N = @NN@, K = @KK@, SLICE = @SL@, CB = (N + 31) / 32;
  __shared__ float partial[@WARPS@][R][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n = (blockIdx.x % CB) * 32 + lane, m0 = (blockIdx.x / CB) * R;
  const float* __restrict__ w = W + (long long)(n < N ? n : N - 1) * K;
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.f;
  const int kb = warp * SLICE, ke = (warp + 1) * SLICE < K ? (warp + 1) * SLICE : K;
#pragma unroll @UNR@
  for (int k = kb; k < ke; k += V) {
    const vec_t<V, float> wv = *reinterpret_cast<const vec_t<V, float>*>(w + k);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int m = m0 + r < M ? m0 + r : M - 1;
      const vec_t<V, float> av = *reinterpret_cast<const vec_t<V, float>*>(A + (long long)m * K + k);
#pragma unroll
      for (int v = 0; v < V; ++v) acc[r] = fmaf(av.v[v], wv.v[v], acc[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) partial[warp][r][lane] = acc[r];
  __syncthreads();
  for (int i = threadIdx.x; i < R * 32; i += @WARPS@ * 32) {
    const int r = i / 32, c = i % 32, m = m0 + r, col = n - lane + c;
    float s = 0.f;
#pragma unroll
    for (int q = 0; q < @WARPS@; ++q) s += partial[q][r][c];
    if (m < M && col < N) D[(long long)m * N + col] = s + bias[col];
  }
}
'''


def ceil_div(a, b):
    return -(-a // b)


def variant_us(M, N, K, R, V, warps, unroll=2):
    """(µs per call, relative error against float64, blocks) of the kernel with R rows a block, V floats a load and
    `warps` warps splitting K (each a slice of a whole number of loads)."""
    fields = dict(RR=R, VV=V, MM=M, NN=N, KK=K, SL=ceil_div(ceil_div(K, warps), V) * V, WARPS=warps, UNR=unroll)
    source = T
    for marker, value in fields.items():
        source = source.replace(f"@{marker}@", str(value))
    kernel = cupy.RawKernel(source, "k", options=("-std=c++17",))
    A, W, b = torch.randn(M, K, device="cuda"), torch.randn(N, K, device="cuda"), torch.randn(N, device="cuda")
    D = torch.empty(M, N, device="cuda")
    grid = ceil_div(N, 32) * ceil_div(M, R)
    args = tuple(cupy.from_dlpack(t) for t in (A, W, b, D))

    def launch():  # on torch's stream, so that torch's graph capture records it
        with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            kernel((grid,), (warps * 32,), args)

    launch()
    torch.cuda.synchronize()
    ref = torch.nn.functional.linear(A.double(), W.double(), b.double())
    return graph_us(launch), ((D.double() - ref).norm() / ref.norm()).item(), grid


def cublas_us(M, N, K):
    A, W, b = torch.randn(M, K, device="cuda"), torch.randn(N, K, device="cuda"), torch.randn(N, device="cuda")
    return graph_us(lambda: torch.nn.functional.linear(A, W, b))


def main():
    for M, N, K in [(32, 1024, 512), (32, 512, 1024), (1, 4096, 1024), (8, 2048, 2048)]:
        print(f"--- {M}x{N}x{K}: cuBLAS (torch F.linear, graph-replayed) {cublas_us(M, N, K):.2f} us")
        for R, V, warps in [(4, 4, 8), (8, 4, 8), (8, 8, 8), (8, 8, 16), (16, 8, 8), (32, 4, 8), (32, 8, 16),
                            (4, 8, 16)]:
            if R > max(M, 4):  # rows past M only repeat the last one
                continue
            try:
                us, err, grid = variant_us(M, N, K, R, V, warps)
                print(f"R={R:2d} V={V} warps={warps:2d} grid={grid:4d}: {us:6.2f} us (err {err:.1e})")
            except Exception as e:  # e.g. too much shared memory for 32 rows and 16 warps
                print(f"R={R:2d} V={V} warps={warps:2d}: failed: {str(e)[:200]}")


if __name__ == "__main__":
    main()
