// Pointwise ops: arithmetic, math functions, activations, comparisons, where/clamp and casts, with torch's
// broadcasting and type promotion. The result dtype is the node's (torch computed it on meta tensors); tensor
// operands are cast to the dtype torch computes in, and Python scalars are rounded to it, as TensorIterator
// does. f16/bf16 results compute in f32 and round once per op (codegen's rule), like eager.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "plan/lowering.h"

namespace fastcomp::plan::detail {
namespace {

// A Python scalar as torch converts it to dtype `t`.
double round_to(double v, DType t) {
  switch (t) {
    case DType::F32: return static_cast<float>(v);
    case DType::F16: return static_cast<double>(static_cast<_Float16>(static_cast<float>(v)));
    case DType::BF16: {
      float f = static_cast<float>(v);
      if (std::isnan(f)) return f;
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest even on the upper 16 bits
      bits &= 0xffff0000u;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case DType::Bool: return v != 0;
    case DType::F64: return v;
    default: return std::trunc(v);
  }
}

int category(DType t) { return t == DType::Bool ? 0 : is_floating(t) ? 2 : 1; }

int rank_in_category(DType t) {
  switch (t) {
    case DType::U8: return 1;
    case DType::I8: return 1;
    case DType::I16: return 2;
    case DType::I32: return 3;
    case DType::I64: return 4;
    case DType::F16:
    case DType::BF16: return 1;
    case DType::F32: return 2;
    case DType::F64: return 3;
    default: return 0;
  }
}

// torch.promote_types for the types codegen knows.
DType promote(DType a, DType b) {
  if (a == b) return a;
  if (category(a) != category(b)) return category(a) > category(b) ? a : b;
  if ((a == DType::F16 && b == DType::BF16) || (a == DType::BF16 && b == DType::F16)) return DType::F32;
  if ((a == DType::U8 && b == DType::I8) || (a == DType::I8 && b == DType::U8)) return DType::I16;
  return rank_in_category(a) >= rank_in_category(b) ? a : b;
}

// The dtype torch computes a comparison or where in: tensors of rank > 0 decide, then 0-dim tensors, and
// scalars only raise the category (a float scalar makes integer tensors the default float dtype).
DType common_dtype(Lowerer& L, const std::vector<Operand>& ops) {
  std::optional<DType> dims, zero_dim;
  int scalar_category = -1;
  for (const Operand& o : ops) {
    if (o.kind == Operand::Kind::Scalar) {
      scalar_category = std::max(scalar_category, category(o.scalar_dtype));
      continue;
    }
    const DType t = L.node_dtype(o.node);
    auto& slot = L.node(o.node).meta.sizes.empty() ? zero_dim : dims;
    slot = slot ? promote(*slot, t) : t;
  }
  DType t = dims ? (zero_dim && category(*zero_dim) > category(*dims) ? *zero_dim : *dims)
                 : zero_dim ? *zero_dim
                            : DType::F32;
  if (!dims && !zero_dim) {  // scalars only (does not happen for ops on tensors)
    return scalar_category == 2 ? DType::F32 : scalar_category == 1 ? DType::I64 : DType::Bool;
  }
  if (scalar_category > category(t)) t = scalar_category == 2 ? DType::F32 : DType::I64;
  return t;
}

// Scalars become constants of `compute`; tensor operands are cast to it by `cast_all`.
void scalars_in(std::vector<Operand>& ops, DType compute) {
  for (Operand& o : ops)
    if (o.kind == Operand::Kind::Scalar) {
      o.scalar = round_to(o.scalar, compute);
      o.scalar_dtype = compute;
    }
}

std::vector<int> cast_all(Cluster& c, const std::vector<int>& e, DType t) {
  std::vector<int> out;
  for (int x : e) out.push_back(c.cast(x, t));
  return out;
}

std::optional<ExprOp> unary_op(const std::string& op) {
  static const std::pair<const char*, ExprOp> kOps[] = {
      {"neg", ExprOp::Neg},         {"negative", ExprOp::Neg}, {"abs", ExprOp::Abs},   {"exp", ExprOp::Exp},
      {"log", ExprOp::Log},         {"sqrt", ExprOp::Sqrt},    {"rsqrt", ExprOp::Rsqrt}, {"sigmoid", ExprOp::Sigmoid},
      {"tanh", ExprOp::Tanh},       {"relu", ExprOp::Relu},    {"erf", ExprOp::Erf},   {"sin", ExprOp::Sin},
      {"cos", ExprOp::Cos},         {"silu", ExprOp::Silu}};
  for (auto& [name, e] : kOps)
    if (op == name) return e;
  return std::nullopt;
}

bool needs_float(ExprOp op) {
  return op == ExprOp::Exp || op == ExprOp::Log || op == ExprOp::Sqrt || op == ExprOp::Rsqrt ||
         op == ExprOp::Sigmoid || op == ExprOp::Tanh || op == ExprOp::Erf || op == ExprOp::Sin ||
         op == ExprOp::Cos || op == ExprOp::Silu || op == ExprOp::GeluErf || op == ExprOp::GeluTanh;
}

std::optional<ExprOp> binary_op(const std::string& op, bool* swapped) {
  static const std::pair<const char*, ExprOp> kOps[] = {
      {"add", ExprOp::Add},     {"sub", ExprOp::Sub},         {"subtract", ExprOp::Sub}, {"mul", ExprOp::Mul},
      {"multiply", ExprOp::Mul}, {"truediv", ExprOp::Div},    {"div", ExprOp::Div},      {"divide", ExprOp::Div},
      {"true_divide", ExprOp::Div}, {"pow", ExprOp::Pow},     {"maximum", ExprOp::Max},  {"minimum", ExprOp::Min},
      {"radd", ExprOp::Add},    {"rsub", ExprOp::Sub},        {"rmul", ExprOp::Mul},     {"rtruediv", ExprOp::Div},
      {"rdiv", ExprOp::Div},    {"rpow", ExprOp::Pow}};
  for (auto& [name, e] : kOps)
    if (op == name) {
      *swapped = name[0] == 'r';  // reflected: torch.rsub(x, y) and Tensor.__rsub__(x, y) are y - x
      return e;
    }
  return std::nullopt;
}

std::optional<ExprOp> comparison_op(const std::string& op) {
  static const std::pair<const char*, ExprOp> kOps[] = {
      {"lt", ExprOp::Lt}, {"le", ExprOp::Le}, {"gt", ExprOp::Gt}, {"ge", ExprOp::Ge}, {"eq", ExprOp::Eq},
      {"ne", ExprOp::Ne}, {"less", ExprOp::Lt}, {"greater", ExprOp::Gt}, {"less_equal", ExprOp::Le},
      {"greater_equal", ExprOp::Ge}, {"not_equal", ExprOp::Ne}};
  for (auto& [name, e] : kOps)
    if (op == name) return e;
  return std::nullopt;
}

// Casts: Tensor.float() and friends, .to(dtype) and .type(dtype) without a device or other options.
bool is_cast(const graph::Node& n, const std::string& op) {
  static const char* const kMethods[] = {"float", "half", "bfloat16", "double", "int", "long", "short", "bool", "byte",
                                         "char"};
  for (const char* m : kMethods)
    if (op == m && n.target_name == std::string("Tensor.") + m) return n.args.size() == 1 && !n.kwnames;
  if (op != "to" && op != "type") return false;
  CallArgs args(n);
  if (!args.only_keywords({"dtype"})) return false;
  const graph::Arg* dtype = args.get(1, "dtype");
  if (!dtype || dtype->kind != graph::Arg::Kind::Const || n.args.size() > 2) return false;
  return dtype_of(dtype->value.get()).has_value();
}

// x.to(device=d, dtype=t) (LLaMA's rotary `inv_freq.to(device=x.device, dtype=torch.float32)`) where d is x's own
// device: a cast, as is_cast's forms; without copy=True or a memory_format (neither keyword is taken).
bool is_cast_on_its_device(Lowerer& L, const graph::Node& n, const std::string& op) {
  if (op != "to" || n.target_name != "Tensor.to" || n.args.size() != 1 || n.args[0].kind != graph::Arg::Kind::Node)
    return false;
  CallArgs args(n);
  if (!args.only_keywords({"device", "dtype", "non_blocking"})) return false;
  const graph::Arg* dtype = args.get(1, "dtype");
  if (!dtype || dtype->kind != graph::Arg::Kind::Const || !dtype_of(dtype->value.get())) return false;
  return same_device(L.node(n.args[0].node).meta, n.meta);
}

// F.batch_norm in inference (training=False, running statistics given): per channel (dimension 1) the affine map
// (x - mean) * rsqrt(var + eps) * weight + bias, computed in f32 as torch's kernels do and rounded once, fused
// like any pointwise op (with the ReLU and the residual sum after it).
bool lower_batch_norm(Lowerer& L, const graph::Node& n) {
  CallArgs args(n);
  if (!args.only_keywords({"running_mean", "running_var", "weight", "bias", "training", "momentum", "eps"})) return false;
  const graph::Arg* training = args.get(5, "training");
  const std::optional<double> eps = args.get(7, "eps") ? const_number(args.get(7, "eps")) : 1e-5;
  if ((training && const_bool(training) != false) || !eps) return false;
  const DType out = L.node_dtype(n.id);
  const graph::TensorMeta& x = n.meta;
  if (!is_floating(out) || out == DType::F64 || x.sizes.size() < 2) return false;
  bool ok = true;
  std::vector<Operand> ops{operand_of(L, args.get(0, "input"), &ok)};
  if (!ok || ops[0].kind != Operand::Kind::Node) return false;
  // mean and var, then weight and bias where given: 1-d tensors of the channel count.
  int weight_at = -1, bias_at = -1;
  const std::pair<size_t, const char*> per_channel[] = {{1, "running_mean"}, {2, "running_var"}, {3, "weight"}, {4, "bias"}};
  for (const auto& [position, name] : per_channel) {
    const graph::Arg* a = args.get(position, name);
    if (position >= 3 && is_none(a)) continue;
    Operand o = operand_of(L, a, &ok);
    if (!ok || o.kind != Operand::Kind::Node) return false;
    const graph::TensorMeta& m = L.node(o.node).meta;
    if (m.sizes.size() != 1 || m.sizes[0] != x.sizes[1] || m.is_dynamic() || !is_floating(L.node_dtype(o.node)))
      return false;
    o.broadcast_dim = 1;
    if (position == 3) weight_at = static_cast<int>(ops.size());
    if (position == 4) bias_at = static_cast<int>(ops.size());
    ops.push_back(o);
  }
  const double epsilon = *eps;
  L.pointwise(n, ops, [&, weight_at, bias_at, epsilon](Cluster& c, const std::vector<int>& e) {
    const DType f = DType::F32;
    auto in = [&](int i) { return c.cast(e[i], f); };
    const int invstd = c.op(ExprOp::Rsqrt, f, {c.op(ExprOp::Add, f, {in(2), c.constant(f, round_to(epsilon, f))})});
    int y = c.op(ExprOp::Mul, f, {c.op(ExprOp::Sub, f, {in(0), in(1)}), invstd});
    if (weight_at >= 0) y = c.op(ExprOp::Mul, f, {y, in(weight_at)});
    if (bias_at >= 0) y = c.op(ExprOp::Add, f, {y, in(bias_at)});
    return c.cast(y, out);
  });
  return true;
}

}  // namespace

Operand operand_of(Lowerer& L, const graph::Arg* a, bool* ok) {
  Operand o;
  if (a && a->kind == graph::Arg::Kind::Node && L.value(a->node).tensor) {
    o.kind = Operand::Kind::Node;
    o.node = a->node;
    return o;
  }
  if (a && a->kind == graph::Arg::Kind::Const) {
    PyObject* v = a->value.get();
    if (PyBool_Check(v)) o.scalar_dtype = DType::Bool;
    else if (PyLong_Check(v)) o.scalar_dtype = DType::I64;
    else if (PyFloat_Check(v)) o.scalar_dtype = DType::F64;
    else *ok = false;
    if (auto x = const_number(a)) o.scalar = *x;
    else *ok = false;
    return o;
  }
  *ok = false;
  return o;
}

bool is_elementwise_op(const graph::Node& n, const std::string& op) {
  bool swapped = false;
  if (unary_op(op) || binary_op(op, &swapped) || comparison_op(op) || is_cast(n, op)) return true;
  if (op == "min" || op == "max")  // torch.max(a, b), not torch.max(x, dim)
    return n.args.size() == 2 && n.args[1].kind == graph::Arg::Kind::Node && !n.kwnames;
  static const char* const kOthers[] = {"gelu", "reciprocal", "square", "where", "clamp", "clip", "clamp_min",
                                        "clamp_max", "dropout", "batch_norm"};
  return std::any_of(std::begin(kOthers), std::end(kOthers), [&](const char* o) { return op == o; });
}

bool lower_pointwise_op(Lowerer& L, const graph::Node& n, const std::string& op) {
  if (n.type != graph::ValueType::Tensor || n.args.empty()) return false;
  if (op == "batch_norm" && n.target_name == "torch.nn.functional.batch_norm") return lower_batch_norm(L, n);
  const DType out = L.node_dtype(n.id);
  CallArgs args(n);
  bool ok = true;
  auto first = [&] { return operand_of(L, args.get(0, "input"), &ok); };

  if (is_cast(n, op) || is_cast_on_its_device(L, n, op) || op == "clone" || op == "contiguous" ||
      (op == "dropout" && const_bool(args.get(2, "training")) == false)) {
    if (op == "clone" && !args.only_keywords({})) return false;
    std::vector<Operand> ops{first()};
    if (!ok || ops[0].kind != Operand::Kind::Node) return false;
    L.pointwise(n, ops, [&](Cluster& c, const std::vector<int>& e) { return c.cast(e[0], out); });
    return true;
  }

  if (auto u = unary_op(op)) {
    if (!args.only_keywords({}) || n.args.size() != 1) return false;
    if (needs_float(*u) && !is_floating(out)) return false;
    std::vector<Operand> ops{first()};
    if (!ok) return false;
    L.pointwise(n, ops, [&](Cluster& c, const std::vector<int>& e) { return c.op(*u, out, {c.cast(e[0], out)}); });
    return true;
  }
  if (op == "gelu") {
    const graph::Arg* approximate = args.get(1, "approximate");
    bool tanh = false;
    if (approximate && approximate->kind == graph::Arg::Kind::Const && PyUnicode_Check(approximate->value.get()))
      tanh = PyUnicode_CompareWithASCIIString(approximate->value.get(), "tanh") == 0;
    else if (approximate) return false;
    std::vector<Operand> ops{first()};
    if (!ok || !is_floating(out)) return false;
    const ExprOp g = tanh ? ExprOp::GeluTanh : ExprOp::GeluErf;
    L.pointwise(n, ops, [&](Cluster& c, const std::vector<int>& e) { return c.op(g, out, {c.cast(e[0], out)}); });
    return true;
  }
  if (op == "reciprocal" || op == "square") {
    std::vector<Operand> ops{first()};
    if (!ok || n.args.size() != 1 || (op == "reciprocal" && !is_floating(out))) return false;
    const bool square = op == "square";
    L.pointwise(n, ops, [&](Cluster& c, const std::vector<int>& e) {
      const int x = c.cast(e[0], out);
      return square ? c.op(ExprOp::Mul, out, {x, x}) : c.op(ExprOp::Div, out, {c.constant(out, 1.0), x});
    });
    return true;
  }
  if (op == "logical_not") {
    std::vector<Operand> ops{first()};
    if (!ok || out != DType::Bool) return false;
    L.pointwise(n, ops, [&](Cluster& c, const std::vector<int>& e) {
      return c.op(ExprOp::Not, DType::Bool, {c.cast(e[0], DType::Bool)});
    });
    return true;
  }

  if ((op == "full_like" && n.args.size() == 2) || ((op == "zeros_like" || op == "ones_like") && n.args.size() == 1)) {
    // A constant over the shape and layout of the first argument (no dtype, device or layout options).
    const std::optional<double> v = op == "full_like" ? const_number(&n.args[1]) : op == "ones_like" ? 1.0 : 0.0;
    if (!v || n.kwnames || n.args[0].kind != graph::Arg::Kind::Node) return false;
    const double fill = round_to(*v, out);
    L.value_in_space(n, meta_sizes(n.meta), [&](Cluster& c) { return c.constant(out, fill); });
    return true;
  }

  if (op == "arange" && n.target_name == "torch.arange") {
    // Integer torch.arange(end), (start, end) or (start, end, step): start + i * step at flat index i (a 1-d
    // space, where the flat index is the coordinate even in a row reduction that takes it).
    const Sizes shape = meta_sizes(n.meta);
    if (is_floating(out) || out == DType::Bool || shape.size() != 1 || !args.only_keywords({"dtype", "device"}) ||
        n.args.empty() || n.args.size() > 3)
      return false;
    std::vector<int64_t> ints;
    for (const graph::Arg& a : n.args) {
      const std::optional<int64_t> v = a.kind == graph::Arg::Kind::Const ? const_int(&a) : std::nullopt;
      if (!v) return false;
      ints.push_back(*v);
    }
    const int64_t start = ints.size() > 1 ? ints[0] : 0, step = ints.size() > 2 ? ints[2] : 1;
    L.value_in_space(n, shape, [&](Cluster& c) {
      int i = c.op(ExprOp::RowIndex, DType::I64, {});
      if (step != 1) i = c.op(ExprOp::Mul, DType::I64, {i, c.constant(DType::I64, static_cast<double>(step))});
      if (start != 0) i = c.op(ExprOp::Add, DType::I64, {i, c.constant(DType::I64, static_cast<double>(start))});
      return c.cast(i, out);
    });
    return true;
  }

  bool swapped = false;
  // torch.min(a, b) and torch.max(a, b) of two tensors are torch.minimum and torch.maximum.
  const bool two_tensors = n.args.size() == 2 && !n.kwnames && n.args[1].kind == graph::Arg::Kind::Node &&
                           L.node(n.args[1].node).type == graph::ValueType::Tensor;
  if (auto b = binary_op((op == "min" || op == "max") && two_tensors ? op + "imum" : op, &swapped)) {
    if (n.args.size() != 2 && !(args.get(1, "other") && n.args.size() == 1)) return false;
    if (!args.only_keywords({"alpha", "other", "exponent"})) return false;
    std::vector<Operand> ops{first(), operand_of(L, args.get(1, op == "pow" ? "exponent" : "other"), &ok)};
    if (!ok) return false;
    if (swapped) std::swap(ops[0], ops[1]);
    if (*b == ExprOp::Div && (!is_floating(out) || args.get(2, "rounding_mode"))) return false;
    std::optional<double> alpha;
    if (const graph::Arg* a = args.get(2, "alpha")) {
      if (*b != ExprOp::Add && *b != ExprOp::Sub) return false;
      alpha = const_number(a);
      if (!alpha) return false;
    }
    if (*b == ExprOp::Pow && ops[1].kind == Operand::Kind::Scalar && is_floating(out)) {
      ops[1].scalar_dtype = opmath(out);  // the exponent stays exact: torch special-cases 2, 0.5, -1, ...
    } else {
      scalars_in(ops, out);
    }
    const ExprOp e_op = *b;
    L.pointwise(n, ops, [&, e_op](Cluster& c, const std::vector<int>& e) {
      int lhs = c.cast(e[0], out);
      int rhs = e_op == ExprOp::Pow && c.dtype_of(e[1]) == opmath(out) && is_floating(out) ? e[1] : c.cast(e[1], out);
      if (alpha) rhs = c.op(ExprOp::Mul, out, {rhs, c.constant(out, round_to(*alpha, out))});
      if (e_op == ExprOp::Pow && (out == DType::F16 || out == DType::BF16)) {
        // torch's CUDA pow multiplies f16/bf16 values in their own type for these exponents, rounding after
        // each product: x*x*x is two rounded products, not one.
        const codegen::Expr& exponent = c.expr(rhs);
        if (exponent.op == ExprOp::Constant && exponent.constant == 3)
          return c.op(ExprOp::Mul, out, {c.op(ExprOp::Mul, out, {lhs, lhs}), lhs});
        if (exponent.op == ExprOp::Constant && exponent.constant == -2)
          return c.op(ExprOp::Div, out, {c.constant(out, 1.0), c.op(ExprOp::Mul, out, {lhs, lhs})});
      }
      return c.op(e_op, out, {lhs, rhs});
    });
    return true;
  }
  if (auto cmp = comparison_op(op)) {
    if (n.args.size() != 2 || n.kwnames || out != DType::Bool) return false;
    std::vector<Operand> ops{first(), operand_of(L, &n.args[1], &ok)};
    if (!ok) return false;
    const DType compute = common_dtype(L, ops);
    scalars_in(ops, compute);
    const ExprOp e_op = *cmp;
    L.pointwise(n, ops, [&, e_op, compute](Cluster& c, const std::vector<int>& e) {
      return c.op(e_op, DType::Bool, cast_all(c, e, compute));
    });
    return true;
  }
  if (op == "logical_and" || op == "logical_or" || op == "and_" || op == "or_" || op == "and" || op == "or" ||
      op == "bitwise_and" || op == "bitwise_or") {
    if (n.args.size() != 2 || n.kwnames || is_floating(out)) return false;
    std::vector<Operand> ops{first(), operand_of(L, &n.args[1], &ok)};
    if (!ok) return false;
    const bool logical = op.rfind("logical_", 0) == 0;
    const ExprOp e_op = op.find("and") != std::string::npos ? ExprOp::And : ExprOp::Or;
    const DType compute = logical ? DType::Bool : out;
    scalars_in(ops, compute);
    L.pointwise(n, ops, [&, e_op, compute](Cluster& c, const std::vector<int>& e) {
      return c.op(e_op, compute, cast_all(c, e, compute));
    });
    return true;
  }
  if (op == "where") {
    if (n.args.size() != 3 || n.kwnames) return false;
    std::vector<Operand> ops{first(), operand_of(L, &n.args[1], &ok), operand_of(L, &n.args[2], &ok)};
    if (!ok || ops[0].kind != Operand::Kind::Node) return false;
    std::vector<Operand> arms{ops[1], ops[2]};
    scalars_in(arms, out);
    ops[1] = arms[0];
    ops[2] = arms[1];
    L.pointwise(n, ops, [&](Cluster& c, const std::vector<int>& e) {
      return c.op(ExprOp::Where, out, {c.cast(e[0], DType::Bool), c.cast(e[1], out), c.cast(e[2], out)});
    });
    return true;
  }
  if (op == "clamp" || op == "clip" || op == "clamp_min" || op == "clamp_max") {
    if (!args.only_keywords({"min", "max"})) return false;
    const graph::Arg* lo = op == "clamp_max" ? nullptr : args.get(1, "min");
    const graph::Arg* hi = op == "clamp_min" ? nullptr : args.get(op == "clamp_max" ? 1 : 2, "max");
    std::vector<Operand> ops{first()};
    int lo_at = -1, hi_at = -1;
    if (!is_none(lo)) {
      lo_at = static_cast<int>(ops.size());
      ops.push_back(operand_of(L, lo, &ok));
    }
    if (!is_none(hi)) {
      hi_at = static_cast<int>(ops.size());
      ops.push_back(operand_of(L, hi, &ok));
    }
    if (!ok || ops.size() == 1) return false;
    scalars_in(ops, out);
    // torch.clamp propagates NaN from the input: min(max(x, lo), hi) with NaN-propagating max/min.
    L.pointwise(n, ops, [&, lo_at, hi_at](Cluster& c, const std::vector<int>& e) {
      int x = c.cast(e[0], out);
      if (lo_at >= 0) x = c.op(ExprOp::Max, out, {x, c.cast(e[lo_at], out)});
      if (hi_at >= 0) x = c.op(ExprOp::Min, out, {x, c.cast(e[hi_at], out)});
      return x;
    });
    return true;
  }
  return false;
}

}  // namespace fastcomp::plan::detail
