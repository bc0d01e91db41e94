// Extern steps - calls into torch inside a plan - and the torch objects they take. A value computed by a kernel
// or a cuBLASLt call is a buffer, whose tensor the runtime allocates; a view (or a split's tuple) exists as a
// torch object only where torch makes it, by calling the view's op on its base's object when first needed. An
// extern that writes an argument first makes every lazy value and live view it could disturb.
#include <fmt/format.h>

#include <algorithm>

#include "plan/channels_last.h"
#include "plan/lowering.h"

namespace fastcomp::plan {
namespace detail {

void Lowerer::ensure_objects(const graph::Arg& a) {
  if (a.kind == graph::Arg::Kind::Node) ensure_object(a.node);
  for (const auto& item : a.items) ensure_objects(item);
}

void Lowerer::ensure_object(graph::NodeId id) {
  if (program_.node_object[id]) return;
  Value& v = values_[id];
  if (v.tensor) {
    const int b = buffer_for(id);
    const Buffer& buf = program_.buffers[b];
    if (buf.kind != Buffer::Kind::View && buf.node == id) {
      program_.node_object[id] = true;  // the buffer's own tensor
      return;
    }
  }
  // A view of a buffer of static layout and the root's dtype: one as_strided call on the root's tensor, however
  // many views it is a view of (repeat_kv's getitem, expand and reshape before an attention call). Only of a tensor
  // fastcomp allocates or an input, whose layout is the planned one: a torch result may come back in another
  // layout (then kernels read a copy, CudaExecutable::run_extern), and a view must alias the result itself.
  if (v.tensor) {
    const Buffer& buf = program_.buffers[values_[id].buffer];
    const Buffer& root = program_.buffers[buf.root];
    if (buf.kind == Buffer::Kind::View && (root.kind == Buffer::Kind::Alloc || root.kind == Buffer::Kind::Input) &&
        buf.dtype == root.dtype && codegen::all_static(buf.sizes) && codegen::all_static(buf.strides) &&
        buf.offset.is_static()) {
      add_extern_step({id, "", true});
      program_.node_object[id] = true;
      return;
    }
  }
  // A view (or a split's tuple) exists as a torch object only when torch makes it: call the node's op.
  const graph::Node& n = graph_.nodes[id];
  for (const auto& a : n.args) ensure_objects(a);
  for (const auto& a : n.kwargs) ensure_objects(a);
  add_extern_step({id});
  program_.node_object[id] = true;
}

void Lowerer::ensure_argument_objects(const graph::Node& n, const ExternStep& step) {
  for (size_t i = 0; i < n.args.size() + n.kwargs.size(); ++i)
    if (static_cast<int>(i) != step.bias_at && step.passed_buffer(i) < 0)
      ensure_objects(i < n.args.size() ? n.args[i] : n.kwargs[i - n.args.size()]);
}

void Lowerer::add_extern_step(ExternStep step) {
  program_.steps.push_back({Step::Kind::Extern, static_cast<int>(program_.extern_steps.size())});
  program_.extern_steps.push_back(std::move(step));
}

void Lowerer::flush_live_values(graph::NodeId at) {
  for (graph::NodeId id = 0; id < at; ++id)
    if (values_[id].tensor && values_[id].cluster >= 0 && last_use_[id] > at) buffer_for(id);
  for (size_t c = 0; c < clusters_.size(); ++c)
    if (merged_into_[c] < 0 && clusters_[c]->has_stores()) seal(static_cast<int>(c));
}

// The root buffers that making `id`'s torch object (ensure_object: its op called on its arguments' objects) would
// read: its arguments' roots, and for arguments without objects yet, what making theirs reads. A view of a copy
// (a reshape that could not be a view) has a root of its own, but making its object reads the copied tensor.
void Lowerer::roots_read_to_make(graph::NodeId id, std::vector<int>& roots) const {
  const graph::Node& n = graph_.nodes[id];
  auto visit = [&](const graph::Arg& a, const auto& self) -> void {
    if (a.kind == graph::Arg::Kind::Node && values_[a.node].tensor && values_[a.node].buffer >= 0) {
      roots.push_back(program_.buffers[values_[a.node].buffer].root);
      if (!program_.node_object[a.node]) roots_read_to_make(a.node, roots);
    }
    for (const auto& item : a.items) self(item, self);
  };
  for (const auto& a : n.args) visit(a, visit);
  for (const auto& a : n.kwargs) visit(a, visit);
}

void Lowerer::materialize_live_views_of(const graph::Node& n) {
  std::vector<int> written;
  for (const auto& a : n.args)
    if (a.kind == graph::Arg::Kind::Node && values_[a.node].tensor && values_[a.node].buffer >= 0)
      written.push_back(program_.buffers[values_[a.node].buffer].root);
  auto is_written = [&](int root) { return std::find(written.begin(), written.end(), root) != written.end(); };
  std::vector<int> reads;
  for (graph::NodeId id = 0; id < n.id; ++id) {
    const Value& v = values_[id];
    if (!v.tensor || v.buffer < 0 || program_.node_object[id] || last_use_[id] <= n.id) continue;
    const Buffer& b = program_.buffers[v.buffer];
    if (b.kind != Buffer::Kind::View) continue;
    reads.clear();
    reads.push_back(b.root);
    roots_read_to_make(id, reads);
    if (std::any_of(reads.begin(), reads.end(), is_written)) ensure_object(id);
  }
}

void Lowerer::check_planned_layouts(const graph::Node& n) const {
  if (planned_strides_.empty() || !planned_strides_[n.id].empty()) return;
  if (n.type == graph::ValueType::Tensor && maps_as_channels_last(n.meta)) return;
  auto replanned = [&](const graph::Arg& a, const auto& self) -> bool {
    if (a.kind == graph::Arg::Kind::Node && !planned_strides_[a.node].empty()) return true;
    return std::any_of(a.items.begin(), a.items.end(), [&](const graph::Arg& i) { return self(i, self); });
  };
  for (const auto* args : {&n.args, &n.kwargs})
    for (const graph::Arg& a : *args)
      if (replanned(a, replanned))
        throw LayoutConflict(fmt::format("%{} ({}) runs through torch on a value planned channels-last", n.id,
                                         n.target_name));
}

void Lowerer::add_extern(const graph::Node& n) {
  check_planned_layouts(n);
  if (graph::writes_an_argument(n)) {
    flush_live_values(n.id);
    // A view's torch object is made on first use, by calling its op on its base's object; an in-place op may change
    // that base's sizes and strides (unsqueeze_, t_, resize_), or the values a view of a copy was copied from (a
    // reshape of a transposed tensor), so the views still to be used are made before it.
    materialize_live_views_of(n);
  }
  ExternStep step{n.id, std::move(declined_)};
  copy_operands_channels_last(n, &step);
  pass_attention_bias(n, &step);
  ensure_argument_objects(n, step);
  add_extern_step(std::move(step));
  declined_.clear();
  program_.node_object[n.id] = true;
  if (n.type == graph::ValueType::Tensor) add_node_buffer(n, Buffer::Kind::Extern);
}

}  // namespace detail
}  // namespace fastcomp::plan
