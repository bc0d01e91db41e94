// Lowering: graph -> fusion plan for the CUDA backend. Pointwise chains, broadcasts and casts become loads and
// expressions of one kernel; reductions over the last dimension (sum, mean, amax, var, softmax, layer_norm, ...)
// join their prologue and epilogue in a row-reduce kernel, and sum/mean/amax/amin/var/std over dimensions that
// keep the last one in a column-reduce kernel (over a few long rows or columns, or the last dimension with others,
// in two: split_reduce.h, lower_two_stage_reduce.cpp); views are index arithmetic; matrix products become
// cuBLASLt calls with their bias fused; every other op stays a call into torch (an extern step), so lowering
// never fails on an unfamiliar op.
#pragma once
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

#include "graph/ir.h"
#include "plan/program.h"

namespace fastcomp::plan {

// torch's kernels for F.scaled_dot_product_attention (sdpa_choice.h): Unknown where torch's answer is not known or
// is one fastcomp's attention kernel cannot reproduce (the math path computing half heads in half).
enum class SdpKernel { Unknown, Math, Flash, MemoryEfficient, Cudnn };
struct SdpQuery {
  const graph::TensorMeta* q;
  const graph::TensorMeta* k;
  const graph::TensorMeta* v;
  const graph::TensorMeta* mask;  // nullptr: none
  bool causal;
  double scale;
  bool gqa;
};
using SdpKernelQuery = std::function<SdpKernel(const SdpQuery&)>;

// The additive bias torch makes of a boolean mask for cuDNN's attention (F.scaled_dot_product_attention converts
// one on every call): its value where the mask is True and where it is False, in the query's dtype, and its strides
// (its sizes are the mask's).
struct SdpMaskBias {
  double where_true = 0, where_false = 0;
  std::vector<int64_t> strides;
};
using SdpMaskBiasQuery = std::function<std::optional<SdpMaskBias>(const SdpQuery&)>;

struct LowerOptions {
  int device = 0;            // CUDA ordinal of the graph's tensors
  bool require_cuda = true;  // false: plan CPU graphs too (tests without a GPU check lowering and codegen)
  // nn.MultiheadAttention's heads as one attention kernel where they fit (fastcomp.config.fused_attention),
  // instead of a head-splitting kernel, two batched GEMMs and a softmax kernel.
  bool fused_attention = true;
  // F.linear of a few rows (at most kSmallMatmulMaxRows, a product under kSmallMatmulMaxTerms multiply-adds) as
  // a kernel of its own (fastcomp.config.small_matmul, outside CUDA graphs: see build_cuda_executable), instead of
  // a cuBLASLt call tiled for large products.
  bool small_matmul = true;
  // Products of one A and shape as one batched cuBLASLt call (group_products.h; fastcomp.config.grouped_products).
  bool grouped_products = true;
  // Pointwise kernels of graph inputs alone as one combo kernel, run early (combine_kernels.h;
  // fastcomp.config.combined_kernels).
  bool combined_kernels = true;
  // Values between 2-d convolutions planned channels-last where nothing observes their layout (channels_last.h;
  // fastcomp.config.channels_last).
  bool channels_last = true;
  // The most shared memory an attention kernel may take on the device (kernel_ir.h's attention_shared_limit).
  int64_t attention_shared_limit = codegen::attention_shared_limit(codegen::DeviceLimits{});
  // Whether F.scaled_dot_product_attention with a mask may be an attention kernel: torch's f32 paths give a query
  // row the mask leaves no key 0, as the kernel does, from torch 2.5 on (the math path's softmax became safe).
  bool masked_attention = true;
  // Which kernel torch runs a masked f16 or bf16 head on: such a head is an attention kernel rounded as that one
  // rounds (the math path: the output; the memory-efficient kernel: the probabilities), and stays torch's call
  // where torch runs cuDNN's (a row the mask leaves no key: the mean of the values) or the answer is unknown
  // (unset: always).
  SdpKernelQuery sdp_kernel;
  // A masked f16 or bf16 head torch runs on cuDNN takes its boolean mask as the bias torch would make of it, made
  // by a kernel of the plan (one for every head on that mask; lower_attention.cpp). Unset, or nullopt: torch's
  // call converts it.
  SdpMaskBiasQuery sdp_mask_bias;
};

// The largest product (m * n * k multiply-adds) lowering gives a small-matmul kernel: up to here a cuBLASLt call
// costs the host about as much as the GPU (W5's 17 M: a GEMM and a split-K kernel, 8.7 us of GPU time on an
// H100), beyond it cuBLAS's tiled kernels pull ahead.
constexpr int64_t kSmallMatmulMaxTerms = int64_t{1} << 25;

// The graph cannot run on the CUDA backend at all (e.g. a complex dtype on a kernel path); the caller uses the
// torch runner and reports `what()`.
struct NotLowerable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/** Plans `graph` for the CUDA backend. Throws NotLowerable. */
Program lower(const graph::Graph& graph, const LowerOptions& options);

}  // namespace fastcomp::plan
