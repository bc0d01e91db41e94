// Attention kernels (kernel_ir.h, Kernel::Kind::Attention): o = softmax(scale * q @ k^T) @ v per head, for heads
// whose keys and values fit in shared memory. Lowering uses them (with fastcomp.config.fused_attention) for
// nn.MultiheadAttention's heads, which it would otherwise run as a kernel splitting and scaling the heads, a
// batched GEMM for the scores, a softmax kernel and a batched GEMM for the values (four launches and three
// round trips through memory for a few MFLOP a head: W10 has T=32, D=64, 16 heads), and for
// F.scaled_dot_product_attention without a mask tensor (otherwise a call into torch).
//
// One block of 8 warps takes one head and a run of its query rows: it copies the head's keys and values into
// shared memory once (keys padded to D + 1 columns, so the 32 lanes reading 32 keys at one column hit 32 banks),
// then each warp takes a query row at a time: the scaled row in shared memory, lane j's scores for keys j,
// j + 32, ... (up to the row's own position under a causal mask), the row's max and sum by warp shuffles, the
// probabilities, then lane d's outputs for columns d, d + 32, ... with each probability broadcast by a shuffle.
// The scores never leave registers.
//
// Under dynamic shapes the batch B may be a symbol (H, T and D stay constants: they size the shared arrays and
// loops); then the grid, and the strides and offsets that depend on B, are size parameters of the kernel.
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "codegen/emit_internal.h"
#include "codegen/expr_emitter.h"
#include "codegen/layout.h"

namespace fastcomp::codegen::detail {
namespace {

constexpr int kWarps = 8;  // warps per block; each takes every 8th query row of the block's run
// A symbolic batch launches exactly B * H * row_blocks blocks per call (kernel_ir.h's grid_items); this is the
// "most blocks" that clamps it, CUDA's limit on gridDim.x, so no block is ever dropped.
constexpr int64_t kMaxGridX = 2147483647;

// The kernel, with ${...} fields filled in by emit_attention. Unrolled: the K/V copy by 2 (four loads in flight
// a thread), the scores' dot products by 4, the probabilities' loop not at all: NVRTC's time for this kernel
// grows fast with unrolling (W7's: 74 ms over an empty program with the compiler's own choices, 41 ms with
// these, on a 2-core Xeon), and cold starts pay it.
constexpr const char* kAttentionKernel = R"cuda(// ${name}: ${causal}attention over [B, H, T, D] = [${shape}]: softmax(q k^T) v per head, one block per head and ${rows} query rows (${row_blocks} a head), keys and values in shared memory (${shared_bytes} bytes)
extern "C" __global__ void __launch_bounds__(${block}) ${name}(${params}) {
  constexpr int T = ${T}, D = ${D}, kRows = ${rows};
  __shared__ float ks[T][D + 1];
  __shared__ float vs[T][D];
  __shared__ float qs[${warps}][D];
${grid_guard}  const int64_t head = blockIdx.x / ${row_blocks}, b = head / ${H}, h = head % ${H};
  const int t0 = (blockIdx.x % ${row_blocks}) * kRows, t_end = min(t0 + kRows, T);
  const ${elem}* __restrict__ q = in0 + (${q_base});
  const ${elem}* __restrict__ k = in1 + (${k_base});
  const ${elem}* __restrict__ v = in2 + (${v_base});
  ${elem}* __restrict__ o = out0 + (${o_base});
#pragma unroll 2
  for (int i = threadIdx.x; i < T * D; i += ${block}) {
    const int t = i / D, d = i % D;
    ks[t][d] = ${k_elem};
    vs[t][d] = ${v_elem};
  }
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int t = t0 + warp; t < t_end; t += ${warps}) {
    for (int d = lane; d < D; d += 32) qs[warp][d] = ${q_scaled};
    const int keys = ${keys};
    __syncwarp();
    float s[${key_chunks}];
    float m = __int_as_float(0xff800000);
#pragma unroll
    for (int c = 0; c < ${key_chunks}; ++c) {
      const int j = c * 32 + lane;
      float acc = 0.0f;
      if (j < keys) {
#pragma unroll 4
        for (int d = 0; d < D; ++d) acc = fmaf(qs[warp][d], ks[j][d], acc);
${round_scores}        m = fc_max(m, acc);
      }
      s[c] = acc;
    }
    m = fc_warp_reduce(m, fc_max_op());
    float l = 0.0f;
#pragma unroll
    for (int c = 0; c < ${key_chunks}; ++c) {
      s[c] = c * 32 + lane < keys ? expf(s[c] - m) : 0.0f;
      l += s[c];
    }
    l = fc_warp_reduce(l, fc_sum_op());
    float acc[${column_chunks}];
#pragma unroll
    for (int i = 0; i < ${column_chunks}; ++i) acc[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < ${key_chunks}; ++c) {
      const float p_lane = ${p_lane};  // softmax's output, rounded as torch's is, before the product
#pragma unroll 1
      for (int jj = 0; jj < 32 && c * 32 + jj < keys; ++jj) {  // the same bound in every lane
        const float p = __shfl_sync(0xffffffffu, p_lane, jj);
#pragma unroll
        for (int i = 0; i < ${column_chunks}; ++i)
          if (lane + 32 * i < D) acc[i] = fmaf(p, vs[c * 32 + jj][lane + 32 * i], acc[i]);
      }
    }
#pragma unroll
    for (int i = 0; i < ${column_chunks}; ++i)
      if (lane + 32 * i < D) o[int64_t(t) * ${o_t_stride} + int64_t(lane + 32 * i) * ${o_d_stride}] = ${o_value};
    __syncwarp();  // the next row overwrites qs[warp]
  }
}
)cuda";

// (element offset of the head's (0, 0) element as C++ text over `b` and `h`, its t stride, its d stride): literals,
// or size parameters where they depend on a symbolic batch.
struct HeadLayout {
  std::string base, t_stride, d_stride;
};
HeadLayout head_layout(const Operand& o, SizeParams& params) {
  return {fmt::format("{} + b * {} + h * {}", params.text(o.storage_offset), params.text(o.strides[0]),
                      params.text(o.strides[1])),
          params.text(o.strides[2]), params.text(o.strides[3])};
}

}  // namespace

KernelSource emit_attention(const Kernel& k, const DeviceLimits& limits) {
  const ValueType vt{k.inputs[0].dtype};
  const bool every_step = k.attention_rounding == Kernel::AttentionRounding::EveryStep;
  // The keys a query row sees: all T, or with a causal mask those up to its own position.
  const char* keys = k.attention_causal ? "t + 1" : "T";
  const Size& B = k.shape[0];
  const int64_t H = k.shape[1].hint(), T = k.shape[2].hint(), D = k.shape[3].hint();
  // Blocks for about two waves of the GPU (at the trace-time batch when it is a symbol): small batches split each
  // head's queries over several blocks (each copies the head's keys and values again, from L2), large ones take
  // a head a block.
  int64_t row_blocks = std::clamp<int64_t>(ceil_div(2 * limits.sm_count, std::max<int64_t>(B.hint() * H, 1)), 1,
                                           ceil_div(T, kWarps));
  const int64_t rows = ceil_div(T, row_blocks);
  row_blocks = ceil_div(T, rows);
  const Size blocks = B * Size(H * row_blocks);
  KernelSource src = source_for(k, kWarps * 32, B.is_static() ? std::max<int64_t>(blocks.hint(), 1) : kMaxGridX);
  if (!B.is_static()) src.grid_items = blocks.sym();
  const int64_t key_chunks = ceil_div(T, 32), column_chunks = ceil_div(D, 32);
  SizeParams params;
  const HeadLayout q = head_layout(k.inputs[0], params), key = head_layout(k.inputs[1], params),
                   v = head_layout(k.inputs[2], params), o = head_layout(k.outputs[0], params);

  // torch scales q before the product (F.multi_head_attention_forward's q * D^-1/2, rounded).
  const std::string scaled_q = fmt::format(
      "{} * {}", vt.to_float(fmt::format("q[int64_t(t) * {} + int64_t(d) * {}]", q.t_stride, q.d_stride)),
      literal(DType::F32, k.attention_scale));
  src.code = fill_template(kAttentionKernel, {
      {"${name}", k.name},
      // A symbolic batch's grid is at least one block, even for B = 0.
      {"${grid_guard}", B.is_static() ? std::string()
                                      : fmt::format("  if (blockIdx.x >= {}) return;\n", params.text(blocks))},
      {"${causal}", k.attention_causal ? "causal " : ""},
      {"${shape}", join(k.shape)},
      {"${shared_bytes}", std::to_string(attention_shared_bytes(T, D))},
      {"${block}", std::to_string(src.block)},
      {"${params}", kernel_params(k)},
      {"${T}", std::to_string(T)},
      {"${D}", std::to_string(D)},
      {"${H}", std::to_string(H)},
      {"${rows}", std::to_string(rows)},
      {"${row_blocks}", std::to_string(row_blocks)},
      {"${warps}", std::to_string(kWarps)},
      {"${elem}", dtype_c_type(vt.t)},
      {"${q_base}", q.base},
      {"${k_base}", key.base},
      {"${v_base}", v.base},
      {"${o_base}", o.base},
      {"${k_elem}", vt.to_float(fmt::format("k[int64_t(t) * {} + int64_t(d) * {}]", key.t_stride, key.d_stride))},
      {"${v_elem}", vt.to_float(fmt::format("v[int64_t(t) * {} + int64_t(d) * {}]", v.t_stride, v.d_stride))},
      {"${q_scaled}", every_step ? vt.round(scaled_q) : scaled_q},
      {"${keys}", keys},
      {"${key_chunks}", std::to_string(key_chunks)},
      {"${column_chunks}", std::to_string(column_chunks)},
      {"${round_scores}", vt.t != DType::F32 && every_step
                              ? fmt::format("        acc = {};  // the scores GEMM's output\n", vt.round("acc"))
                              : std::string()},
      {"${p_lane}", vt.round("s[c] / l")},
      {"${o_t_stride}", o.t_stride},
      {"${o_d_stride}", o.d_stride},
      {"${o_value}", vt.from_float("acc[i]")},
  });
  src.size_params = params.exprs();
  return src;
}

}  // namespace fastcomp::codegen::detail

namespace fastcomp::codegen {

int64_t attention_shared_bytes(int64_t t, int64_t d) {
  return (t * (2 * d + 1) + detail::kWarps * d) * int64_t{sizeof(float)};
}

}  // namespace fastcomp::codegen
