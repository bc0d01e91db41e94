// Names and the text form of the kernel IR. The text is what golden tests and FASTCOMP_DUMP_DIR compare, so
// its layout only changes on purpose.
#include "codegen/kernel_ir.h"

#include <fmt/format.h>

namespace fastcomp::codegen {
namespace {

// "d1=[0,512)"
std::string range_text(const DimRange& r) {
  return fmt::format("d{}=[{},{})", r.dim, r.begin.to_string(), r.end.to_string());
}

std::string operand_text(const char* prefix, size_t i, const Operand& o) {
  std::string out = fmt::format("  {}{} {} strides=[{}]", prefix, i, dtype_name(o.dtype), join_sizes(o.strides));
  if (o.storage_offset != 0) out += fmt::format(" offset={}", o.storage_offset.to_string());
  if (o.valid.dim >= 0) out += " valid " + range_text(o.valid);
  return out + "\n";
}

}  // namespace

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::U8: return "u8";
    case DType::I8: return "i8";
    case DType::I16: return "i16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::F32: return "f32";
    case DType::F64: return "f64";
  }
  return "?";
}

const char* dtype_c_type(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::U8: return "uint8_t";
    case DType::I8: return "int8_t";
    case DType::I16: return "int16_t";
    case DType::I32: return "int32_t";
    case DType::I64: return "int64_t";
    case DType::F16: return "fc_f16";
    case DType::BF16: return "fc_bf16";
    case DType::F32: return "float";
    case DType::F64: return "double";
  }
  return "?";
}

int dtype_size(DType t) {
  switch (t) {
    case DType::Bool:
    case DType::U8:
    case DType::I8: return 1;
    case DType::I16:
    case DType::F16:
    case DType::BF16: return 2;
    case DType::I32:
    case DType::F32: return 4;
    case DType::I64:
    case DType::F64: return 8;
  }
  return 0;
}

bool is_reduce(ExprOp op) { return op == ExprOp::ReduceSum || op == ExprOp::ReduceMax || op == ExprOp::ReduceMin; }

const char* expr_op_name(ExprOp op) {
  switch (op) {
    case ExprOp::Load: return "load";
    case ExprOp::Constant: return "constant";
    case ExprOp::RowIndex: return "row_index";
    case ExprOp::InRange: return "in_range";
    case ExprOp::Gather: return "gather";
    case ExprOp::Neg: return "neg";
    case ExprOp::Abs: return "abs";
    case ExprOp::Exp: return "exp";
    case ExprOp::Log: return "log";
    case ExprOp::Sqrt: return "sqrt";
    case ExprOp::Rsqrt: return "rsqrt";
    case ExprOp::Sigmoid: return "sigmoid";
    case ExprOp::Tanh: return "tanh";
    case ExprOp::Relu: return "relu";
    case ExprOp::Erf: return "erf";
    case ExprOp::Sin: return "sin";
    case ExprOp::Cos: return "cos";
    case ExprOp::GeluErf: return "gelu_erf";
    case ExprOp::GeluTanh: return "gelu_tanh";
    case ExprOp::Silu: return "silu";
    case ExprOp::Not: return "not";
    case ExprOp::Cast: return "cast";
    case ExprOp::Add: return "add";
    case ExprOp::Sub: return "sub";
    case ExprOp::Mul: return "mul";
    case ExprOp::Div: return "div";
    case ExprOp::Pow: return "pow";
    case ExprOp::Max: return "max";
    case ExprOp::Min: return "min";
    case ExprOp::Lt: return "lt";
    case ExprOp::Le: return "le";
    case ExprOp::Gt: return "gt";
    case ExprOp::Ge: return "ge";
    case ExprOp::Eq: return "eq";
    case ExprOp::Ne: return "ne";
    case ExprOp::And: return "and";
    case ExprOp::Or: return "or";
    case ExprOp::Where: return "where";
    case ExprOp::ReduceSum: return "reduce_sum";
    case ExprOp::ReduceMax: return "reduce_max";
    case ExprOp::ReduceMin: return "reduce_min";
  }
  return "?";
}

// kernel <name> <kind> shape=[...] [reduced=[<dim>,...]]
//     [scale=<attention scale> [causal] [keys=<S>] [kv_heads=<Hk>] [rounding=probabilities|output]]
//   in<i> <dtype> strides=[...] [offset=<n>] [valid d<dim>=[<begin>,<end>)]
//   out<i> ...
//   e<i> = <op> <dtype> [in<operand> [size=<n> stride=<n>] | <constant> | d<dim>=[<begin>,<end>) | e<arg> ...]
//   store e<expr> -> out<output>
std::vector<Operand*> operand_copies(Kernel& k, size_t i) {
  const size_t n_in = k.inputs.size();
  std::vector<Operand*> out{i < n_in ? &k.inputs[i] : &k.outputs[i - n_in]};
  size_t at = i < n_in ? i : i - n_in;  // among the combo's inputs, or its outputs
  for (Kernel& part : k.parts) {
    std::vector<Operand>& ops = i < n_in ? part.inputs : part.outputs;
    if (at < ops.size()) {
      out.push_back(&ops[at]);
      break;
    }
    at -= ops.size();
  }
  return out;
}

// A combo: "kernel <name> combo of <n>" and its parts' texts, each line indented once more.
std::string Kernel::to_string() const {
  if (kind == Kind::Combo) {
    std::string out = fmt::format("kernel {} combo of {}\n", name, parts.size());
    for (const Kernel& part : parts) {
      const std::string text = part.to_string();
      for (size_t at = 0; at < text.size();) {
        const size_t end = text.find('\n', at);
        out += "  " + text.substr(at, end - at + 1);
        at = end + 1;
      }
    }
    return out;
  }
  const char* kind_text = kind == Kind::Pointwise      ? "pointwise"
                          : kind == Kind::RowReduce    ? "row_reduce"
                          : kind == Kind::ColumnReduce ? "column_reduce"
                          : kind == Kind::Attention    ? "attention"
                                                       : "small_matmul";
  std::string out = fmt::format("kernel {} {} shape=[{}]", name, kind_text, join_sizes(shape));
  if (kind == Kind::ColumnReduce) {
    std::string dims;
    for (size_t d = 0; d < reduced_dims.size(); ++d)
      if (reduced_dims[d]) dims += (dims.empty() ? "" : ",") + std::to_string(d);
    out += " reduced=[" + dims + "]";
  }
  if (kind == Kind::Attention)
    out += fmt::format(" scale={}{}{}{}{}", attention_scale, attention_causal ? " causal" : "",
                       attention_keys ? fmt::format(" keys={}", attention_keys) : "",
                       attention_kv_heads ? fmt::format(" kv_heads={}", attention_kv_heads) : "",
                       attention_rounding == AttentionRounding::Probabilities ? " rounding=probabilities"
                       : attention_rounding == AttentionRounding::Output      ? " rounding=output"
                                                                              : "");
  out += "\n";
  for (size_t i = 0; i < inputs.size(); ++i) out += operand_text("in", i, inputs[i]);
  for (size_t i = 0; i < outputs.size(); ++i) out += operand_text("out", i, outputs[i]);
  for (size_t i = 0; i < exprs.size(); ++i) {
    const Expr& e = exprs[i];
    out += fmt::format("  e{} = {} {}", i, expr_op_name(e.op), dtype_name(e.dtype));
    if (e.op == ExprOp::Load) out += fmt::format(" in{}", e.operand);
    if (e.op == ExprOp::Gather)
      out += fmt::format(" in{} size={} stride={}", e.operand, e.gather.size.to_string(), e.gather.stride.to_string());
    if (e.op == ExprOp::Constant) out += fmt::format(" {}", e.constant);  // shortest text that round-trips
    if (e.op == ExprOp::InRange) out += " " + range_text(e.range);
    for (int a : e.args) out += fmt::format(" e{}", a);
    out += "\n";
  }
  for (const Store& s : stores) out += fmt::format("  store e{} -> out{}\n", s.expr, s.output);
  return out;
}

}  // namespace fastcomp::codegen
