// Small-matmul kernels (kernel_ir.h, Kernel::Kind::SmallMatmul): D = A @ W^T (+ bias) for at most 32 rows of A,
// F.linear at a small batch. There cuBLASLt's calls cost the host more than the GPU: W5's two products are four
// launches (a GEMM and a split-K reduction each, 8.7 and 11.6 us of GPU time on an H100), one kernel each here
// (6.6 and 8.8 us), and a process that only runs these never initialises cuBLASLt (~100 ms at its first use).
// Lowering uses them outside CUDA graphs only: replayed, cuBLASLt's host cost is gone (backend.cpp).
//
// A block takes 32 output columns (a lane each) and R rows (R registers of running sums a lane), and its warps
// split K into slices. Each step a lane reads V consecutive elements of its column's weight row (32 bytes, a whole
// sector) and the same V elements of each of the R rows of A, which are the same address in every lane (one
// broadcast load a row), then adds R * V products. At the end the warps' partial sums meet in shared memory and
// each thread adds the slices of one (row, column) in a fixed order (the result does not depend on timing), adds
// the bias and stores it: consecutive lanes, consecutive columns. Nothing crosses lanes, and the loop body is
// R * V multiply-adds, so NVRTC compiles it quickly (cold starts pay that time).
#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "codegen/emit_internal.h"
#include "codegen/expr_emitter.h"

namespace fastcomp::codegen::detail {
namespace {

// The kernel, with ${...} fields filled in by emit_small_matmul.
constexpr const char* kSmallMatmulKernel = R"cuda(// ${name}: small matmul over [M, N, K] = [${shape}]: D = A @ W^T${bias_text}, a block per 32 columns and ${rows} row(s), ${warps} warps splitting K, ${vec} element(s) a load
template <bool kVector>
__device__ __forceinline__ void ${name}_tile(${params}) {
  constexpr int R = ${rows}, V = ${vec};
  constexpr int64_t M = ${M}, N = ${N}, K = ${K}, kSlice = ${slice};
  __shared__ float partial[${warps}][R][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t n = int64_t(blockIdx.x % ${column_blocks}) * 32 + lane, m0 = int64_t(blockIdx.x / ${column_blocks}) * R;
  // Columns past N and rows past M read the last ones and are never stored.
  const ${elem}* __restrict__ w = in1 + ${w_offset} + (n < N ? n : N - 1) * ${w_n};
  const ${elem}* __restrict__ a[R];
#pragma unroll
  for (int r = 0; r < R; ++r) a[r] = in0 + ${a_offset} + (m0 + r < M ? m0 + r : M - 1) * ${a_m};
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  const int64_t k_end = (warp + 1) * kSlice < K ? (warp + 1) * kSlice : K;
#pragma unroll 1  // one step at a time: unrolling doubled NVRTC's time for this kernel (cold starts pay it)
  for (int64_t k = warp * kSlice; k < k_end; k += V) {
    ${elem} wv[V];
    fc_load<V, kVector>(w + k, wv);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      ${elem} av[V];
      fc_load<V, kVector>(a[r] + k, av);
#pragma unroll
      for (int v = 0; v < V; ++v) acc[r] = fmaf(${a_value}, ${w_value}, acc[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) partial[warp][r][lane] = acc[r];
  __syncthreads();
  for (int i = threadIdx.x; i < R * 32; i += ${warps} * 32) {
    const int r = i / 32, c = i % 32;
    const int64_t m = m0 + r, col = n - lane + c;
    float sum = 0.0f;
#pragma unroll
    for (int s = 0; s < ${warps}; ++s) sum += partial[s][r][c];
    if (m < M && col < N) out0[${d_offset} + m * ${d_m} + col * ${d_n}] = ${d_value};
  }
}

extern "C" __global__ void __launch_bounds__(${block}) ${name}(${params}) {
  ${name}_tile<${vector}>(${args});
}
)cuda";

}  // namespace

KernelSource emit_small_matmul(const Kernel& k, const DeviceLimits& limits) {
  const ValueType vt{k.inputs[0].dtype};
  const int64_t M = k.shape[0].hint(), N = k.shape[1].hint(), K = k.shape[2].hint();
  const Operand &a = k.inputs[0], &w = k.inputs[1], &d = k.outputs[0];
  const bool has_bias = k.inputs.size() == 3;
  const int64_t a_m = a.strides[0].hint(), w_n = w.strides[1].hint();
  // Elements per load: 32 bytes (a whole sector of the weight row a lane reads; two 16-byte accesses), or the
  // widest access that every row of A and W starts aligned for (the executable checks each operand's first element
  // before it runs the vector program).
  int vec = 32 / dtype_size(vt.t);
  while (vec > 1 && (K % vec != 0 || (M > 1 && a_m % vec != 0) || (N > 1 && w_n % vec != 0))) vec /= 2;
  // Rows a block: 8 (each row group reads the whole weight again, from L2) while that keeps about a block per SM
  // (3/4 of them or more), else fewer rows and twice the warps, each with a shorter slice of K. Measured on an
  // H100 (scripts/small_matmul_variants.py): W5's [32, 512] @ [512, 1024] 6.6 us with 8 rows and 8 warps (8.4
  // with 4 and 16; cuBLAS 8.7), its [32, 1024] @ [1024, 512] 8.8 us with 4 rows and 16 warps (11.1 with 8 and 8;
  // cuBLAS 11.6).
  const int64_t column_blocks = ceil_div(N, 32);
  auto enough = [&](int64_t rows) { return 4 * column_blocks * ceil_div(M, rows) >= 3 * limits.sm_count; };
  int rows = 8;
  while (rows > 1 && !enough(rows)) rows /= 2;
  const int warps = rows == 8 ? 8 : 16;
  rows = static_cast<int>(std::min<int64_t>(rows, M));
  // Each warp's slice of K, a whole number of loads.
  const int64_t slice = ceil_div(ceil_div(K, warps), vec) * vec;
  KernelSource src = source_for(k, warps * 32, column_blocks * ceil_div(M, rows));
  if (vec > 1) {
    add_vector_operand(src, k, 0, vec);
    add_vector_operand(src, k, 1, vec);
  }
  std::string bias_text, d_value = "sum";
  if (has_bias) {
    const Operand& b = k.inputs[2];
    bias_text = " + bias";
    d_value = fmt::format("sum + {}", vt.to_float(fmt::format("in2[{} + col * {}]", b.storage_offset.hint(),
                                                              b.strides[1].hint())));
  }
  src.code = fill_template(kSmallMatmulKernel, {
      {"${name}", k.name},
      {"${shape}", join(k.shape)},
      {"${bias_text}", bias_text},
      {"${rows}", std::to_string(rows)},
      {"${warps}", std::to_string(warps)},
      {"${block}", std::to_string(src.block)},
      {"${vec}", std::to_string(vec)},
      // Without vector operands the program may not declare kVectorAccess.
      {"${vector}", vec > 1 ? "kVectorAccess" : "false"},
      {"${params}", kernel_params(k)},
      {"${args}", kernel_args(k)},
      {"${M}", std::to_string(M)},
      {"${N}", std::to_string(N)},
      {"${K}", std::to_string(K)},
      {"${slice}", std::to_string(slice)},
      {"${column_blocks}", std::to_string(column_blocks)},
      {"${elem}", dtype_c_type(vt.t)},
      {"${a_offset}", std::to_string(a.storage_offset.hint())},
      {"${w_offset}", std::to_string(w.storage_offset.hint())},
      {"${a_m}", std::to_string(a_m)},
      {"${w_n}", std::to_string(w_n)},
      {"${a_value}", vt.to_float("av[v]")},
      {"${w_value}", vt.to_float("wv[v]")},
      {"${d_offset}", std::to_string(d.storage_offset.hint())},
      {"${d_m}", std::to_string(d.strides[0].hint())},
      {"${d_n}", std::to_string(d.strides[1].hint())},
      {"${d_value}", vt.from_float(d_value)},
  });
  return src;
}

}  // namespace fastcomp::codegen::detail
