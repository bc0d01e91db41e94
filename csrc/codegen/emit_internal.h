// What emit_cuda.cpp shares with the per-kind emitters (emit_pointwise.cpp, emit_transposing_pointwise.cpp,
// emit_row_reduce.cpp, emit_column_reduce.cpp, emit_attention.cpp, emit_small_matmul.cpp, emit_combo.cpp).
#pragma once
#include <fmt/format.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "codegen/kernel_ir.h"
#include "codegen/layout.h"

namespace fastcomp::codegen::detail {

// Each takes a validated kernel.
// As a combo's part (emit_combo.cpp): a __device__ function taking its block's index and its grid's size after
// its operands, in blocks of the combo's size, never tiled through shared memory.
KernelSource emit_pointwise(const Kernel& k, const DeviceLimits& limits, bool as_combo_part = false);
KernelSource emit_combo(const Kernel& k, const DeviceLimits& limits);
KernelSource emit_row_reduce(const Kernel& k, const DeviceLimits& limits);
KernelSource emit_column_reduce(const Kernel& k, const DeviceLimits& limits);
KernelSource emit_attention(const Kernel& k, const DeviceLimits& limits);
KernelSource emit_small_matmul(const Kernel& k, const DeviceLimits& limits);
// A pointwise kernel (walked in its output's order) that reads an input across the output's unit-stride
// dimension, as tiles through shared memory (emit_transposing_pointwise.cpp); nothing when it reads none so or
// is not static.
std::optional<KernelSource> emit_transposing_pointwise(const Kernel& k, const DeviceLimits& limits);

// One dtype in a hand-written kernel's text (attention, small matmul), which computes in f32: loads widen to f32,
// stores narrow, and round() rounds an f32 value to the dtype where torch's ops would have.
struct ValueType {
  DType t;
  std::string to_float(const std::string& x) const {
    return t == DType::F32 ? x : fmt::format("fc_{}_to_float({})", dtype_name(t), x);
  }
  std::string round(const std::string& x) const {
    return t == DType::F32 ? x : fmt::format("fc_round_{}({})", dtype_name(t), x);
  }
  std::string from_float(const std::string& x) const {
    return t == DType::F32 ? x : fmt::format("fc_float_to_{}({})", dtype_name(t), x);
  }
};

// Operand o of the kernel, counting inputs then outputs.
const Operand& operand(const Kernel& k, size_t o);

// The memory element a store writes: its expression's value converted to the output's dtype.
std::string stored_value(const Kernel& k, const Store& s);

// "32, 512, 512", "s0, 512"
std::string join(const Sizes& sizes);

// "const float* __restrict__ in0, ..., float* __restrict__ out0" and "in0, ..., out0", each followed by a marker
// that emit_cuda replaces with the size parameters once the whole kernel is written (", const int64_t p0" and
// ", p0"; nothing for a static kernel).
std::string kernel_params(const Kernel& k);
std::string kernel_args(const Kernel& k);

// Records that operand o (inputs then outputs) is accessed `group` elements at a time in the aligned program,
// from its first element, or its first readable one where it has a range.
void add_vector_operand(KernelSource& src, const Kernel& k, size_t o, int group);

// Name, needs_fp16/bf16 and launch shape filled in; the caller adds the code.
KernelSource source_for(const Kernel& k, int block, int64_t grid);

// Whether k's indices and offsets must be 64-bit: some size, stride or offset is symbolic (no bound), or the
// largest value an index variable takes does not fit int32 -- `loop_reach` (the emitter's loop variables,
// overshoot included), any element's offset (an offset before a tensor makes index sums negative on the way), a
// gathered element up to (size - 1) * stride past its operand's offset (its index is checked first). 32-bit
// division by the shape's constants is several times cheaper than 64-bit.
bool wide_indices(const Kernel& k, int64_t loop_reach);
std::string index_type_decl(bool wide);  // "using idx_t = int32_t;"

// `code` with every use of identifier `name` (alone or as the prefix of a helper, `name_rows`) replaced by `as`.
std::string renamed(const std::string& code, const std::string& name, const std::string& as);

// Replaces every `marker` in `text` with `with` (which may not contain the marker).
void replace_all(std::string& text, const std::string& marker, const std::string& with);

// A hand-written kernel's text (attention, small matmul): `text` with each field's marker ("${name}") replaced by
// its value.
using TemplateField = std::pair<const char*, std::string>;
std::string fill_template(const char* text, std::initializer_list<TemplateField> fields);

// `a` divided by `b`, rounded up.
int64_t ceil_div(int64_t a, int64_t b);

}  // namespace fastcomp::codegen::detail
