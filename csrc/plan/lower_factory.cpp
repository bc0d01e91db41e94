// Tensors made from nothing inside a graph: torch.zeros/ones/full/empty, their _like and Tensor.new_ forms, and any
// factory whose result has no elements (transformers' caches start each layer's keys as torch.tensor([])). Their
// value is a constant over the result's shape, which consumers fuse like any other expression (a kernel writes it
// only where something needs the tensor itself); empty ones and those without elements are an allocation alone.
#include "plan/lowering.h"

namespace fastcomp::plan::detail {
namespace {

enum class Fill { None, Zero, One, Value };

// The fill of a factory op; nullopt for other ops.
std::optional<Fill> factory_fill(const graph::Node& n, const std::string& op) {
  const bool method = n.target_name.rfind("Tensor.", 0) == 0;
  const bool function = n.target_name.rfind("torch.", 0) == 0;
  if (function && (op == "zeros" || op == "zeros_like")) return Fill::Zero;
  if (function && (op == "ones" || op == "ones_like")) return Fill::One;
  if (function && (op == "full" || op == "full_like")) return Fill::Value;
  if (function && (op == "empty" || op == "empty_like")) return Fill::None;
  if (method && op == "new_zeros") return Fill::Zero;
  if (method && op == "new_ones") return Fill::One;
  if (method && op == "new_full") return Fill::Value;
  if (method && op == "new_empty") return Fill::None;
  return std::nullopt;
}

// The keywords a factory may carry and still be a plain allocation of the node's metadata (dtype and device are
// in it); layout strided, no pinned memory, no gradient.
bool plain_keywords(const graph::Node& n) {
  if (!n.kwnames) return true;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(n.kwnames.get()); ++i) {
    const std::string key = PyUnicode_AsUTF8(PyTuple_GET_ITEM(n.kwnames.get(), i));
    const graph::Arg& a = n.kwargs[i];
    if (key == "dtype" || key == "device" || key == "fill_value") continue;
    if ((key == "pin_memory" || key == "requires_grad") && (is_none(&a) || const_bool(&a) == false)) continue;
    if (key == "layout" && is_none(&a)) continue;
    return false;  // memory_format (the _like forms' layout), out=, a strided layout given by name, ...
  }
  return true;
}

int64_t element_count(const graph::TensorMeta& m) {
  int64_t n = 1;
  for (int64_t s : m.sizes) n *= s;
  return n;
}

}  // namespace

bool lower_factory_op(Lowerer& L, const graph::Node& n, const std::string& op) {
  if (n.type != graph::ValueType::Tensor || n.meta.requires_grad || n.meta.is_dynamic()) return false;
  const std::optional<Fill> fill = factory_fill(n, op);
  const bool no_elements = element_count(n.meta) == 0 && n.target_name.rfind("torch.", 0) == 0 && op == "tensor";
  if (!fill && !no_elements) return false;
  if (!plain_keywords(n) || !dtype_of(n.meta.dtype.get())) return false;
  if (!is_dense(meta_sizes(n.meta), meta_strides(n.meta))) return false;
  if (no_elements || *fill == Fill::None || element_count(n.meta) == 0) {
    L.add_node_buffer(n, Buffer::Kind::Alloc);  // nothing to write: torch.empty's contents are undefined too
    return true;
  }
  Operand value;
  value.scalar_dtype = DType::I64;
  value.scalar = *fill == Fill::One ? 1 : 0;
  if (*fill == Fill::Value) {
    bool ok = true;
    value = operand_of(L, CallArgs(n).get(op == "new_full" ? 2 : 1, "fill_value"), &ok);
    if (!ok || value.kind != Operand::Kind::Scalar) return false;
  }
  const DType out = L.node_dtype(n.id);
  L.pointwise(n, {value}, [out](Cluster& c, const std::vector<int>& e) { return c.cast(e[0], out); });
  return true;
}

}  // namespace fastcomp::plan::detail
