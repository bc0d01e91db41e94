"""The small-matmul kernel's launch choices (rows a block R, elements a load V, warps splitting K), each timed on
a few F.linear shapes against torch's F.linear (cuBLAS), all as CUDA-graph replays of 100 calls so that launch
costs drop out: the data behind csrc/codegen/emit_small_matmul.cpp's choice. The kernel is the emitter's, written
out with those three as parameters (f32, contiguous rows, a bias). Run on a GPU machine with CuPy:

    python scripts/small_matmul_variants.py
"""
import cupy
import torch

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
def run(M, N, K, R, V, WARPS, UNR=2):
    sl = -(-(-(-K // WARPS)) // V) * V
    src = T
    for a, b in dict(RR=R, VV=V, MM=M, NN=N, KK=K, SL=sl, WARPS=WARPS, UNR=UNR).items(): src = src.replace('@' + a + '@', str(b))
    kern = cupy.RawKernel(src, "k", options=("-std=c++17",))
    A = torch.randn(M, K, device="cuda"); W = torch.randn(N, K, device="cuda"); b = torch.randn(N, device="cuda")
    D = torch.empty(M, N, device="cuda")
    grid = (-(-N // 32)) * (-(-M // R))
    a_, w_, b_, d_ = (cupy.from_dlpack(t) for t in (A, W, b, D))
    def launch():
        with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            kern((grid,), (WARPS * 32,), (a_, w_, b_, d_))
    launch(); torch.cuda.synchronize()
    err = ((D.double() - torch.nn.functional.linear(A.double(), W.double(), b.double())).norm() / D.double().norm()).item()
    best = graph_us(launch)
    return best, err, grid
def torch_us(M, N, K):
    A = torch.randn(M, K, device="cuda"); W = torch.randn(N, K, device="cuda"); b = torch.randn(N, device="cuda")
    return graph_us(lambda: torch.nn.functional.linear(A, W, b))
def graph_us(fn):
    for _ in range(3): fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(100): fn()
    best = 1e9
    for _ in range(5):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); g.replay(); e.record(); torch.cuda.synchronize(); best = min(best, s.elapsed_time(e) * 10)
    return best
for (M, N, K) in [(32, 1024, 512), (32, 512, 1024), (1, 4096, 1024), (8, 2048, 2048)]:
    print(f"--- {M}x{N}x{K}: cuBLAS (torch F.linear, graph-replayed) {torch_us(M, N, K):.2f} us")
    for R, V, WARPS in [(4, 4, 8), (8, 4, 8), (8, 8, 8), (8, 8, 16), (16, 8, 8), (32, 4, 8), (32, 8, 16), (4, 8, 16)]:
        if R > M and R != 4: continue
        try:
            us, err, grid = run(M, N, K, R, V, WARPS)
            print(f"R={R:2d} V={V} warps={WARPS:2d} grid={grid:4d}: {us:6.2f} us (err {err:.1e})")
        except Exception as ex:
            print(R, V, WARPS, "failed", str(ex)[:200])
