// In-place pointwise ops - x.add_(y), x += y, F.relu(x, inplace=True) - as their functional ops. The graph is
// imperative: a later reader of x (through the op's result node, or x's own node) must see the new values. When
// nothing else shares x's memory (no view of it, no torch object of it handed out, not a graph input), the new
// values are simply x's value from here on: readers lowered before the op keep the old expression (or buffer),
// readers after it get the new one, and the op fuses like any other. ResNet's `out += shortcut; relu_(out)` after
// a batch norm becomes one kernel. Everything else runs as a call into torch, which writes the tensor.
#include <algorithm>

#include "plan/lowering.h"
#include "support/pystr.h"

namespace fastcomp::plan::detail {

graph::Node functional_form(const graph::Node& n) {
  graph::Node f = n;
  const std::string& t = n.target_name;
  const size_t dot = t.rfind('.') + 1;
  if (t.rfind("operator.i", 0) == 0) {
    f.target_name = "operator." + t.substr(10);
  } else if (t.size() > dot + 1 && t.back() == '_') {
    f.target_name = t.substr(0, t.size() - 1);
  }
  if (const int position = graph::functional_inplace_position(n); position >= 0)
    f.args.erase(f.args.begin() + position);
  if (n.kwnames) {
    std::vector<PyObject*> names;
    f.kwargs.clear();
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(n.kwnames.get()); ++i) {
      PyObject* name = PyTuple_GET_ITEM(n.kwnames.get(), i);
      if (utf8(name) == "inplace") continue;
      names.push_back(name);
      f.kwargs.push_back(n.kwargs[i]);
    }
    f.kwnames = PyRef();
    if (!names.empty()) {
      f.kwnames = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(names.size())));
      for (size_t i = 0; i < names.size(); ++i) PyTuple_SET_ITEM(f.kwnames.get(), i, Py_NewRef(names[i]));
    }
  }
  return f;
}

bool has_inplace_keyword(const graph::Node& n) {
  if (n.kwnames)
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(n.kwnames.get()); ++i)
      if (utf8(PyTuple_GET_ITEM(n.kwnames.get(), i)) == "inplace") return true;
  return false;
}

namespace {

bool same_layout(const graph::TensorMeta& a, const graph::TensorMeta& b) {
  return a.sizes == b.sizes && a.strides == b.strides && a.storage_offset == b.storage_offset &&
         a.sym_sizes == b.sym_sizes && a.sym_strides == b.sym_strides &&
         PyObject_RichCompareBool(a.dtype.get(), b.dtype.get(), Py_EQ) == 1;
}

// Whether every tensor argument has x's dtype: torch computes x.add_(y) in the promoted type and rounds to x's,
// where the functional op of x's result dtype would round y first.
bool tensors_of_dtype(const Lowerer& L, const graph::Node& n, DType t) {
  auto check = [&](const graph::Arg& a) {
    return a.kind != graph::Arg::Kind::Node || L.node(a.node).type != graph::ValueType::Tensor ||
           L.node_dtype(a.node) == t;
  };
  return std::all_of(n.args.begin(), n.args.end(), check) && std::all_of(n.kwargs.begin(), n.kwargs.end(), check);
}

}  // namespace

bool Lowerer::only_the_graph_holds(graph::NodeId x, graph::NodeId at) const {
  const graph::Node& node = graph_.nodes[x];
  const Value& v = values_[x];
  if (node.kind == graph::NodeKind::Input || !v.tensor || v.view_base >= 0 || !v.items.empty() ||
      program_.node_object[x])
    return false;
  if (v.buffer < 0) return true;  // lazy: no memory yet
  const Buffer& b = program_.buffers[v.buffer];
  if (b.kind != Buffer::Kind::Alloc || b.root != v.buffer || b.node != x) return false;
  for (size_t i = 0; i < program_.buffers.size(); ++i)
    if (program_.buffers[i].root == v.buffer && static_cast<int>(i) != v.buffer) return false;  // a view of it
  for (graph::NodeId id = 0; id < at; ++id)
    if (id != x && (values_[id].buffer == v.buffer || values_[id].view_base == v.buffer)) return false;
  return true;
}

bool Lowerer::lower_in_place(const graph::Node& n) {
  if (n.type != graph::ValueType::Tensor || n.args.empty()) return false;
  const bool on_a_tensor =
      n.args[0].kind == graph::Arg::Kind::Node && graph_.nodes[n.args[0].node].type == graph::ValueType::Tensor;
  // `total = 0; total += t`: an int has no in-place add, so Python's += made a new tensor.
  if (!on_a_tensor) {
    const graph::Node f = functional_form(n);
    return n.target_name.rfind("operator.i", 0) == 0 && lower_pointwise_op(*this, f, op_name(f.target_name));
  }
  const graph::NodeId x = n.args[0].node;
  if (!same_layout(graph_.nodes[x].meta, n.meta)) return false;
  // After the op, the tensor is read through one node: the op's result (the tracer's way) or x itself.
  const bool x_read_later = last_use_[x] > n.id, result_read_later = last_use_[n.id] > n.id;
  if ((x_read_later && result_read_later) || !only_the_graph_holds(x, n.id)) return false;
  if (!tensors_of_dtype(*this, n, node_dtype(x))) return false;
  const graph::Node f = functional_form(n);
  if (graph::writes_an_argument(f) || !lower_pointwise_op(*this, f, op_name(f.target_name))) return false;
  if (x_read_later) values_[x] = values_[n.id];
  return true;
}

}  // namespace fastcomp::plan::detail
