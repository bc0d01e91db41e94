// Small-matmul kernels (kernel_ir.h, Kernel::Kind::SmallMatmul): D = A @ W^T (+ bias) for at most 32 rows of A,
// F.linear at a small batch. cuBLAS's kernels are tiled for large products; on W5's [32, 512] x [1024, 512]^T
// (17 M multiply-adds) the best of cuBLASLt's candidates takes ~12 us on an H100, its whole weight read once in
// ~1 us. Here each warp takes one or two output columns: its lanes walk K (16-byte loads of W's rows and of A's,
// which every warp reads and L1 keeps), each lane keeps a running sum per row and column in registers, and at the
// end one halving exchange across the warp (31 shuffles for 32 rows, not 32 x 5) leaves lane l with row
// l / (32 / MP)'s sum. Lowering (lower_matmul.cpp) picks these kernels only for products that small.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>

#include "codegen/emit_internal.h"
#include "codegen/expr_emitter.h"

namespace fastcomp::codegen::detail {
namespace {

// The kernel, with ${...} fields filled in by emit_small_matmul.
constexpr const char* kSmallMatmulKernel = R"cuda(// ${name}: small matmul over [M, N, K] = [${shape}]: D = A @ W^T${bias_text}, ${cols} column(s) a warp, ${warps} warp(s) a block, lanes along K ${vec} elements at a time
// Lane l's share of each of v's MP sums over the warp: halving the values at each exchange leaves lane l with the
// whole sum of value l / (32 / MP).
template <int MP>
__device__ __forceinline__ float ${name}_sum(float (&v)[MP], int lane) {
#pragma unroll
  for (int half = MP / 2, bit = 16; half >= 1; half /= 2, bit /= 2) {
    const bool upper = (lane & bit) != 0;
#pragma unroll
    for (int i = 0; i < half; ++i) {
      const float send = upper ? v[i] : v[i + half];
      v[i] = (upper ? v[i + half] : v[i]) + __shfl_xor_sync(0xffffffffu, send, bit);
    }
  }
  float s = v[0];
#pragma unroll
  for (int bit = 16 / MP; bit >= 1; bit /= 2) s += __shfl_xor_sync(0xffffffffu, s, bit);
  return s;
}

template <bool kVector>
__device__ __forceinline__ void ${name}_cols(${params}) {
  constexpr int M = ${M}, MP = ${MP}, C = ${cols}, V = ${vec};
  constexpr int64_t N = ${N}, K = ${K};
  const int lane = threadIdx.x & 31;
  const int64_t n0 = (int64_t(blockIdx.x) * ${warps} + (threadIdx.x >> 5)) * C;
  if (n0 >= N) return;
  const ${elem}* __restrict__ a = in0 + ${a_offset};
  const ${elem}* __restrict__ w = in1 + ${w_offset};
  float acc[C][MP];
#pragma unroll
  for (int c = 0; c < C; ++c)
#pragma unroll
    for (int m = 0; m < MP; ++m) acc[c][m] = 0.0f;
  for (int64_t k = lane * V; k < K; k += 32 * V) {
    ${elem} wv[C][V];
#pragma unroll
    for (int c = 0; c < C; ++c)  // a column past N reads column N - 1 and is never stored
      fc_load<V, kVector>(w + (n0 + c < N ? n0 + c : N - 1) * ${w_n} + k, wv[c]);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      ${elem} av[V];
      fc_load<V, kVector>(a + m * ${a_m} + k, av);
#pragma unroll
      for (int v = 0; v < V; ++v) {
        const float x = ${a_value};
#pragma unroll
        for (int c = 0; c < C; ++c) acc[c][m] = fmaf(x, ${w_value}, acc[c][m]);
      }
    }
  }
  const int m = lane / (32 / MP);
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const float sum = ${name}_sum<MP>(acc[c], lane);
    const int64_t n = n0 + c;
    if (lane % (32 / MP) == 0 && m < M && n < N) out0[${d_offset} + m * ${d_m} + n * ${d_n}] = ${d_value};
  }
}

extern "C" __global__ void __launch_bounds__(${block}) ${name}(${params}) {
  ${name}_cols<${vector}>(${args});
}
)cuda";

int64_t next_power_of_two(int64_t x) {
  int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

}  // namespace

KernelSource emit_small_matmul(const Kernel& k, const DeviceLimits& limits) {
  const ValueType vt{k.inputs[0].dtype};
  const int64_t M = k.shape[0].hint(), N = k.shape[1].hint(), K = k.shape[2].hint();
  const Operand &a = k.inputs[0], &w = k.inputs[1], &d = k.outputs[0];
  const bool has_bias = k.inputs.size() == 3;
  const int64_t a_m = a.strides[0].hint(), w_n = w.strides[1].hint();
  // Elements per load: the widest access of at most 16 bytes that every row of A and W starts aligned for (the
  // executable checks each operand's first element before it runs the vector program).
  int vec = 16 / dtype_size(vt.t);
  while (vec > 1 && (K % vec != 0 || (M > 1 && a_m % vec != 0) || (N > 1 && w_n % vec != 0))) vec /= 2;
  // Two columns a warp halve the reads of A (each load feeds two sums) where the GPU still gets a warp per SM or
  // more; blocks of up to 8 warps, as few as spread the warps over every SM.
  const int cols = ceil_div(N, 2) >= limits.sm_count ? 2 : 1;
  const int64_t warps_needed = ceil_div(N, cols);
  const int warps = static_cast<int>(std::clamp<int64_t>(ceil_div(warps_needed, limits.sm_count), 1, 8));
  KernelSource src = source_for(k, warps * 32, ceil_div(warps_needed, warps));
  if (vec > 1) {
    add_vector_operand(src, k, 0, vec);
    add_vector_operand(src, k, 1, vec);
  }
  std::string bias_text, d_value = "sum";
  if (has_bias) {
    const Operand& b = k.inputs[2];
    bias_text = " + bias";
    d_value = fmt::format("sum + {}", vt.to_float(fmt::format("in2[{} + n * {}]", b.storage_offset.hint(),
                                                              b.strides[1].hint())));
  }
  const std::pair<const char*, std::string> fields[] = {
      {"${name}", k.name},
      {"${shape}", join(k.shape)},
      {"${bias_text}", bias_text},
      {"${cols}", std::to_string(cols)},
      {"${warps}", std::to_string(warps)},
      {"${vec}", std::to_string(vec)},
      // Without vector operands the program may not declare kVectorAccess.
      {"${vector}", vec > 1 ? "kVectorAccess" : "false"},
      {"${params}", kernel_params(k)},
      {"${args}", kernel_args(k)},
      {"${block}", std::to_string(src.block)},
      {"${M}", std::to_string(M)},
      {"${MP}", std::to_string(next_power_of_two(M))},
      {"${N}", std::to_string(N)},
      {"${K}", std::to_string(K)},
      {"${elem}", dtype_c_type(vt.t)},
      {"${a_offset}", std::to_string(a.storage_offset.hint())},
      {"${w_offset}", std::to_string(w.storage_offset.hint())},
      {"${a_m}", std::to_string(a_m)},
      {"${w_n}", std::to_string(w_n)},
      {"${a_value}", vt.to_float("av[v]")},
      {"${w_value}", vt.to_float("wv[c][v]")},
      {"${d_offset}", std::to_string(d.storage_offset.hint())},
      {"${d_m}", std::to_string(d.strides[0].hint())},
      {"${d_n}", std::to_string(d.strides[1].hint())},
      {"${d_value}", vt.from_float(d_value)},
  };
  src.code = kSmallMatmulKernel;
  for (const auto& [marker, value] : fields) replace_all(src.code, marker, value);
  return src;
}

}  // namespace fastcomp::codegen::detail
