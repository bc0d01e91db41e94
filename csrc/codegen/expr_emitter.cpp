// Scalar expressions. Everything here is exact C (no fast-math intrinsics), so fp32 results stay within a few
// ulp of eager torch; f16/bf16 values are rounded to their dtype where they are produced (fc_round_* in the
// prelude), which keeps pointwise chains bitwise equal to eager, which rounds after every op.
#include "codegen/expr_emitter.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>

namespace fastcomp::codegen::detail {
namespace {

[[noreturn]] void invalid(const Kernel& k, const std::string& what) {
  throw std::invalid_argument(fmt::format("emit_cuda: kernel '{}': {}", k.name, what));
}

bool is_half_like(DType t) { return t == DType::F16 || t == DType::BF16; }

// Float math: the f32 function for values living in float, the f64 one for double.
std::string math_fn(DType t, const char* name) {
  return t == DType::F64 ? std::string(name) : std::string(name) + "f";
}

// A floating constant written in `t`'s value type ("0.5f" or "0.5").
std::string fnum(DType t, const char* digits) {
  return t == DType::F64 ? std::string(digits) : std::string(digits) + "f";
}

// Rounds a float-computed value to f16/bf16 where the dtype asks for it; other types round on declaration.
std::string round_to(DType t, const std::string& text) {
  if (t == DType::F16) return "fc_round_f16(" + text + ")";
  if (t == DType::BF16) return "fc_round_bf16(" + text + ")";
  return text;
}

int arity(ExprOp op) {
  switch (op) {
    case ExprOp::Load:
    case ExprOp::Constant:
    case ExprOp::RowIndex:
    case ExprOp::InRange: return 0;
    case ExprOp::Where: return 3;
    case ExprOp::Add:
    case ExprOp::Sub:
    case ExprOp::Mul:
    case ExprOp::Div:
    case ExprOp::Pow:
    case ExprOp::Max:
    case ExprOp::Min:
    case ExprOp::Lt:
    case ExprOp::Le:
    case ExprOp::Gt:
    case ExprOp::Ge:
    case ExprOp::Eq:
    case ExprOp::Ne:
    case ExprOp::And:
    case ExprOp::Or: return 2;
    default: return 1;
  }
}

bool needs_floating(ExprOp op) {
  switch (op) {
    case ExprOp::Exp:
    case ExprOp::Log:
    case ExprOp::Sqrt:
    case ExprOp::Rsqrt:
    case ExprOp::Sigmoid:
    case ExprOp::Tanh:
    case ExprOp::Erf:
    case ExprOp::Sin:
    case ExprOp::Cos:
    case ExprOp::GeluErf:
    case ExprOp::GeluTanh:
    case ExprOp::Silu: return true;
    default: return false;
  }
}

bool is_comparison(ExprOp op) {
  return op == ExprOp::Lt || op == ExprOp::Le || op == ExprOp::Gt || op == ExprOp::Ge || op == ExprOp::Eq ||
         op == ExprOp::Ne;
}

// pow(a, c) for a constant exponent c, written the way torch's CUDA kernel special-cases it (x*x for 2, sqrt for
// 0.5, ...), which is both faster and what eager computes; "" when c is not special.
std::string pow_by_constant(DType t, const std::string& a, double c) {
  if (c == 1) return a;
  if (c == 2) return a + " * " + a;
  if (c == 3) return a + " * " + a + " * " + a;
  if (c == 0.5) return math_fn(t, "sqrt") + "(" + a + ")";
  if (c == -0.5) return math_fn(t, "rsqrt") + "(" + a + ")";
  if (c == -1) return fnum(t, "1.0") + " / " + a;
  if (c == -2) return fnum(t, "1.0") + " / (" + a + " * " + a + ")";
  return "";
}

bool constant_exponent_inlined(const Kernel& k, const Expr& e) {
  if (e.op != ExprOp::Pow || !is_floating(e.dtype)) return false;
  const Expr& exponent = k.exprs[e.args[1]];
  return exponent.op == ExprOp::Constant && !pow_by_constant(e.dtype, "x", exponent.constant).empty();
}

std::string unary_value(const Kernel& k, const Expr& e, const std::string& a) {
  const DType t = e.dtype;
  switch (e.op) {
    case ExprOp::Neg: return "-" + a;
    case ExprOp::Abs:
      if (is_floating(t)) return math_fn(t, "fabs") + "(" + a + ")";
      return t == DType::U8 || t == DType::Bool ? a : "(" + a + " < 0 ? -" + a + " : " + a + ")";
    case ExprOp::Exp: return math_fn(t, "exp") + "(" + a + ")";
    case ExprOp::Log: return math_fn(t, "log") + "(" + a + ")";
    case ExprOp::Sqrt: return math_fn(t, "sqrt") + "(" + a + ")";
    case ExprOp::Rsqrt: return math_fn(t, "rsqrt") + "(" + a + ")";
    case ExprOp::Tanh: return math_fn(t, "tanh") + "(" + a + ")";
    case ExprOp::Erf: return math_fn(t, "erf") + "(" + a + ")";
    case ExprOp::Sin: return math_fn(t, "sin") + "(" + a + ")";
    case ExprOp::Cos: return math_fn(t, "cos") + "(" + a + ")";
    case ExprOp::Sigmoid:
      return fnum(t, "1.0") + " / (" + fnum(t, "1.0") + " + " + math_fn(t, "exp") + "(-" + a + "))";
    case ExprOp::Silu: return a + " / (" + fnum(t, "1.0") + " + " + math_fn(t, "exp") + "(-" + a + "))";
    case ExprOp::Relu: return "fc_relu(" + a + ")";
    case ExprOp::GeluErf:  // 0.5 x (1 + erf(x / sqrt(2)))
      return fmt::format("{} * {} * ({} + {}({} * {}))", fnum(t, "0.5"), a, fnum(t, "1.0"), math_fn(t, "erf"), a,
                         fnum(t, "0.70710678118654752440"));
    case ExprOp::GeluTanh:  // 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
      return fmt::format("{0} * {1} * ({2} + {3}({4} * ({1} + {5} * {1} * {1} * {1})))", fnum(t, "0.5"), a,
                         fnum(t, "1.0"), math_fn(t, "tanh"), fnum(t, "0.79788456080286535588"),
                         fnum(t, "0.044715"));
    case ExprOp::Not: return t == DType::Bool ? "!" + a : "~" + a;
    default: invalid(k, fmt::format("{} is not unary", expr_op_name(e.op)));
  }
}

std::string binary_value(const Kernel& k, const Expr& e, const std::string& a, const std::string& b) {
  const DType t = e.dtype;
  const char* vt = value_type(t);  // helpers take both arguments in the result's type
  switch (e.op) {
    case ExprOp::Add: return a + " + " + b;
    case ExprOp::Sub: return a + " - " + b;
    case ExprOp::Mul: return a + " * " + b;
    case ExprOp::Div: return is_floating(t) ? a + " / " + b : fmt::format("fc_floordiv<{}>({}, {})", vt, a, b);
    case ExprOp::Pow: {
      if (!is_floating(t)) return fmt::format("fc_ipow<{}>({}, {})", vt, a, b);
      if (constant_exponent_inlined(k, e)) return pow_by_constant(t, a, k.exprs[e.args[1]].constant);
      return math_fn(t, "pow") + "(" + a + ", " + b + ")";
    }
    case ExprOp::Max: return fmt::format("fc_max<{}>({}, {})", vt, a, b);
    case ExprOp::Min: return fmt::format("fc_min<{}>({}, {})", vt, a, b);
    case ExprOp::Lt: return a + " < " + b;
    case ExprOp::Le: return a + " <= " + b;
    case ExprOp::Gt: return a + " > " + b;
    case ExprOp::Ge: return a + " >= " + b;
    case ExprOp::Eq: return a + " == " + b;
    case ExprOp::Ne: return a + " != " + b;
    case ExprOp::And: return t == DType::Bool ? a + " && " + b : a + " & " + b;
    case ExprOp::Or: return t == DType::Bool ? a + " || " + b : a + " | " + b;
    default: invalid(k, fmt::format("{} is not binary", expr_op_name(e.op)));
  }
}

}  // namespace

bool is_floating(DType t) { return t == DType::F16 || t == DType::BF16 || t == DType::F32 || t == DType::F64; }
bool is_integer(DType t) { return !is_floating(t) && t != DType::Bool; }

const char* value_type(DType t) { return is_half_like(t) ? "float" : dtype_c_type(t); }

std::string convert(DType from, DType to, const std::string& text) {
  if (from == to) return text;
  if (to == DType::Bool) return "(" + text + " != 0)";
  // Through float, double included: torch's Half and BFloat16 are built from a float only, so eager rounds a
  // double twice (to float, then to f16/bf16), and so must we to give its bits.
  if (is_half_like(to)) return round_to(to, "(float)(" + text + ")");
  if (is_half_like(from) && to == DType::F32) return text;  // already a float holding the exact value
  return fmt::format("({})({})", dtype_c_type(to), text);
}

std::string from_memory(DType t, const std::string& raw) {
  if (t == DType::F16) return "fc_f16_to_float(" + raw + ")";
  if (t == DType::BF16) return "fc_bf16_to_float(" + raw + ")";
  return raw;
}

std::string to_memory(DType t, const std::string& value) {
  // The value is already rounded to t, so round-to-nearest here is exact.
  if (t == DType::F16) return "fc_float_to_f16(" + value + ")";
  if (t == DType::BF16) return "fc_float_to_bf16(" + value + ")";
  return value;
}

std::string literal(DType t, double v) {
  if (t == DType::Bool) return v != 0 ? "true" : "false";
  if (is_integer(t)) {
    if (v < -9.2233720368547758e18 || v >= 9.2233720368547758e18 || v != std::trunc(v))
      throw std::invalid_argument(fmt::format("emit_cuda: constant {} is not a {}", v, dtype_name(t)));
    return index_literal(static_cast<int64_t>(v));
  }
  if (t == DType::F64) {
    if (std::isnan(v)) return "__longlong_as_double(0x7ff8000000000000LL)";
    if (std::isinf(v)) return v > 0 ? "__longlong_as_double(0x7ff0000000000000LL)"
                                    : "__longlong_as_double(0xfff0000000000000LL)";
    std::string s = fmt::format("{:.17g}", v);
    return s.find_first_of(".e") == std::string::npos ? s + ".0" : s;
  }
  const float f = static_cast<float>(v);
  if (std::isnan(f)) return "__int_as_float(0x7fc00000)";
  if (std::isinf(f)) return f > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float(0xff800000)";
  std::string s = fmt::format("{:.9g}", f);  // 9 significant digits round-trip every float
  return (s.find_first_of(".e") == std::string::npos ? s + ".0" : s) + "f";
}

std::string index_literal(int64_t v) {
  if (v == INT64_MIN) return "(-9223372036854775807LL - 1)";
  if (v > INT32_MAX || v < INT32_MIN) return std::to_string(v) + "LL";
  return std::to_string(v);
}

std::string value_name(int i) { return "e" + std::to_string(i); }

std::string expr_statement(const Kernel& k, int i, const std::string& leaf, const std::string& guard) {
  const Expr& e = k.exprs[i];
  auto arg = [&](int n) { return value_name(e.args[n]); };
  std::string value;
  switch (e.op) {
    case ExprOp::Load: {
      const DType stored = k.inputs[e.operand].dtype;
      value = convert(stored, e.dtype, from_memory(stored, leaf));
      if (!guard.empty()) value = guard + " ? " + value + " : " + literal(e.dtype, 0);
      break;
    }
    case ExprOp::Gather: {
      const DType stored = k.inputs[e.operand].dtype;
      value = convert(stored, e.dtype, from_memory(stored, leaf));
      break;
    }
    case ExprOp::Constant: value = literal(e.dtype, e.constant); break;
    case ExprOp::RowIndex: value = convert(DType::I64, e.dtype, leaf); break;
    case ExprOp::InRange: value = leaf.empty() ? "true" : leaf; break;
    case ExprOp::Cast: value = convert(k.exprs[e.args[0]].dtype, e.dtype, arg(0)); break;
    case ExprOp::Where: value = round_to(e.dtype, arg(0) + " ? " + arg(1) + " : " + arg(2)); break;
    default:
      if (is_reduce(e.op)) invalid(k, "reductions are emitted by the reduction emitters");
      value = round_to(e.dtype, arity(e.op) == 1 ? unary_value(k, e, arg(0)) : binary_value(k, e, arg(0), arg(1)));
  }
  return fmt::format("const {} {} = {};", value_type(e.dtype), value_name(i), value);
}

std::string gather_check(const Kernel& k, int i, const std::string& size) {
  const std::string index = value_name(k.exprs[i].args[0]);
  return fmt::format("if ({0} < 0 || {0} >= {1}) __trap();", index, size);
}

DType accumulator(DType t) {
  if (is_floating(t)) return t == DType::F64 ? DType::F64 : DType::F32;
  return t == DType::I64 ? DType::I64 : DType::I32;
}

const char* reduce_functor(ExprOp op) {
  return op == ExprOp::ReduceSum ? "fc_sum_op()" : op == ExprOp::ReduceMax ? "fc_max_op()" : "fc_min_op()";
}

std::string reduce_init(ExprOp op, DType t) {
  const DType acc = accumulator(t);
  if (op == ExprOp::ReduceSum) return literal(acc, 0);
  const bool lowest = op == ExprOp::ReduceMax;
  const double inf = std::numeric_limits<double>::infinity();
  if (is_floating(t)) return literal(acc, lowest ? -inf : inf);
  switch (t) {
    case DType::Bool: return lowest ? "0" : "1";
    case DType::U8: return lowest ? "0" : "255";
    case DType::I8: return lowest ? "-128" : "127";
    case DType::I16: return lowest ? "-32768" : "32767";
    case DType::I32: return lowest ? "(-2147483647 - 1)" : "2147483647";
    default: return lowest ? index_literal(INT64_MIN) : index_literal(INT64_MAX);
  }
}

ReductionLevels reduction_levels(const Kernel& k, const std::vector<bool>& input_varies) {
  ReductionLevels r{std::vector<bool>(k.exprs.size(), true), std::vector<int>(k.exprs.size(), 0)};
  for (size_t i = 0; i < k.exprs.size(); ++i) {
    const Expr& e = k.exprs[i];
    if (e.op == ExprOp::RowIndex) r.uniform[i] = false;
    if (e.op == ExprOp::Load || e.op == ExprOp::Gather) r.uniform[i] = !input_varies[e.operand];
    for (int a : e.args) {
      r.uniform[i] = r.uniform[i] && r.uniform[a];
      r.level[i] = std::max(r.level[i], r.level[a]);
    }
    if (is_reduce(e.op)) {
      r.uniform[i] = true;
      r.level[i] += 1;
    }
  }
  return r;
}

std::vector<bool> live_exprs(const Kernel& k) {
  std::vector<bool> live(k.exprs.size(), false);
  for (const Store& s : k.stores) live[s.expr] = true;
  for (size_t i = k.exprs.size(); i-- > 0;) {
    if (!live[i]) continue;
    const Expr& e = k.exprs[i];
    for (size_t n = 0; n < e.args.size(); ++n)  // an inlined exponent is written into the pow itself
      if (n != 1 || !constant_exponent_inlined(k, e)) live[e.args[n]] = true;
  }
  return live;
}

// Kernel::Kind::Attention's rules (kernel_ir.h).
void validate_attention(const Kernel& k) {
  if (k.shape.size() != 4 || !all_static({k.shape[1], k.shape[2], k.shape[3]}))
    invalid(k, "an attention kernel needs a [B, H, T, D] shape with static H, T and D (B may be a symbol)");
  if ((k.inputs.size() != 3 && k.inputs.size() != 4) || k.outputs.size() != 1)
    invalid(k, "an attention kernel takes q, k, v (and a mask) and writes o");
  if (!k.exprs.empty() || !k.stores.empty()) invalid(k, "an attention kernel has no expressions or stores");
  const DType dtype = k.inputs[0].dtype;
  if (dtype != DType::F32 && dtype != DType::F16 && dtype != DType::BF16)
    invalid(k, "attention kernels are f32, f16 or bf16");
  for (size_t o = 0; o <= k.inputs.size(); ++o) {
    const Operand& op = o < k.inputs.size() ? k.inputs[o] : k.outputs[0];
    if (o == 3 ? op.dtype != dtype && op.dtype != DType::Bool : op.dtype != dtype)
      invalid(k, "an attention kernel's q, k, v and o share one dtype; its mask has it too, or is bool");
    if (op.strides.size() != 4 || op.valid.dim >= 0) invalid(k, "attention operands need 4 strides, without ranges");
    for (const Size& s : op.strides)
      if (!known_ge(s, 0)) invalid(k, "an attention operand has a negative stride");
    if (!known_ge(op.storage_offset, 0)) invalid(k, "an attention operand has a negative storage offset");
  }
  const int64_t h = k.shape[1].hint(), t = k.shape[2].hint(), d = k.shape[3].hint();
  const int64_t s = k.key_count(), hk = k.key_heads();
  if (t < 1 || d < 1 || s < 1 || k.shape[0].hint() < 1 || h < 1)
    invalid(k, "an attention kernel needs at least one head, query, key and column");
  if (hk < 1 || h % hk != 0) invalid(k, "an attention kernel's key heads divide its query heads");
  if (attention_shared_bytes(s, d) > kMaxAttentionSharedBytes)
    invalid(k, fmt::format("S={} keys of D={} columns need {} bytes of shared memory, over {}", s, d,
                           attention_shared_bytes(s, d), kMaxAttentionSharedBytes));
  if (!std::isfinite(k.attention_scale)) invalid(k, "the attention scale is not finite");
}

// Kernel::Kind::SmallMatmul's rules (kernel_ir.h).
void validate_small_matmul(const Kernel& k) {
  if (k.shape.size() != 3 || !all_static(k.shape)) invalid(k, "a small-matmul kernel needs a static [M, N, K] shape");
  const int64_t m = k.shape[0].hint(), n = k.shape[1].hint(), kk = k.shape[2].hint();
  if (m < 1 || m > kSmallMatmulMaxRows || n < 1 || kk < 1)
    invalid(k, fmt::format("a small-matmul kernel needs 1 to {} rows and at least one column and one term",
                           kSmallMatmulMaxRows));
  if (k.inputs.size() < 2 || k.inputs.size() > 3 || k.outputs.size() != 1)
    invalid(k, "a small-matmul kernel takes A, W and maybe a bias, and writes D");
  if (!k.exprs.empty() || !k.stores.empty()) invalid(k, "a small-matmul kernel has no expressions or stores");
  const DType dtype = k.inputs[0].dtype;
  if (dtype != DType::F32 && dtype != DType::F16 && dtype != DType::BF16)
    invalid(k, "small-matmul kernels are f32, f16 or bf16");
  // Which strides each operand may have: A [a_m, 0, 1], W [0, w_n, 1], bias [0, b_n, 0], D [d_m, d_n, 0].
  auto check = [&](const Operand& op, const char* what, bool m, bool n, bool unit_k) {
    if (op.dtype != dtype) invalid(k, "a small-matmul kernel's operands share one dtype");
    if (op.strides.size() != 3 || op.valid.dim >= 0 || !all_static(op.strides) || !op.storage_offset.is_static())
      invalid(k, std::string("small-matmul operand ") + what + " needs 3 static strides, without ranges");
    for (const Size& s : op.strides)
      if (s.hint() < 0) invalid(k, std::string("small-matmul operand ") + what + " has a negative stride");
    if ((!m && op.strides[0].hint() != 0) || (!n && op.strides[1].hint() != 0) ||
        op.strides[2].hint() != (unit_k ? 1 : 0))
      invalid(k, std::string("small-matmul operand ") + what + " is not laid out as kernel_ir.h says");
  };
  check(k.inputs[0], "A", true, false, true);
  check(k.inputs[1], "W", false, true, true);
  if (k.inputs.size() == 3) check(k.inputs[2], "bias", false, true, false);
  check(k.outputs[0], "D", true, true, false);
}

// Kernel::Kind::Combo's rules (kernel_ir.h).
void validate_combo(const Kernel& k) {
  if (k.parts.empty()) invalid(k, "a combo needs parts");
  if (!k.shape.empty() || !k.exprs.empty() || !k.stores.empty()) invalid(k, "a combo computes only through its parts");
  size_t n_in = 0, n_out = 0;
  for (const Kernel& part : k.parts) {
    if (part.kind != Kernel::Kind::Pointwise) invalid(k, "a combo's parts are pointwise kernels");
    validate(part);
    if (!all_static(part.shape)) invalid(k, "a combo's parts have static shapes");
    for (size_t o = 0; o < part.inputs.size() + part.outputs.size(); ++o) {
      const Operand& op = o < part.inputs.size() ? part.inputs[o] : part.outputs[o - part.inputs.size()];
      if (!all_static(op.strides) || !op.storage_offset.is_static())
        invalid(k, "a combo's parts have static strides and offsets");
    }
    for (size_t i = 0; i < part.inputs.size(); ++i)
      if (n_in + i >= k.inputs.size() || k.inputs[n_in + i].dtype != part.inputs[i].dtype)
        invalid(k, "a combo's inputs are its parts' inputs in order");
    for (size_t i = 0; i < part.outputs.size(); ++i)
      if (n_out + i >= k.outputs.size() || k.outputs[n_out + i].dtype != part.outputs[i].dtype)
        invalid(k, "a combo's outputs are its parts' outputs in order");
    n_in += part.inputs.size();
    n_out += part.outputs.size();
  }
  if (n_in != k.inputs.size() || n_out != k.outputs.size())
    invalid(k, "a combo's operands are its parts' inputs, then their outputs");
}

void validate(const Kernel& k) {
  if (k.name.empty() || !(std::isalpha(static_cast<unsigned char>(k.name[0])) || k.name[0] == '_'))
    invalid(k, "name must be a C identifier");
  for (char c : k.name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') invalid(k, "name must be a C identifier");
  if (k.name.rfind("fc_", 0) == 0) invalid(k, "names starting with fc_ belong to the prelude");
  for (const Size& n : k.shape)
    if (!known_ge(n, 0)) invalid(k, "negative size");
  if (k.kind == Kernel::Kind::Attention) return validate_attention(k);
  if (k.kind == Kernel::Kind::SmallMatmul) return validate_small_matmul(k);
  if (k.kind == Kernel::Kind::Combo) return validate_combo(k);
  if (k.kind == Kernel::Kind::RowReduce && (k.shape.empty() || k.shape.back() == 0))
    invalid(k, "a row-reduce kernel needs a non-empty last dimension");
  const bool column = k.kind == Kernel::Kind::ColumnReduce;
  if (column) {
    if (k.reduced_dims.size() != k.shape.size()) invalid(k, "reduced_dims needs one flag per dimension");
    if (k.shape.empty() || k.reduced_dims.back()) invalid(k, "a column-reduce kernel keeps its last dimension");
    if (std::find(k.reduced_dims.begin(), k.reduced_dims.end(), true) == k.reduced_dims.end())
      invalid(k, "a column-reduce kernel reduces at least one dimension");
  } else if (!k.reduced_dims.empty()) {
    invalid(k, "only column-reduce kernels have reduced_dims");
  }
  const bool pointwise = k.kind == Kernel::Kind::Pointwise;
  auto check_range = [&](const DimRange& r, const std::string& what) {
    if (r.dim < 0) return;
    if (!pointwise) invalid(k, what + " has a range: row-reduce and column-reduce kernels take none");
    if (r.dim >= static_cast<int>(k.shape.size())) invalid(k, what + "'s range is on a missing dimension");
    if (!known_ge(r.begin, 0) || !known_ge(r.end, r.begin) || !known_ge(k.shape[r.dim], r.end))
      invalid(k, what + "'s range is not inside its dimension");
  };
  auto check_operand = [&](const Operand& o, const char* what) {
    if (o.strides.size() != k.shape.size()) invalid(k, fmt::format("{} has {} strides for {} dimensions", what,
                                                                   o.strides.size(), k.shape.size()));
    for (const Size& s : o.strides)
      if (!known_ge(s, 0)) invalid(k, fmt::format("{} has a negative stride", what));
    check_range(o.valid, what);
    // With a range, the offset counts from coordinate 0, which may lie outside the range.
    const Size first = o.valid.dim >= 0 ? o.storage_offset + o.valid.begin * o.strides[o.valid.dim] : o.storage_offset;
    if (!known_ge(first, 0)) invalid(k, fmt::format("{} has a negative storage offset", what));
  };
  for (const Operand& o : k.inputs) check_operand(o, "an input");
  for (const Operand& o : k.outputs) {
    check_operand(o, "an output");
    if (o.valid.dim >= 0) invalid(k, "an output has a validity range");
  }
  for (size_t i = 0; i < k.exprs.size(); ++i) {
    const Expr& e = k.exprs[i];
    const std::string at = fmt::format("e{} ({})", i, expr_op_name(e.op));
    const int n = is_reduce(e.op) ? 1 : arity(e.op);
    if (static_cast<int>(e.args.size()) != n) invalid(k, fmt::format("{} takes {} arguments", at, n));
    for (int a : e.args)
      if (a < 0 || a >= static_cast<int>(i)) invalid(k, fmt::format("{} uses a later or missing expression", at));
    if (e.op == ExprOp::Load && (e.operand < 0 || e.operand >= static_cast<int>(k.inputs.size())))
      invalid(k, fmt::format("{} reads a missing input", at));
    if (e.op == ExprOp::Gather) {
      if (!pointwise && k.kind != Kernel::Kind::RowReduce)
        invalid(k, fmt::format("{} needs a pointwise or row-reduce kernel", at));
      if (e.operand < 0 || e.operand >= static_cast<int>(k.inputs.size()))
        invalid(k, fmt::format("{} reads a missing input", at));
      if (k.inputs[e.operand].valid.dim >= 0) invalid(k, fmt::format("{} reads an input with a range", at));
      const DType index = k.exprs[e.args[0]].dtype;
      if (index != DType::I32 && index != DType::I64) invalid(k, fmt::format("{} needs an i32 or i64 index", at));
      if (!known_ge(e.gather.size, 0) || !known_ge(e.gather.stride, 0))
        invalid(k, fmt::format("{} has a negative size or stride", at));
    }
    if (e.op == ExprOp::InRange) {
      if (e.range.dim < 0) invalid(k, fmt::format("{} needs a dimension", at));
      if (e.dtype != DType::Bool) invalid(k, fmt::format("{} yields bool", at));
      check_range(e.range, at);
    }
    if (needs_floating(e.op) && !is_floating(e.dtype)) invalid(k, fmt::format("{} needs a floating dtype", at));
    if (is_comparison(e.op) && e.dtype != DType::Bool) invalid(k, fmt::format("{} yields bool", at));
    if ((e.op == ExprOp::And || e.op == ExprOp::Or || e.op == ExprOp::Not) && is_floating(e.dtype))
      invalid(k, fmt::format("{} needs bool or an integer dtype", at));
    if ((e.op == ExprOp::Neg || e.op == ExprOp::Sub || e.op == ExprOp::Div || e.op == ExprOp::Pow) &&
        e.dtype == DType::Bool)
      invalid(k, fmt::format("{} is not defined on bool", at));
    if (e.op == ExprOp::Where && k.exprs[e.args[0]].dtype != DType::Bool)
      invalid(k, fmt::format("{} needs a bool condition", at));
    if (is_reduce(e.op) && k.kind != Kernel::Kind::RowReduce && !column)
      invalid(k, fmt::format("{} needs a row-reduce or column-reduce kernel", at));
    if (e.op == ExprOp::RowIndex && column) invalid(k, fmt::format("{} has no meaning in a column-reduce kernel", at));
  }
  std::vector<bool> written(k.outputs.size(), false);
  for (const Store& s : k.stores) {
    if (s.expr < 0 || s.expr >= static_cast<int>(k.exprs.size())) invalid(k, "a store of a missing expression");
    if (s.output < 0 || s.output >= static_cast<int>(k.outputs.size())) invalid(k, "a store to a missing output");
    if (written[s.output]) invalid(k, fmt::format("out{} is stored twice", s.output));
    written[s.output] = true;
  }
  // Two elements writing one address would race; only a per-row value's stride-0 last dimension (a per-column
  // value's reduced dimensions) may repeat.
  for (size_t o = 0; o < k.outputs.size(); ++o)
    for (size_t d = 0; d < k.shape.size(); ++d) {
      const bool per_row = (k.kind == Kernel::Kind::RowReduce && d + 1 == k.shape.size()) ||
                           (column && k.reduced_dims[d]);
      const bool repeats = k.shape[d].is_static() ? k.shape[d].hint() > 1 : true;
      if (k.outputs[o].strides[d] == 0 && repeats && !per_row)
        invalid(k, fmt::format("out{} repeats elements in dimension {}", o, d));
    }
}

}  // namespace fastcomp::codegen::detail
