// Split reductions: a reduction with few results and a long reduced extent (x.sum() of a large tensor, x.sum(0)
// of [65536, 64]) leaves most of the GPU idle in one kernel, whose blocks each own whole rows (columns). It runs
// as two kernels instead: the first cuts one reduced dimension into `pieces` and reduces each piece separately
// (one partial value per piece and result, written to a small buffer), the second combines the partials (a sum
// of sums, a max of maxes) and computes the epilogue. Both are ordinary row- or column-reduce kernels, so the
// prologue stays fused into the first.
//
// Lowering decides where to split (choose_split) when it builds the cluster; the kernel is split when the plan is
// made (split_reduction), after every op has joined it.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "codegen/kernel_ir.h"

namespace fastcomp::plan {

// Reduced dimension `dim` of the kernel's space is cut into `pieces` pieces of equal length.
struct ReductionSplit {
  int dim = -1;
  int64_t pieces = 1;
  bool operator==(const ReductionSplit&) const = default;
};

/** Whether one kernel of `kind` runs a reduction over `shape` (the dimensions flagged in `reduced`) about as fast
 *  as torch's: not when a few long rows (columns) would leave most of the GPU idle. Judged by the hints under
 *  dynamic shapes. */
bool one_kernel_reduction_fits(codegen::Kernel::Kind kind, const codegen::Sizes& shape,
                               const std::vector<bool>& reduced, int element_bytes);

/** Whether a reduction over `shape` (the dimensions flagged in `reduced`; a row reduction flags the last one only)
 *  should be split, and how: when its results occupy fewer blocks than the GPU runs at once and the reduced
 *  extent is long. Static shapes only; nullopt when one kernel is the better choice or no reduced dimension has a
 *  suitable divisor (the pieces are of equal length, a multiple of 16 elements for row pieces). */
std::optional<ReductionSplit> choose_split(codegen::Kernel::Kind kind, const codegen::Sizes& shape,
                                           const std::vector<bool>& reduced, int element_bytes);

// The two kernels of a split reduction. The partial kernel takes the original kernel's inputs and writes one
// buffer per reduction (`partials`: contiguous, dtype and sizes given) and every per-element output of the
// original; the combine kernel takes the original inputs its epilogue reads (`combine_inputs`) then the partial
// buffers, and writes the original's per-row (per-column) outputs. Kernel arguments: partial = inputs + partials
// + per-element outputs; combine = combine_inputs + partials + per-row outputs; `partial_outputs` /
// `combine_outputs` say which original output each writes.
struct SplitKernels {
  codegen::Kernel partial, combine;
  struct PartialBuffer {
    codegen::DType dtype;
    codegen::Sizes sizes;
  };
  std::vector<PartialBuffer> partials;
  std::vector<int> combine_inputs, partial_outputs, combine_outputs;
};

/** Splits `k` (a RowReduce or ColumnReduce kernel with static sizes) as `split` says. nullopt when the kernel
 *  cannot be split: a reduction of a value that depends on another reduction (softmax, var), a per-element output
 *  or row index computed from a reduction, a gather, or an f16/bf16 reduction value. */
std::optional<SplitKernels> split_reduction(const codegen::Kernel& k, const ReductionSplit& split);

}  // namespace fastcomp::plan
