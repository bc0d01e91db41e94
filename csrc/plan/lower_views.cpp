// Views as index arithmetic: a view, permute, transpose, expand, slice, split, ... of a buffer is another
// layout of the same storage, taken from the node's metadata (torch computed it on meta tensors). No kernel
// and no copy; a consumer kernel reads the storage with the view's strides. A reshape of a value still an
// expression of an open kernel stays one (Lowerer::defer_reshape), so ops on it alone join that kernel.
#include "plan/lowering.h"

namespace fastcomp::plan::detail {
namespace {

// Ops whose result always shares its input's storage.
bool always_view(const std::string& op) {
  static const char* const kOps[] = {"view",   "permute", "transpose", "swapaxes", "t",      "expand",
                                     "expand_as", "unsqueeze", "squeeze", "narrow", "select", "detach",
                                     "unflatten", "movedim",   "alias",   "view_as"};
  for (const char* o : kOps)
    if (op == o) return true;
  return false;
}

// Ops returning a tuple of views of their input; the tracer adds one getitem node per item.
bool splits(const std::string& op) {
  return op == "split" || op == "chunk" || op == "unbind" || op == "tensor_split" || op == "split_with_sizes";
}

// x.T and x.mT: the tracer records tensor-valued attributes as getattr(x, name) calls. (mH and H conjugate,
// which only a complex tensor notices; the backend has no complex kernels, so they stay calls into torch.)
bool transposing_attribute(const graph::Node& n) {
  if (n.args.size() != 2 || n.args[1].kind != graph::Arg::Kind::Const) return false;
  PyObject* name = n.args[1].value.get();
  return PyUnicode_Check(name) &&
         (PyUnicode_CompareWithASCIIString(name, "T") == 0 || PyUnicode_CompareWithASCIIString(name, "mT") == 0);
}

// An index made only of ints, slices (step > 0), None and Ellipsis: torch returns a view.
bool basic_index(const graph::Arg& a) {
  if (a.kind == graph::Arg::Kind::Tuple || a.kind == graph::Arg::Kind::List) {
    if (a.kind == graph::Arg::Kind::List) return false;  // a list index is advanced indexing
    for (const auto& item : a.items)
      if (!basic_index(item)) return false;
    return true;
  }
  if (a.kind != graph::Arg::Kind::Const) return false;
  PyObject* v = a.value.get();
  if (PyTuple_Check(v)) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(v); ++i) {
      graph::Arg item = graph::Arg::of_const(PyRef::borrow(PyTuple_GET_ITEM(v, i)));
      if (!basic_index(item)) return false;
    }
    return true;
  }
  if (PyBool_Check(v)) return false;  // x[True] adds a dimension by masking
  return PyLong_Check(v) || PySlice_Check(v) || v == Py_None || v == Py_Ellipsis;
}

// The buffer of tensor node `input`, when its layout is the one its metadata describes (a view's metadata is
// relative to that layout); -1 otherwise.
int base_buffer(Lowerer& L, graph::NodeId input) {
  if (!L.value(input).tensor) return -1;
  const int b = L.buffer_for(input);
  const Buffer& buf = L.buffer(b);
  const graph::TensorMeta& meta = L.node(input).meta;
  return buf.sizes == meta_sizes(meta) && buf.strides == meta_strides(meta) ? b : -1;
}

// Under dynamic shapes the tracer records a view's storage offset only as a number. Views that keep their base's
// offset keep it for every size; one that moves it (narrow, select, indexing, a split's items) may move it by an
// amount that depends on the sizes. Such a view of a dynamic tensor runs as a call into torch (kernels read its
// result in place), except a split's items where the offset is provably constant (split_offset_static).
bool offset_moves(const std::string& op) {
  return op == "narrow" || op == "select" || op == "getitem" || op == "split" || op == "chunk" || op == "unbind" ||
         op == "tensor_split" || op == "split_with_sizes";
}

// A split item's offset from its base is start * stride along the split dimension: constant when the base's
// size and stride there are (so is every item's start), and when no dimension is split (the whole base).
bool split_offset_static(const Lowerer& L, const graph::Node& item, graph::NodeId base) {
  const Sizes sizes = meta_sizes(item.meta), base_sizes = meta_sizes(L.node(base).meta);
  const Sizes base_strides = meta_strides(L.node(base).meta);
  if (sizes.size() != base_sizes.size()) return false;  // unbind drops the dimension
  for (size_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] != base_sizes[d] && (!base_sizes[d].is_static() || !base_strides[d].is_static())) return false;
  return true;
}

// x.to(device), x.to(dtype), x.to(other), x.type(dtype), x.cuda(), x.cpu() that change nothing: torch gives x back
// itself (GPT-2's `position_embeds.to(inputs_embeds.device)`), so the result is the input's buffer. Without copy=True
// or a memory_format; dtype and device as the input's, from the metadata torch computed.
bool gives_input_back(const Lowerer& L, const graph::Node& n, const std::string& op) {
  if (op != "to" && op != "type" && op != "cuda" && op != "cpu") return false;
  if (n.target_name.rfind("Tensor.", 0) != 0 || n.type != graph::ValueType::Tensor) return false;
  CallArgs args(n);
  // Positionally at most (device or dtype or other, dtype or non_blocking): copy comes later.
  if (!args.only_keywords({"device", "dtype", "non_blocking"}) || args.positional() > 3) return false;
  const graph::TensorMeta& in = L.node(n.args[0].node).meta;
  const graph::TensorMeta& out = n.meta;
  if (in.dtype.get() != out.dtype.get() || !same_device(in, out)) return false;
  return in.sizes == out.sizes && in.strides == out.strides && in.storage_offset == out.storage_offset;
}

}  // namespace

bool Lowerer::defer_reshape(const graph::Node& n, graph::NodeId input) {
  // Without in-place writes, nothing can tell the deferred view from torch's until its buffer exists, and then
  // it is a view of its base's buffer (materialize).
  if (writes_arguments_ || graph_.is_dynamic() || n.type != graph::ValueType::Tensor) return false;
  const Value& in = values_[input];
  if (!in.tensor || in.cluster < 0 || in.row || in.buffer >= 0) return false;
  const int c = cluster_of(in.cluster);
  if (clusters_[c]->sealed() || node_dtype(n.id) != node_dtype(input)) return false;
  const Sizes sizes = meta_sizes(n.meta), in_sizes = meta_sizes(graph_.nodes[input].meta);
  // The input as the cluster computes it (its own shape, or a reshape already), laid out contiguously wherever it
  // is stored; the view contiguous over the same elements from the same offset.
  if (!in.reshaped && clusters_[c]->space() != in_sizes) return false;
  if (!is_contiguous(in_sizes, node_strides(input)) || !is_contiguous(in_sizes, meta_strides(graph_.nodes[input].meta)) ||
      !is_contiguous(sizes, meta_strides(n.meta)) || codegen::product(sizes) != codegen::product(in_sizes) ||
      n.meta.storage_offset != graph_.nodes[input].meta.storage_offset)
    return false;
  Value& v = values_[n.id];
  v.tensor = true;
  v.cluster = c;
  v.expr = in.expr;
  v.reshaped = sizes != clusters_[c]->space();
  v.reshape_of = input;
  return true;
}

bool Lowerer::pointwise_on_reshaped(const graph::Node& n, const std::vector<Operand>& operands, const PointwiseFn& fn) {
  graph::NodeId x = -1;
  for (const Operand& o : operands) {
    if (o.kind != Operand::Kind::Node) continue;
    if (o.broadcast_dim >= 0 || (x >= 0 && o.node != x)) return false;
    x = o.node;
  }
  if (x < 0 || !values_[x].reshaped || values_[x].cluster < 0) return false;
  const int c = cluster_of(values_[x].cluster);
  const Sizes out = meta_sizes(n.meta);
  if (clusters_[c]->sealed() || out != meta_sizes(graph_.nodes[x].meta) || !is_contiguous(out, node_strides(n.id)))
    return false;
  Cluster& cl = *clusters_[c];
  std::vector<int> exprs;
  for (const Operand& o : operands)
    exprs.push_back(o.kind == Operand::Kind::Scalar ? cl.constant(o.scalar_dtype, o.scalar) : values_[x].expr);
  bind_lazy(n, c, fn(cl, exprs), false);
  values_[n.id].reshaped = true;
  return true;
}

bool lower_view_op(Lowerer& L, const graph::Node& n, const std::string& op) {
  if (n.args.empty() || n.args[0].kind != graph::Arg::Kind::Node) return false;
  const graph::NodeId input = n.args[0].node;
  if (gives_input_back(L, n, op)) {
    // A value still an expression stays one (as a cast to its own dtype is), else a view of its buffer.
    if (L.lazy_cluster(input)) {
      bool ok = true;
      L.pointwise(n, {operand_of(L, &n.args[0], &ok)}, [](Cluster&, const std::vector<int>& e) { return e[0]; });
      return true;
    }
    const int b = base_buffer(L, input);
    if (b < 0) return false;
    L.add_view(n, b);
    return true;
  }
  if (op == "getitem" && n.target_name == "operator.getitem" && L.value(input).view_base >= 0) {
    // An item of a split: its base is the split's input.
    const graph::Node& split = L.node(input);
    if (L.graph().is_dynamic() && !split_offset_static(L, n, split.args[0].node))
      return L.decline("an item of a split whose offset depends on the sizes");
    L.add_view(n, L.value(input).view_base);
    return true;
  }
  if (op == "getitem" && n.target_name == "operator.getitem" && !L.value(input).items.empty()) {
    // An item of a tuple lowering built itself: its buffer, or nothing for an item that never exists.
    const std::vector<int>& items = L.value(input).items;
    const auto i = n.args.size() == 2 ? const_int(&n.args[1]) : std::nullopt;
    if (!i || *i < 0 || *i >= static_cast<int64_t>(items.size())) return false;  // torch makes it from the tuple
    if (items[*i] >= 0) {
      L.value(n.id).tensor = true;
      L.value(n.id).buffer = items[*i];
    }
    return true;
  }
  if (splits(op)) {
    const int b = base_buffer(L, input);
    if (b < 0) return false;
    L.value(n.id).view_base = b;
    return true;
  }
  if (n.type != graph::ValueType::Tensor) return false;
  const bool reshape = op == "reshape" || op == "flatten" || op == "contiguous" || op == "reshape_as";
  const bool getitem = op == "getitem" && n.args.size() == 2 && basic_index(n.args[1]);
  const bool attribute = op == "getattr" && transposing_attribute(n);
  if (!always_view(op) && !reshape && !getitem && !attribute) return false;
  if (op == "contiguous" && n.args.size() > 1) return false;  // a memory_format
  if (L.graph().is_dynamic() && offset_moves(op) && (L.node(input).meta.is_dynamic() || n.meta.is_dynamic()))
    return L.decline(op + " of a dynamic tensor: its storage offset may depend on the sizes");
  if (L.defer_reshape(n, input)) return true;
  const int b = base_buffer(L, input);
  if (b < 0) return false;
  if (reshape) {
    const Buffer& from = L.buffer(b);
    const bool out_contiguous = is_contiguous(meta_sizes(n.meta), meta_strides(n.meta));
    // torch made a view when the input was contiguous or the result is not; otherwise it may have copied,
    // and the copy's contents are the input's elements in row-major order.
    if (!is_contiguous(from.sizes, from.strides) && out_contiguous) {
      if (op == "contiguous") return false;  // a pointwise copy (lower_pointwise.cpp)
      const int copy = L.contiguous_copy(b);
      L.add_view(n, copy);
      return true;
    }
  }
  L.add_view(n, b);
  return true;
}

}  // namespace fastcomp::plan::detail
