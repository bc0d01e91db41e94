// Attention kernels (kernel_ir.h, Kernel::Kind::Attention): o = softmax(scale * q @ k^T + mask) @ v per head, for
// heads whose keys and values fit in shared memory. Lowering uses them (with fastcomp.config.fused_attention) for
// nn.MultiheadAttention's heads, which it would otherwise run as a kernel splitting and scaling the heads, a
// batched GEMM for the scores, a softmax kernel and a batched GEMM for the values (four launches and three
// round trips through memory for a few MFLOP a head: W10 has T=32, D=64, 16 heads), and for
// F.scaled_dot_product_attention, where torch would run its flash or memory-efficient kernel (converting a bool
// mask to an additive one first: three more launches), or with a mask its math path (two batched GEMMs and six
// elementwise kernels a call, BERT's attention on an H100).
//
// One block of 8 warps takes one head and a run of R query rows (a multiple of 8): it copies the head's S keys and
// values and its R scaled query rows into shared memory (keys padded to D + 1 columns, so 32 lanes reading 32
// keys at one column hit 32 banks; 4 elements a load where the layout allows), then warp w takes rows w, w + 8,
// ... all at once: lane j's scores for keys j, j + 32, ... of every such row (each key column read once for all
// of the warp's rows, the query entries 2 at a time as one broadcast), the mask's entries added (or its left-out
// keys dropped), the rows' max and sum by warp shuffles, the probabilities written over the warp's own query
// rows, then lane d's outputs for columns d, d + 32, ... with the probabilities read 4 at a time as broadcasts.
// Register tiles of rows x keys and rows x columns are what keep the shared-memory traffic per multiply-add low:
// one row a warp at a time left W7's kernel waiting on shared memory (20.8 us on an H100). Shared memory is
// dynamic (kernel_ir.h's attention_shared_limit: 128 keys of 64 f32 columns take 74 KB, ViT's 197 take 106 KB).
//
// Each score and output is the same fmaf chain in the same order as one query row at a time would compute
// (over d, then over keys), so the rows a warp shares change no result.
//
// Under dynamic shapes the batch B may be a symbol (H, T, S and D stay constants: they size the shared arrays
// and loops); then the grid, and the strides and offsets that depend on B, are size parameters of the kernel.
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "codegen/emit_internal.h"
#include "codegen/expr_emitter.h"
#include "codegen/layout.h"

namespace fastcomp::codegen::detail {
namespace {

constexpr int kWarps = 8;  // warps per block; warp w takes the block's rows w, w + 8, ...
// At most this many rows a warp: the softmax and both products unroll rows x keys (or columns), and NVRTC's time
// grows with them while cold starts wait for it. A 128-key head with a mask took NVRTC 249 ms at 6 rows a warp,
// 205 at 4, 179 at 3 (one thread of a 2-core Xeon); side by side with a graph's other programs on a 16-core
// H100 host, 6 rows took 420-560 ms, the longest part of BERT's and T5's cold start at batch 8. 4 keeps W7's
// launch shape (2 blocks a head).
constexpr int64_t kMaxRowsPerWarp = 4;
// A symbolic batch launches exactly B * H * row_blocks blocks per call (kernel_ir.h's grid_items); this is the
// "most blocks" that clamps it, CUDA's limit on gridDim.x, so no block is ever dropped.
constexpr int64_t kMaxGridX = 2147483647;

// The width of a shared row that holds a query row (D entries), then that row's probabilities (S entries): a
// multiple of 4 so that every row starts 16-byte aligned for the 4-entry broadcast reads.
int64_t shared_row_width(int64_t s, int64_t d) { return (std::max(s, d) + 3) / 4 * 4; }

int64_t shared_bytes(int64_t rows, int64_t s, int64_t d) {
  return (rows * shared_row_width(s, d) + s * (2 * d + 1)) * int64_t{sizeof(float)};
}

// The kernel, with ${...} fields filled in by emit_attention. NVRTC's time for this kernel grows fast with
// unrolling, and cold starts pay it, so only the scalar copy loop is unrolled (by 4, for loads in flight): the
// 4-element copy loop unrolled by 4 cost W7's program ~20 ms of NVVM and ptxas time for 0.3 us a call (H200),
// and the two product loops' bodies already hold RW x KC x DS and RW x DC x JS multiply-adds. The scores' loop
// takes 2 query columns a step, not 4: at 6 rows a warp (GPT-2 and BERT at batch 8) that cut the kernel's NVRTC
// time from ~390 to ~300 ms on an H200 host, which bounded those models' cold start, and its GPU time moved
// within +-3% (37 us a call). (Two rows a warp instead of W7's four would save as much again, for 2 us a call.)
constexpr const char* kAttentionKernel = R"cuda(// ${name}: ${causal}attention over [B, H, T, D] = [${shape}]${keys_note}: softmax(q k^T${mask_note}) v per head, a block per head and ${rows} query rows (${row_blocks} a head), ${rows_per_warp} a warp; q rows, keys and values in shared memory (${shared_bytes} bytes)
template <bool kVector>
__device__ __forceinline__ void ${name}_head(${params}) {
  constexpr int T = ${T}, S = ${S}, D = ${D}, R = ${rows}, RW = ${rows_per_warp}, W = ${row_width};
  constexpr int KC = (S + 31) / 32, DC = (D + 31) / 32;  // keys, columns a lane
  constexpr int DS = D % 2 == 0 ? 2 : 1, JS = S % 4 == 0 ? 4 : 1;  // entries a broadcast read of q, of p
  // The block's query rows, scaled, then the same rows' probabilities; the keys; the values.
  FC_DYNAMIC_SHARED_FLOATS(fc_shared);
  float (*const qp)[W] = reinterpret_cast<float (*)[W]>(fc_shared);
  float (*const ks)[D + 1] = reinterpret_cast<float (*)[D + 1]>(fc_shared + R * W);
  float (*const vs)[D] = reinterpret_cast<float (*)[D]>(fc_shared + R * W + S * (D + 1));
${grid_guard}  const int64_t head = blockIdx.x / ${row_blocks}, b = head / ${H}, h = head % ${H}, hk = h / ${group};
  const int t0 = (blockIdx.x % ${row_blocks}) * R;
  const ${elem}* __restrict__ q = in0 + (${q_base});
  const ${elem}* __restrict__ k = in1 + (${k_base});
  const ${elem}* __restrict__ v = in2 + (${v_base});
${mask_pointer}  ${elem}* __restrict__ o = out0 + (${o_base});
  if constexpr (kVector) {  // d is contiguous and every row 4-element aligned: 4 elements a load
#pragma unroll 1
    for (int i = threadIdx.x; i < S * (D / 4); i += ${block}) {
      const int t = i / (D / 4), d = i % (D / 4) * 4;
      ${elem} kv[4], vv[4];
      fc_load<4, true>(k + int64_t(t) * ${k_t_stride} + d, kv);
      fc_load<4, true>(v + int64_t(t) * ${v_t_stride} + d, vv);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        ks[t][d + u] = ${k_vec_elem};
        vs[t][d + u] = ${v_vec_elem};
      }
    }
    for (int i = threadIdx.x; i < R * (D / 4); i += ${block}) {
      const int r = i / (D / 4), d = i % (D / 4) * 4, t = min(t0 + r, T - 1);
      ${elem} qv[4];
      fc_load<4, true>(q + int64_t(t) * ${q_t_stride} + d, qv);
#pragma unroll
      for (int u = 0; u < 4; ++u) qp[r][d + u] = t0 + r < T ? ${q_vec_scaled} : 0.0f;
    }
  } else {
#pragma unroll 4
    for (int i = threadIdx.x; i < S * D; i += ${block}) {
      const int t = i / D, d = i % D;
      ks[t][d] = ${k_elem};
      vs[t][d] = ${v_elem};
    }
    for (int i = threadIdx.x; i < R * D; i += ${block}) {
      const int r = i / D, d = i % D, t = min(t0 + r, T - 1);
      qp[r][d] = t0 + r < T ? ${q_scaled} : 0.0f;
    }
  }
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // Scores of the warp's rows (rows past T are zeros, never stored) for keys lane, lane + 32, ...; keys past S
  // read the last one and are masked below.
  float s[RW][KC];
#pragma unroll
  for (int i = 0; i < RW; ++i)
#pragma unroll
    for (int c = 0; c < KC; ++c) s[i][c] = 0.0f;
#pragma unroll 1
  for (int d = 0; d < D; d += DS) {
    float kd[KC][DS];
#pragma unroll
    for (int c = 0; c < KC; ++c)
#pragma unroll
      for (int u = 0; u < DS; ++u) kd[c][u] = ks[min(c * 32 + lane, S - 1)][d + u];
#pragma unroll
    for (int i = 0; i < RW; ++i) {
      float qd[DS];
      fc_load<DS, DS == 2>(&qp[warp + 8 * i][d], qd);
#pragma unroll
      for (int c = 0; c < KC; ++c)
#pragma unroll
        for (int u = 0; u < DS; ++u) s[i][c] = fmaf(qd[u], kd[c][u], s[i][c]);
    }
  }
  // Softmax over each row's keys (all S, or with a causal mask those up to the row's own position).
#pragma unroll
  for (int i = 0; i < RW; ++i) {
    const int keys = ${keys};
${mask_row}    float m = __int_as_float(0xff800000);
#pragma unroll
    for (int c = 0; c < KC; ++c) {
${round_scores}${apply_mask}      if (c * 32 + lane < keys) m = fc_max(m, s[i][c]);
    }
    m = fc_warp_reduce(m, fc_max_op());
${all_left_out}    float l = 0.0f;
#pragma unroll
    for (int c = 0; c < KC; ++c) {
      s[i][c] = c * 32 + lane < keys ? expf(s[i][c] - m) : 0.0f;
      l += s[i][c];
    }
    l = fc_warp_reduce(l, fc_sum_op());
#pragma unroll
    for (int c = 0; c < KC; ++c) s[i][c] = ${p};  // softmax's output, rounded as torch's is, before the product
  }
  __syncwarp();  // every lane is done reading the warp's query rows
#pragma unroll
  for (int i = 0; i < RW; ++i)
#pragma unroll
    for (int c = 0; c < KC; ++c)
      if (c * 32 + lane < S) qp[warp + 8 * i][c * 32 + lane] = s[i][c];  // 0 past the row's keys
  __syncwarp();
  // Outputs of the warp's rows for columns lane, lane + 32, ...; probabilities past a causal row's keys are 0, so
  // the loop ends at the warp's last row's keys.
  float acc[RW][DC];
#pragma unroll
  for (int i = 0; i < RW; ++i)
#pragma unroll
    for (int c = 0; c < DC; ++c) acc[i][c] = 0.0f;
  const int j_end = ${j_end};
#pragma unroll 1
  for (int j = 0; j < j_end; j += JS) {
    float vj[DC][JS];
#pragma unroll
    for (int c = 0; c < DC; ++c)
#pragma unroll
      for (int u = 0; u < JS; ++u) vj[c][u] = vs[j + u][min(c * 32 + lane, D - 1)];
#pragma unroll
    for (int i = 0; i < RW; ++i) {
      float pj[JS];
      fc_load<JS, JS == 4>(&qp[warp + 8 * i][j], pj);
#pragma unroll
      for (int c = 0; c < DC; ++c)
#pragma unroll
        for (int u = 0; u < JS; ++u) acc[i][c] = fmaf(pj[u], vj[c][u], acc[i][c]);
    }
  }
#pragma unroll
  for (int i = 0; i < RW; ++i) {
    const int t = t0 + warp + 8 * i;
    if (t < T)
#pragma unroll
      for (int c = 0; c < DC; ++c)
        if (c * 32 + lane < D)
          o[int64_t(t) * ${o_t_stride} + int64_t(c * 32 + lane) * ${o_d_stride}] = ${o_value};
  }
}

extern "C" __global__ void __launch_bounds__(${block}) ${name}(${params}) {
  ${name}_head<${vector}>(${args});
}
)cuda";

// (element offset of the head's (0, 0) element as C++ text over `b` and the head variable `head`, its t stride, its
// d stride): literals, or size parameters where they depend on a symbolic batch.
struct HeadLayout {
  std::string base, t_stride, d_stride;
};
HeadLayout head_layout(const Operand& o, SizeParams& params, const char* head = "h") {
  return {fmt::format("{} + b * {} + {} * {}", params.text(o.storage_offset), params.text(o.strides[0]), head,
                      params.text(o.strides[1])),
          params.text(o.strides[2]), params.text(o.strides[3])};
}

// Whether an input's rows of D elements can be read 4 at a time: d contiguous, and every head's rows start on a
// multiple of 4 elements past the operand's first one (which the executable checks is aligned).
bool rows_of_four(const Operand& o, int64_t d) {
  if (d % 4 != 0 || !o.strides[3].is_static() || o.strides[3].hint() != 1) return false;
  for (int i = 0; i < 3; ++i)
    if (!o.strides[i].is_static() || o.strides[i].hint() % 4 != 0) return false;
  return true;
}

}  // namespace

KernelSource emit_attention(const Kernel& k, const DeviceLimits& limits) {
  const ValueType vt{k.inputs[0].dtype};
  const bool every_step = k.attention_rounding == Kernel::AttentionRounding::EveryStep;
  auto round_p = [&](const std::string& p) {  // the probabilities, before the product with v
    return k.attention_rounding == Kernel::AttentionRounding::Output ? p : vt.round(p);
  };
  const Size& B = k.shape[0];
  const int64_t H = k.shape[1].hint(), T = k.shape[2].hint(), D = k.shape[3].hint();
  const int64_t S = k.key_count(), Hk = k.key_heads();
  const bool masked = k.inputs.size() == 4;
  const bool bool_mask = masked && k.inputs[3].dtype == DType::Bool;
  // Rows a block: enough blocks for one a multiprocessor (at the trace-time batch when it is a symbol) -- small
  // batches split each head's queries over several blocks, each copying the head's keys and values again, from
  // L2 -- then as many rows a warp (up to kMaxRowsPerWarp) as shared memory holds, so each key and value read
  // serves more rows. More blocks of fewer rows were slower (W7's heads on an H200: 9.0 us with 2 blocks a head,
  // 10.3 with 4, 11.0 with 8, 16.9 with 16).
  const int64_t heads = std::max<int64_t>(B.hint() * H, 1);
  const int64_t wanted_blocks = std::clamp<int64_t>(ceil_div(limits.sm_count, heads), 1, ceil_div(T, kWarps));
  int64_t rows_per_warp = std::min(ceil_div(ceil_div(T, wanted_blocks), kWarps), kMaxRowsPerWarp);
  const int64_t shared_limit = attention_shared_limit(limits);
  while (rows_per_warp > 1 && shared_bytes(rows_per_warp * kWarps, S, D) > shared_limit) --rows_per_warp;
  // The same number of blocks with the rows spread evenly (64 rows that fit 56 at a time: two blocks of 32).
  const int64_t row_blocks = ceil_div(T, rows_per_warp * kWarps);
  rows_per_warp = ceil_div(ceil_div(T, row_blocks), kWarps);
  const int64_t rows = rows_per_warp * kWarps;
  const Size blocks = B * Size(H * row_blocks);
  KernelSource src = source_for(k, kWarps * 32, B.is_static() ? std::max<int64_t>(blocks.hint(), 1) : kMaxGridX);
  src.shared_bytes = static_cast<int>(shared_bytes(rows, S, D));
  if (!B.is_static()) src.grid_items = blocks.sym();
  const bool vector = rows_of_four(k.inputs[0], D) && rows_of_four(k.inputs[1], D) && rows_of_four(k.inputs[2], D);
  if (vector)
    for (size_t i = 0; i < 3; ++i) add_vector_operand(src, k, i, 4);
  SizeParams params;
  const HeadLayout q = head_layout(k.inputs[0], params), key = head_layout(k.inputs[1], params, "hk"),
                   v = head_layout(k.inputs[2], params, "hk"), o = head_layout(k.outputs[0], params);

  // torch scales q before the product (F.multi_head_attention_forward's q * D^-1/2, rounded).
  auto scaled = [&](const std::string& element) {
    const std::string x = fmt::format("{} * {}", vt.to_float(element), literal(DType::F32, k.attention_scale));
    return every_step ? vt.round(x) : x;
  };
  auto element = [](const char* pointer, const HeadLayout& l) {
    return fmt::format("{}[int64_t(t) * {} + int64_t(d) * {}]", pointer, l.t_stride, l.d_stride);
  };
  // The mask's entry for the row's query and lane's key c * 32 + lane: a row base per query row, then the key.
  std::string mask_pointer, mask_row, apply_mask;
  if (masked) {
    const HeadLayout m = head_layout(k.inputs[3], params);
    mask_pointer = fmt::format("  const {}* __restrict__ mask = in3 + ({});\n", dtype_c_type(k.inputs[3].dtype), m.base);
    mask_row = fmt::format("    const int64_t mask_row = int64_t(min(t0 + warp + 8 * i, T - 1)) * {};\n", m.t_stride);
    const std::string entry = fmt::format("mask[mask_row + int64_t(c * 32 + lane) * {}]", m.d_stride);
    apply_mask = bool_mask
        ? fmt::format("      if (c * 32 + lane < keys && !{}) s[i][c] = __int_as_float(0xff800000);  // left out\n", entry)
        : fmt::format("      if (c * 32 + lane < keys) s[i][c] += {};\n", ValueType{k.inputs[3].dtype}.to_float(entry));
  }
  src.code = fill_template(kAttentionKernel, {
      {"${name}", k.name},
      // A symbolic batch's grid is at least one block, even for B = 0.
      {"${grid_guard}", B.is_static() ? std::string()
                                      : fmt::format("  if (blockIdx.x >= {}) return;\n", params.text(blocks))},
      {"${causal}", k.attention_causal ? "causal " : ""},
      {"${shape}", join(k.shape)},
      {"${keys_note}", (S != T ? fmt::format(", {} keys", S) : std::string()) +
                           (Hk != H ? fmt::format(", {} key heads", Hk) : std::string())},
      {"${mask_note}", !masked ? "" : bool_mask ? ", masked" : " + mask"},
      {"${shared_bytes}", std::to_string(src.shared_bytes)},
      {"${block}", std::to_string(src.block)},
      {"${params}", kernel_params(k)},
      {"${args}", kernel_args(k)},
      {"${vector}", vector ? "kVectorAccess" : "false"},  // without vector operands the program may not declare it
      {"${T}", std::to_string(T)},
      {"${S}", std::to_string(S)},
      {"${D}", std::to_string(D)},
      {"${H}", std::to_string(H)},
      {"${group}", std::to_string(H / Hk)},
      {"${rows}", std::to_string(rows)},
      {"${rows_per_warp}", std::to_string(rows_per_warp)},
      {"${row_width}", std::to_string(shared_row_width(S, D))},
      {"${row_blocks}", std::to_string(row_blocks)},
      {"${elem}", dtype_c_type(vt.t)},
      {"${q_base}", q.base},
      {"${k_base}", key.base},
      {"${v_base}", v.base},
      {"${o_base}", o.base},
      {"${mask_pointer}", mask_pointer},
      {"${q_t_stride}", q.t_stride},
      {"${k_t_stride}", key.t_stride},
      {"${v_t_stride}", v.t_stride},
      {"${k_vec_elem}", vt.to_float("kv[u]")},
      {"${v_vec_elem}", vt.to_float("vv[u]")},
      {"${q_vec_scaled}", scaled("qv[u]")},
      {"${k_elem}", vt.to_float(element("k", key))},
      {"${v_elem}", vt.to_float(element("v", v))},
      {"${q_scaled}", scaled(element("q", q))},
      // The keys a query row sees: all S, or with a causal mask those up to its own position (torch's is_causal
      // aligns the mask to the top left: query t sees keys 0 ... t).
      {"${keys}", k.attention_causal ? "min(t0 + warp + 8 * i + 1, S)" : "S"},
      {"${j_end}", k.attention_causal ? "min(t0 + warp + 8 * (RW - 1) + 1, S)" : "S"},
      {"${mask_row}", mask_row},
      {"${apply_mask}", apply_mask},
      {"${round_scores}", vt.t != DType::F32 && every_step
                              ? fmt::format("      s[i][c] = {};  // the scores GEMM's output\n", vt.round("s[i][c]"))
                              : std::string()},
      // A row whose keys the mask all leaves out has no maximum: its exponentials are 0, and so is its output.
      {"${all_left_out}", masked ? "    if (m == __int_as_float(0xff800000)) m = 0.0f;  // every key left out\n" : ""},
      {"${p}", round_p(masked ? "l > 0.0f ? s[i][c] / l : 0.0f" : "s[i][c] / l")},
      {"${o_t_stride}", o.t_stride},
      {"${o_d_stride}", o.d_stride},
      {"${o_value}", vt.from_float("acc[i][c]")},
  });
  src.size_params = params.exprs();
  return src;
}

}  // namespace fastcomp::codegen::detail

namespace fastcomp::codegen {

int64_t attention_shared_bytes(int64_t s, int64_t d) { return detail::shared_bytes(detail::kWarps, s, d); }

}  // namespace fastcomp::codegen
