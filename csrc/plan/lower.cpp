// The lowering driver: walks the graph in order, keeps each value lazy (an expression of an open cluster) for
// as long as only kernels consume it, and materialises it into a buffer when something else needs it: a
// matrix product, an extern torch call, a view, or the graph's output. A cluster is sealed - given its place
// among the steps - when a buffer it writes is first consumed outside it; every cluster still open at the end
// runs last.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>

#include "plan/channels_last.h"
#include "plan/combine_kernels.h"
#include "plan/group_products.h"
#include "plan/lowering.h"
#include "support/pystr.h"

namespace fastcomp::plan {
namespace detail {
namespace {

bool on_cuda(const graph::TensorMeta& meta) { return meta.device && py_str(meta.device.get()).rfind("cuda", 0) == 0; }

void mark_uses(const graph::Arg& a, int user, std::vector<int>& last_use) {
  if (a.kind == graph::Arg::Kind::Node) last_use[a.node] = std::max(last_use[a.node], user);
  for (const auto& item : a.items) mark_uses(item, user, last_use);
}

}  // namespace

Sizes meta_sizes(const graph::TensorMeta& m) {
  if (!m.is_dynamic()) return codegen::to_sizes(m.sizes);
  Sizes out;
  for (size_t d = 0; d < m.sizes.size(); ++d) out.push_back(Size::of(m.sym_sizes[d], m.sizes[d]));
  return out;
}

Sizes meta_strides(const graph::TensorMeta& m) {
  if (!m.is_dynamic()) return codegen::to_sizes(m.strides);
  if (m.sym_strides.size() != m.strides.size())
    throw NotLowerable("a tensor's strides are not known as expressions of the sizes");
  Sizes out;
  for (size_t d = 0; d < m.strides.size(); ++d) out.push_back(Size::of(m.sym_strides[d], m.strides[d]));
  return out;
}

bool is_dense(const Sizes& sizes, const Sizes& strides) {
  std::vector<size_t> order(sizes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return strides[a].hint() < strides[b].hint(); });
  Size expected = 1;
  for (size_t d : order) {
    if (sizes[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected = expected * sizes[d];
  }
  return true;
}

std::optional<std::pair<Size, Size>> collapse(const Sizes& sizes, const Sizes& strides, size_t begin, size_t end) {
  Size count = 1, stride = 0;
  bool have = false;
  for (size_t d = end; d-- > begin;) {
    if (sizes[d] == 1) continue;
    if (!have) {
      stride = strides[d];
      have = true;
    } else if (strides[d] != stride * count) {
      return std::nullopt;
    }
    count = count * sizes[d];
  }
  return std::make_pair(count, stride);
}

Lowerer::Lowerer(const graph::Graph& graph, const LowerOptions& options,
                 std::vector<std::vector<int64_t>> planned_strides)
    : graph_(graph),
      options_(options),
      planned_strides_(std::move(planned_strides)),
      values_(graph.nodes.size()),
      last_use_(graph.nodes.size(), -1) {
  for (const graph::Node& n : graph_.nodes) {
    for (const auto& a : n.args) mark_uses(a, n.id, last_use_);
    for (const auto& a : n.kwargs) mark_uses(a, n.id, last_use_);
    writes_arguments_ = writes_arguments_ || graph::has_write_effects(n);
  }
  mark_uses(graph_.output, static_cast<int>(graph_.nodes.size()), last_use_);
}

DType Lowerer::node_dtype(graph::NodeId id) const {
  auto t = dtype_of(graph_.nodes[id].meta.dtype.get());
  if (!t) throw NotLowerable(fmt::format("%{} has dtype {}, which the CUDA backend has no code for", id,
                                         py_str(graph_.nodes[id].meta.dtype.get())));
  return *t;
}

Sizes Lowerer::node_strides(graph::NodeId id) const {
  if (!planned_strides_.empty() && !planned_strides_[id].empty()) return codegen::to_sizes(planned_strides_[id]);
  return meta_strides(graph_.nodes[id].meta);
}

int Lowerer::add_buffer(Buffer b) {
  const int id = static_cast<int>(program_.buffers.size());
  if (b.kind != Buffer::Kind::View) b.root = id;
  program_.buffers.push_back(std::move(b));
  buffer_producer_.push_back(-1);
  return id;
}

int Lowerer::cluster_of(int id) {
  while (merged_into_[id] >= 0) id = merged_into_[id];
  return id;
}

void Lowerer::merge(int into, int from) {
  into = cluster_of(into);
  from = cluster_of(from);
  if (into == from) return;
  std::vector<int> remap = clusters_[into]->absorb(*clusters_[from]);
  merged_into_[from] = into;
  for (Value& v : values_)
    if (v.cluster == from) {
      v.cluster = into;
      v.expr = remap[v.expr];
    }
  for (int& producer : buffer_producer_)
    if (producer == from) producer = into;
}

void Lowerer::seal(int c) {
  c = cluster_of(c);
  if (clusters_[c]->sealed()) return;
  clusters_[c]->seal();
  kernel_step_of_[c] = static_cast<int>(program_.kernel_steps.size());
  program_.kernel_steps.push_back(KernelStep{});
  program_.steps.push_back({Step::Kind::Kernel, kernel_step_of_[c]});
}

Sizes Lowerer::strides_in_space(const Sizes& sizes, const Sizes& strides, const Sizes& out_shape, bool row,
                                const Cluster& c) const {
  Sizes s(out_shape.size(), 0);
  const size_t lead = out_shape.size() - sizes.size();  // broadcasting aligns trailing dimensions
  for (size_t d = 0; d < sizes.size(); ++d)
    s[lead + d] = sizes[d] == 1 ? 0 : strides[d];
  if (!row) return s;
  const Sizes& space = c.space();
  if (c.column_reduce()) {
    // A per-column value has the space's kept dimensions, in order (and the reduced ones as 1s with keepdim).
    const std::vector<bool>& reduced = c.reduced_dims();
    if (out_shape.size() == space.size()) {
      for (size_t d = 0; d < space.size(); ++d)
        if (reduced[d]) s[d] = 0;
      return s;
    }
    Sizes full;
    size_t kept = 0;
    for (size_t d = 0; d < space.size(); ++d) full.push_back(reduced[d] ? Size(0) : s[kept++]);
    return full;
  }
  if (out_shape.size() == space.size()) s.back() = 0;  // [..., 1]: the row's single value
  else s.push_back(0);                                  // keepdim=False: one value per row
  return s;
}

bool Lowerer::lazy_fits(const Value& v, graph::NodeId id, const Sizes& out_shape, bool* row) const {
  const Cluster& c = *clusters_[v.cluster];
  const Sizes& space = c.space();
  *row = false;
  if (v.reshaped) return false;  // pointwise_on_reshaped's alone
  if (!v.row) return out_shape == space;
  // A per-row value of logical shape [..., 1] (keepdim) or [...] is either broadcast along its rows (the op
  // covers the whole space) or combined with other per-row values (the op has the value's own shape). A
  // per-column value is only combined: a column kernel writes nothing per element after its reductions.
  const Sizes shape = meta_sizes(graph_.nodes[id].meta);
  if (out_shape == space && c.column_reduce()) {
    // Only when every reduced dimension has size 1 does a per-column value (keepdim) have the space's shape:
    // combined with other per-column values, it is one.
    *row = true;
    return shape == space;
  }
  // A split reduction's per-row values exist only after its second kernel: they are combined, never broadcast.
  if (out_shape == space) return shape.size() == space.size() && shape.back() == 1 && !c.split();
  *row = true;
  return out_shape == shape;
}

int Lowerer::materialize(graph::NodeId id) {
  Value& v = values_[id];
  if (v.buffer >= 0) return v.buffer;
  if (v.cluster < 0) throw std::logic_error(fmt::format("lower: %{} has neither a buffer nor an expression", id));
  if (v.reshape_of >= 0) {  // a view in torch, and so in the plan: of its base's buffer, whose layout is contiguous
    add_view(graph_.nodes[id], materialize(v.reshape_of));
    return v.buffer;
  }
  const graph::TensorMeta& meta = graph_.nodes[id].meta;
  Buffer b;
  b.kind = Buffer::Kind::Alloc;
  b.node = id;
  b.dtype = node_dtype(id);
  b.sizes = meta_sizes(meta);
  const Sizes strides = node_strides(id);
  b.strides = is_dense(b.sizes, strides) ? strides : contiguous_strides(b.sizes);
  const int c = cluster_of(v.cluster);
  Sizes in_space = strides_in_space(b.sizes, b.strides, b.sizes, v.row, *clusters_[c]);
  if (!v.row) in_space = b.strides;
  // Contiguous in its own shape (defer_reshape and pointwise_on_reshaped make sure) is contiguous in the space's.
  if (v.reshaped) in_space = contiguous_strides(clusters_[c]->space());
  const int id_b = add_buffer(b);
  clusters_[c]->store(v.expr, id_b, b.dtype, in_space, 0);
  buffer_producer_[id_b] = c;
  v.buffer = id_b;
  return id_b;
}

int Lowerer::buffer_for(graph::NodeId id) {
  const int b = values_[id].buffer >= 0 ? values_[id].buffer : materialize(id);
  const int producer = buffer_producer_[program_.buffers[b].root];
  if (producer >= 0) seal(producer);
  return b;
}

int Lowerer::contiguous_copy(int source) { return layout_copy(source, contiguous_strides(buffer(source).sizes)); }

int Lowerer::layout_copy(int source, const Sizes& strides) {
  const Buffer src = program_.buffers[source];
  Buffer b;
  b.kind = Buffer::Kind::Alloc;
  b.dtype = src.dtype;
  b.sizes = src.sizes;
  b.strides = strides;
  const int out = add_buffer(b);
  add_kernel(src.sizes, {source}, [&](Cluster& c) {
    c.store(c.load(src.root, src.dtype, src.strides, src.offset), out, b.dtype, b.strides, 0);
  });
  return out;
}

int Lowerer::new_cluster(const Sizes& space) {
  clusters_.push_back(std::make_unique<Cluster>(space));
  merged_into_.push_back(-1);
  kernel_step_of_.push_back(-1);
  return static_cast<int>(clusters_.size()) - 1;
}

int Lowerer::load_buffer(Cluster& c, int buffer, const Sizes& out_shape, bool row) const {
  const Buffer& b = program_.buffers[buffer];
  return c.load(b.root, b.dtype, strides_in_space(b.sizes, b.strides, out_shape, row, c), b.offset);
}

void Lowerer::add_kernel(const Sizes& space, const std::vector<int>& inputs,
                         const std::function<void(Cluster&)>& build) {
  for (int b : inputs) {
    const int producer = buffer_producer_[program_.buffers[b].root];
    if (producer >= 0) seal(producer);
  }
  const int c = new_cluster(space);
  build(*clusters_[c]);
  seal(c);  // sealed at once: nothing can fuse into it, so its outputs need no producer entry
}

void Lowerer::add_matmul(MatmulStep step) {
  program_.steps.push_back({Step::Kind::Matmul, static_cast<int>(program_.matmul_steps.size())});
  program_.matmul_steps.push_back(std::move(step));
}

void Lowerer::add_view(const graph::Node& n, int base) {
  const Buffer& from = program_.buffers[base];
  const Buffer& root = program_.buffers[from.root];
  // Offsets in the graph's metadata are absolute within one storage; the root's own offset is its zero.
  const int64_t root_meta_offset = root.node >= 0 ? graph_.nodes[root.node].meta.storage_offset : 0;
  Buffer b;
  b.kind = Buffer::Kind::View;
  b.root = from.root;
  b.node = n.id;
  b.dtype = node_dtype(n.id);
  b.sizes = meta_sizes(n.meta);
  b.strides = meta_strides(n.meta);
  // The tracer records offsets as numbers only: view lowering (lower_views.cpp) makes sure that under dynamic
  // shapes this one is the same for every size.
  b.offset = n.meta.storage_offset - root_meta_offset;
  if (b.offset.hint() < 0) throw NotLowerable(fmt::format("%{} views memory before its base's start", n.id));
  values_[n.id].tensor = true;
  values_[n.id].buffer = add_buffer(b);
}

void Lowerer::pointwise(const graph::Node& n, const std::vector<Operand>& operands, const PointwiseFn& fn) {
  if (pointwise_on_reshaped(n, operands, fn)) return;
  const Sizes out = meta_sizes(n.meta);
  // Pick the cluster: the first lazy operand's (others of the same space merge into it); operands that do not
  // fit come from buffers. Reading a buffer seals its producer, which may be the chosen cluster: then retry
  // with that cluster's values read from buffers too.
  std::vector<bool> from_buffer(operands.size(), false);
  for (size_t i = 0; i < operands.size(); ++i) from_buffer[i] = operands[i].broadcast_dim >= 0;
  int target = -1;
  bool row = false;
  for (int attempt = 0; attempt < 3; ++attempt) {
    target = -1;
    for (size_t i = 0; i < operands.size(); ++i) {
      if (operands[i].kind != Operand::Kind::Node || from_buffer[i]) continue;
      Value& v = values_[operands[i].node];
      bool fits_row = false;
      bool fits = v.cluster >= 0 && !clusters_[cluster_of(v.cluster)]->sealed();
      if (fits) {
        v.cluster = cluster_of(v.cluster);
        fits = lazy_fits(v, operands[i].node, out, &fits_row);
      }
      if (fits && target >= 0) {
        if (clusters_[target]->space() != clusters_[v.cluster]->space() || fits_row != row ||
            !can_merge(target, v.cluster))
          fits = false;
        else merge(target, v.cluster);
      }
      if (!fits) {
        from_buffer[i] = true;
        continue;
      }
      if (target < 0) {
        target = cluster_of(v.cluster);
        row = fits_row;
      }
    }
    for (size_t i = 0; i < operands.size(); ++i)
      if (operands[i].kind == Operand::Kind::Node && from_buffer[i]) buffer_for(operands[i].node);
    if (target < 0 || !clusters_[cluster_of(target)]->sealed()) break;
    for (size_t i = 0; i < operands.size(); ++i)
      if (operands[i].kind == Operand::Kind::Node) from_buffer[i] = true;
  }
  if (target >= 0) target = cluster_of(target);
  if (target < 0 || clusters_[target]->sealed()) {
    row = false;
    target = -1;
    // Sibling fusion: an open cluster over the same space takes this op too (one kernel reads both).
    for (size_t c = clusters_.size(); c-- > 0;)
      if (merged_into_[c] < 0 && !clusters_[c]->sealed() && clusters_[c]->space() == out) {
        target = static_cast<int>(c);
        break;
      }
    if (target < 0) target = new_cluster(out);
  }
  Cluster& c = *clusters_[target];
  std::vector<int> exprs;
  for (size_t i = 0; i < operands.size(); ++i) {
    const Operand& o = operands[i];
    if (o.kind == Operand::Kind::Scalar) {
      exprs.push_back(c.constant(o.scalar_dtype, o.scalar));
    } else if (!from_buffer[i]) {
      exprs.push_back(values_[o.node].expr);
    } else if (o.broadcast_dim >= 0) {
      // Read as a tensor of the result's rank, of size 1 but along broadcast_dim.
      const Buffer& b = program_.buffers[values_[o.node].buffer];
      Sizes sizes(out.size(), 1), strides(out.size(), 0);
      sizes[o.broadcast_dim] = b.sizes[0];
      strides[o.broadcast_dim] = b.strides[0];
      exprs.push_back(c.load(b.root, b.dtype, strides_in_space(sizes, strides, out, row, c), b.offset));
    } else {
      exprs.push_back(load_buffer(c, values_[o.node].buffer, out, row));
    }
  }
  bind_lazy(n, target, fn(c, exprs), row);
}

void Lowerer::bind_lazy(const graph::Node& n, int cluster, int expr, bool per_row) {
  Value& result = values_[n.id];
  result.tensor = true;
  result.cluster = cluster;
  result.row = per_row;
  result.expr = clusters_[cluster]->cast(expr, node_dtype(n.id));
}

bool Lowerer::reduction_split(const Sizes& space, const std::vector<bool>& reduced, DType x_dtype, bool splittable,
                              int* target, std::optional<ReductionSplit>* split) const {
  const codegen::Kernel::Kind kind = reduced.back() ? codegen::Kernel::Kind::RowReduce : codegen::Kernel::Kind::ColumnReduce;
  const bool one_kernel_fits = one_kernel_reduction_fits(kind, space, reduced, codegen::dtype_size(x_dtype));
  *split = splittable ? choose_split(kind, space, reduced, codegen::dtype_size(x_dtype)) : std::nullopt;
  // A reduction joining another one of the same space keeps that one's split; a split kernel takes only
  // reductions that split.
  if (*target >= 0 && clusters_[*target]->reduces() && clusters_[*target]->split() != *split) {
    if (clusters_[*target]->split() || !one_kernel_fits) *target = -1;
    else split->reset();
  }
  return *split || one_kernel_fits;
}

bool Lowerer::row_reduce(const graph::Node& n, graph::NodeId x, const std::vector<Operand>& extra, const RowFn& fn,
                          int row_dims, bool splittable) {
  if (row_dims > 1) return extra.empty() && trailing_reduce(n, x, fn, row_dims, splittable);
  const Sizes space = meta_sizes(graph_.nodes[x].meta);
  if (space.empty() || space.back() == 0) return false;
  const Size rows = codegen::product(Sizes(space.begin(), space.end() - 1));
  if (rows == 0) return false;
  Value& vx = values_[x];
  int target = -1;
  if (vx.cluster >= 0) {
    const int c = cluster_of(vx.cluster);
    if (!clusters_[c]->sealed() && !vx.row && clusters_[c]->space() == space && !clusters_[c]->row_reduce_excluded() &&
        !clusters_[c]->column_reduce())
      target = c;
  }
  std::vector<bool> reduced(space.size(), false);
  reduced.back() = true;
  std::optional<ReductionSplit> split;
  if (!reduction_split(space, reduced, node_dtype(x), splittable, &target, &split)) return false;
  for (const Operand& o : extra)
    if (o.kind == Operand::Kind::Node && graph_.nodes[o.node].meta.sizes.size() > space.size()) return false;
  std::vector<int> extra_buffers;
  for (const Operand& o : extra)
    extra_buffers.push_back(o.kind == Operand::Kind::Node ? buffer_for(o.node) : -1);
  int x_buffer = -1;
  if (target >= 0 && clusters_[target]->sealed()) target = -1;
  if (target < 0) x_buffer = buffer_for(x);
  if (target < 0) target = new_cluster(space);
  Cluster& c = *clusters_[target];
  c.make_row_reduce();
  c.set_split(split);
  const int x_expr = x_buffer < 0 ? vx.expr : load_buffer(c, x_buffer, space, false);
  std::vector<int> extra_exprs;
  for (size_t i = 0; i < extra.size(); ++i)
    extra_exprs.push_back(extra[i].kind == Operand::Kind::Scalar ? c.constant(extra[i].scalar_dtype, extra[i].scalar)
                                                                 : load_buffer(c, extra_buffers[i], space, false));
  auto [expr, per_row] = fn(c, x_expr, extra_exprs);
  bind_lazy(n, target, expr, per_row);
  return true;
}

int Lowerer::trailing_rows(graph::NodeId x, int k, bool splittable, int* x_expr, int64_t pieces) {
  const Sizes sizes = meta_sizes(graph_.nodes[x].meta);
  const size_t rank = sizes.size();
  if (k < 1 || static_cast<size_t>(k) > rank || !codegen::all_static(sizes)) return -1;
  const Sizes outer(sizes.begin(), sizes.end() - k);
  const Size len = codegen::product(Sizes(sizes.end() - k, sizes.end()));
  const Size rows = codegen::product(outer);
  if (len == 0 || rows == 0) return -1;
  Sizes space = outer;
  space.push_back(len);
  std::vector<bool> reduced(space.size(), false);
  reduced.back() = true;
  int no_target = -1;
  std::optional<ReductionSplit> split;
  if (pieces == 1 && !reduction_split(space, reduced, node_dtype(x), splittable, &no_target, &split)) return -1;
  const int c = new_cluster(space);
  Cluster& cl = *clusters_[c];
  // x's pointwise prologue joins the kernel when every load of it reads the trailing k dimensions with one stride
  // (same-shaped contiguous operands, as in a loss: ((a - b) ** 2).mean()).
  *x_expr = -1;
  if (const Cluster* src = lazy_cluster(x); src && !src->reduces() && src->space() == sizes) {
    Cluster copy(space);
    std::map<int, int> copied;
    if ((*x_expr = collapsed_copy(*src, values_[x].expr, copy, rank - k, &copied)) >= 0) cl = std::move(copy);
  }
  if (*x_expr < 0) {
    // Otherwise the row is x's trailing k dimensions read from memory, with one stride when they collapse (a
    // contiguous tensor's always do), else from a contiguous copy.
    int xb = buffer_for(x);
    std::optional<std::pair<Size, Size>> row = collapse(buffer(xb).sizes, buffer(xb).strides, rank - k, rank);
    if (!row) {
      xb = contiguous_copy(xb);
      row = collapse(buffer(xb).sizes, buffer(xb).strides, rank - k, rank);
    }
    const Buffer& b = buffer(xb);
    Sizes strides(b.strides.begin(), b.strides.end() - k);
    strides.push_back(row->second);
    *x_expr = cl.load(b.root, b.dtype, strides, b.offset);
  }
  cl.make_row_reduce();
  cl.set_split(split);
  if (pieces > 1) cl.split_last(pieces);
  return c;
}

bool Lowerer::trailing_reduce(const graph::Node& n, graph::NodeId x, const RowFn& fn, int k, bool splittable) {
  int x_expr = -1;
  const int c = k >= 2 ? trailing_rows(x, k, splittable, &x_expr) : -1;
  if (c < 0) return false;
  Cluster& cl = *clusters_[c];
  const size_t outer_rank = cl.space().size() - 1;
  auto [expr, per_row] = fn(cl, x_expr, {});
  if (!per_row) throw std::logic_error("lower: a reduction over several dimensions must give one value per row");
  bind_lazy(n, c, expr, true);
  // keepdim=True leaves k dimensions of 1 that the per-row value's shape (the space less its row) does not
  // have: the result is stored at once, in its own shape, and later ops read it as a buffer.
  if (meta_sizes(graph_.nodes[n.id].meta).size() != outer_rank) store_keepdim_result(n, keepdim_rows(outer_rank + k, k));
  return true;
}

int Lowerer::collapsed_copy(const Cluster& src, int expr, Cluster& dst, size_t from, std::map<int, int>* copied) {
  if (auto it = copied->find(expr); it != copied->end()) return it->second;
  const codegen::Expr& e = src.expr(expr);
  int out = -1;
  switch (e.op) {
    case ExprOp::Load: {
      const codegen::Operand& o = src.load_operand(expr);
      const auto run = collapse(src.space(), o.strides, from, o.strides.size());
      if (o.valid.dim >= 0 || !run) return -1;
      Sizes strides(o.strides.begin(), o.strides.begin() + static_cast<std::ptrdiff_t>(from));
      strides.push_back(run->second);
      // The buffer's producer runs first, as for any load (its cluster was sealed when src first loaded it).
      const int producer = buffer_producer_[src.load_buffer(expr)];
      if (producer >= 0) seal(producer);
      out = dst.load(src.load_buffer(expr), e.dtype, strides, o.storage_offset);
      break;
    }
    case ExprOp::Constant: out = dst.constant(e.dtype, e.constant); break;
    // A flat index, a range or a gather is tied to the shape of the space.
    case ExprOp::RowIndex: case ExprOp::InRange: case ExprOp::Gather: return -1;
    default: {
      std::vector<int> args;
      for (int a : e.args) {
        args.push_back(collapsed_copy(src, a, dst, from, copied));
        if (args.back() < 0) return -1;
      }
      out = dst.op(e.op, e.dtype, std::move(args));
    }
  }
  return (*copied)[expr] = out;
}

const Cluster* Lowerer::lazy_cluster(graph::NodeId id) {
  Value& v = values_[id];
  if (v.cluster < 0 || v.row || v.reshaped) return nullptr;
  v.cluster = cluster_of(v.cluster);
  const Cluster* c = clusters_[v.cluster].get();
  return c->sealed() ? nullptr : c;
}

void Lowerer::value_in_space(const graph::Node& n, const Sizes& space, const std::function<int(Cluster&)>& build,
                             graph::NodeId prefer) {
  int target = -1;
  if (const Cluster* c = prefer >= 0 ? lazy_cluster(prefer) : nullptr; c && !c->reduces() && c->space() == space)
    target = values_[prefer].cluster;
  for (size_t c = clusters_.size(); c-- > 0 && target < 0;)
    if (merged_into_[c] < 0 && !clusters_[c]->sealed() && !clusters_[c]->reduces() &&
        clusters_[c]->space() == space)
      target = static_cast<int>(c);
  if (target < 0) target = new_cluster(space);
  bind_lazy(n, target, build(*clusters_[target]), false);
}

bool Lowerer::can_merge(int a, int b) const {
  const Cluster& x = *clusters_[a];
  const Cluster& y = *clusters_[b];
  // A row reduction takes gathers with one index per row (Cluster::row_reduce_excluded), a column reduction none.
  auto excluded = [](const Cluster& r, const Cluster& o) {
    return r.row_reduce() ? o.row_reduce_excluded() : r.column_reduce() && o.pointwise_only();
  };
  if (excluded(x, y) || excluded(y, x)) return false;
  // Two gathers of one table, one from each cluster, would share an input: the union decides.
  if ((x.row_reduce() || y.row_reduce()) && !x.sealed() && !y.sealed()) {
    Cluster both = x;
    both.absorb(y);
    if (both.row_reduce_excluded()) return false;
  }
  // Row and column reductions are different kernels; columns of one kernel reduce the same dimensions.
  if ((x.row_reduce() && y.column_reduce()) || (x.column_reduce() && y.row_reduce())) return false;
  // A split kernel's per-row values cannot serve a kernel that is not split alike.
  if (x.split() != y.split()) return false;
  return !(x.column_reduce() && y.column_reduce() && x.reduced_dims() != y.reduced_dims());
}

bool Lowerer::lower_call(const graph::Node& n) {
  if (graph::writes_an_argument(n)) return lower_in_place(n);
  if (has_inplace_keyword(n)) return lower_call(functional_form(n));  // inplace=False: the functional op
  const std::string op = op_name(n.target_name);
  return lower_view_op(*this, n, op) || lower_cat_op(*this, n, op) || lower_gather_op(*this, n, op) ||
         lower_pointwise_op(*this, n, op) || lower_convolution_bias(n, op) ||
         lower_reduction_op(*this, n, op) || lower_matmul_op(*this, n, op) || lower_attention_op(*this, n, op) ||
         lower_pooling_op(*this, n, op) || lower_factory_op(*this, n, op);
}

void Lowerer::lower_node(const graph::Node& n) {
  if (n.kind == graph::NodeKind::Input) {
    auto position = std::find(graph_.inputs.begin(), graph_.inputs.end(), n.id) - graph_.inputs.begin();
    program_.node_object[n.id] = true;
    if (n.type == graph::ValueType::Tensor) add_node_buffer(n, Buffer::Kind::Input, static_cast<int>(position));
    return;
  }
  declined_.clear();
  // A CPU tensor in a CUDA graph (a size computed as torch.tensor(n), a scalar tensor from the CPU) is torch's to
  // use: kernels read device memory only, and torch takes a CPU scalar beside CUDA tensors.
  if (options_.require_cuda && touches_the_cpu(n)) {
    declined_ = "a tensor on the CPU";
    add_extern(n);
    return;
  }
  if (!lower_call(n)) add_extern(n);
}

void Lowerer::add_node_buffer(const graph::Node& n, Buffer::Kind kind, int input) {
  Buffer b;
  b.kind = kind;
  b.input = input;
  b.node = n.id;
  b.dtype = node_dtype(n.id);
  b.sizes = meta_sizes(n.meta);
  b.strides = node_strides(n.id);
  values_[n.id].tensor = true;
  values_[n.id].buffer = add_buffer(b);
}

bool Lowerer::touches_the_cpu(const graph::Node& n) const {
  if (n.type == graph::ValueType::Tensor && !on_cuda(n.meta)) return true;
  auto cpu_arg = [&](const graph::Arg& a, const auto& self) -> bool {
    if (a.kind == graph::Arg::Kind::Node && graph_.nodes[a.node].type == graph::ValueType::Tensor &&
        !on_cuda(graph_.nodes[a.node].meta))
      return true;
    return std::any_of(a.items.begin(), a.items.end(), [&](const graph::Arg& i) { return self(i, self); });
  };
  return std::any_of(n.args.begin(), n.args.end(), [&](const graph::Arg& a) { return cpu_arg(a, cpu_arg); }) ||
         std::any_of(n.kwargs.begin(), n.kwargs.end(), [&](const graph::Arg& a) { return cpu_arg(a, cpu_arg); });
}

bool Lowerer::decline(std::string why) {
  declined_ = std::move(why);
  return false;
}

void Lowerer::emit_kernels(int c, std::vector<Step>* steps) {
  auto add = [&](codegen::Kernel k, std::vector<int> args) {
    KernelStep step;
    step.kernel = static_cast<int>(program_.kernels.size());
    step.args = std::move(args);
    k.name = fmt::format("k{}", step.kernel);
    program_.kernels.push_back(std::move(k));
    steps->push_back({Step::Kind::Kernel, static_cast<int>(program_.kernel_steps.size())});
    program_.kernel_steps.push_back(std::move(step));
  };
  std::vector<int> args;
  codegen::Kernel k = clusters_[c]->kernel("k", &args);
  // A split the finished kernel cannot take (an op joined it that the pieces cannot compute) leaves one kernel:
  // slower, never wrong.
  std::optional<SplitKernels> split;
  if (clusters_[c]->split()) split = split_reduction(k, *clusters_[c]->split());
  if (!split) return add(std::move(k), std::move(args));
  const auto inputs_end = args.begin() + static_cast<std::ptrdiff_t>(k.inputs.size());
  std::vector<int> partial_args(args.begin(), inputs_end);
  for (const SplitKernels::PartialBuffer& p : split->partials) {
    Buffer b;
    b.kind = Buffer::Kind::Alloc;
    b.dtype = p.dtype;
    b.sizes = p.sizes;
    b.strides = contiguous_strides(p.sizes);
    partial_args.push_back(add_buffer(b));
  }
  std::vector<int> combine_args;
  for (int i : split->combine_inputs) combine_args.push_back(args[i]);
  combine_args.insert(combine_args.end(), partial_args.begin() + static_cast<std::ptrdiff_t>(k.inputs.size()),
                      partial_args.end());
  for (int o : split->partial_outputs) partial_args.push_back(inputs_end[o]);
  for (int o : split->combine_outputs) combine_args.push_back(inputs_end[o]);
  add(std::move(split->partial), std::move(partial_args));
  add(std::move(split->combine), std::move(combine_args));
}

Program Lowerer::run() {
  program_.device = options_.device;
  program_.symbols = graph_.symbols;
  program_.node_object.assign(graph_.nodes.size(), false);
  for (const graph::Node& n : graph_.nodes) {
    lower_node(n);
  }
  ensure_objects(graph_.output);
  for (size_t c = 0; c < clusters_.size(); ++c)
    if (merged_into_[c] < 0 && clusters_[c]->has_stores()) seal(static_cast<int>(c));
  // Kernels are numbered in step order, so the program text does not depend on the order clusters were made.
  std::vector<int> step_cluster(program_.kernel_steps.size(), -1);
  for (size_t c = 0; c < clusters_.size(); ++c)
    if (kernel_step_of_[c] >= 0) step_cluster[kernel_step_of_[c]] = static_cast<int>(c);
  std::vector<Step> steps;
  program_.kernel_steps.clear();
  for (const Step& s : std::exchange(program_.steps, {})) {
    if (s.kind == Step::Kind::Kernel) emit_kernels(step_cluster[s.index], &steps);
    else steps.push_back(s);
  }
  program_.steps = std::move(steps);
  program_.live_symbols = symbols_in_use(program_);
  program_.node_buffer.assign(graph_.nodes.size(), -1);
  for (size_t i = 0; i < values_.size(); ++i) program_.node_buffer[i] = values_[i].buffer;
  // Combined first: the casts of weights, hoisted, are ready for the products that read them.
  if (options_.combined_kernels) combine_input_kernels(program_, graph_);
  if (options_.grouped_products) group_shared_operand_products(program_);
  // An extern step's passed buffers are handed to torch as tensors, which only a buffer of its own has at run time.
  for (const ExternStep& e : program_.extern_steps)
    for (const ExternStep::PassedBuffer& passed : e.passed)
      if (program_.buffers[passed.buffer].root != passed.buffer)
        throw NotLowerable(fmt::format("%{} would be passed b{}, a view, for argument {}", e.node, passed.buffer,
                                       passed.slot));
  return std::move(program_);
}

}  // namespace detail

Program lower(const graph::Graph& graph, const LowerOptions& options) {
  if (options.channels_last) {
    if (std::vector<std::vector<int64_t>> strides = channels_last_strides(graph); !strides.empty()) {
      try {
        return detail::Lowerer(graph, options, std::move(strides)).run();
      } catch (const LayoutConflict&) {
        // An op lowering declined reads a replanned value through torch: the traced layouts throughout.
      }
    }
  }
  return detail::Lowerer(graph, options).run();
}

}  // namespace fastcomp::plan
