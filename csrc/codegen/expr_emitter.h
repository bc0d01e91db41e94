// Scalar CUDA C for the expression DAG of a kernel, shared by the pointwise and reduction emitters: value
// types, conversions at loads/stores/casts, literals, and one statement per expression.
#pragma once
#include <string>
#include <vector>

#include "codegen/kernel_ir.h"

namespace fastcomp::codegen::detail {

bool is_floating(DType t);  // f16, bf16, f32, f64
bool is_integer(DType t);   // u8 .. i64 (not bool)

// The C type a value of dtype `t` lives in while computing: f16/bf16 live in float, the rest in their own type.
const char* value_type(DType t);

// `text`, a value of dtype `from`, converted to dtype `to` with torch's (C++'s) conversion rules.
std::string convert(DType from, DType to, const std::string& text);
// An element read from memory (of `t`'s storage type) as a value, and a value as the element to write.
std::string from_memory(DType t, const std::string& raw);
std::string to_memory(DType t, const std::string& value);

// A C literal of `value` in dtype `t`'s value type (NaN and infinities included).
std::string literal(DType t, double value);
// A C literal of an index or size: int when it fits, long long otherwise.
std::string index_literal(int64_t v);

// The name of expression `i`'s value in emitted code.
std::string value_name(int i);

// `const <type> e<i> = <value>;` for every op but Reduce*. `leaf` is what a leaf reads where it is evaluated: the
// memory element of a Load or a Gather (whose index gather_check tests first), the i64 text of RowIndex, the
// condition of InRange ("" for true). A Load of an input with a validity range reads its element only where
// `guard` (that range's condition) holds, else 0.
std::string expr_statement(const Kernel& k, int i, const std::string& leaf, const std::string& guard = "");

// Gather expression `i`'s bounds check, one statement: __trap() unless 0 <= its index < `size` (C text).
std::string gather_check(const Kernel& k, int i, const std::string& size);

// Reductions accumulate in float (f16/bf16/f32), double, int64 or int (narrower integers and bool), combined by
// the prelude's functor ("fc_sum_op()"), starting from the identity in the accumulator (0, or the lowest/highest
// value of the dtype).
DType accumulator(DType t);
const char* reduce_functor(ExprOp op);
std::string reduce_init(ExprOp op, DType t);

// Expressions some store needs, directly or through arguments.
std::vector<bool> live_exprs(const Kernel& k);

// Per expression of a row- or column-reduce kernel: whether its value is the same for every reduced element of
// its row (column) -- reductions, constants, reads of inputs that do not move along the reduced elements
// (`input_varies` false) and what is computed from these only; RowIndex varies -- and how many reduction passes
// it waits for (a reduction one more than its argument).
struct ReductionLevels {
  std::vector<bool> uniform;
  std::vector<int> level;
};
ReductionLevels reduction_levels(const Kernel& k, const std::vector<bool>& input_varies);

// Throws std::invalid_argument unless the kernel follows kernel_ir.h's rules that both emitters rely on.
void validate(const Kernel& k);

}  // namespace fastcomp::codegen::detail
