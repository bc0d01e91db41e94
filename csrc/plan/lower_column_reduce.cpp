// Reductions that keep the last dimension (x.sum(0) of [N, M], x.mean((0, 2)) of [A, B, C, D]) as one
// column-reduce kernel (kernel_ir.h): x's pointwise prologue is evaluated in it, and the per-column result is a
// lazy value its epilogue (ops over the result's shape: x.sum(0) * 2, x.mean(0) + b) extends. Which dimensions
// are reduced is a flag per dimension of the space, so reduced dimensions need not be adjacent. A reduction over
// the last dimension and others that are not trailing (x.mean((0, 2, 3)) of NCHW: batch-norm statistics) is a
// row reduction of the trailing ones into partials, then a column reduction of those (mixed_reduce).
#include "plan/lowering.h"

namespace fastcomp::plan::detail {

bool Lowerer::column_reduce(const graph::Node& n, graph::NodeId x, const std::vector<bool>& reduced,
                            const RowFn& fn, bool splittable) {
  return column_reduce_of(n, x, -1, reduced, fn, splittable);
}

bool Lowerer::column_reduce_of(const graph::Node& n, graph::NodeId x, int x_buffer, const std::vector<bool>& reduced,
                               const RowFn& fn, bool splittable, const std::vector<int>& extra_buffers) {
  const Sizes space = x_buffer >= 0 ? buffer(x_buffer).sizes : meta_sizes(graph_.nodes[x].meta);
  const DType x_dtype = x_buffer >= 0 ? buffer(x_buffer).dtype : node_dtype(x);
  if (space.empty() || reduced.size() != space.size() || reduced.back()) return false;
  Size length = 1, columns = 1;
  for (size_t d = 0; d < space.size(); ++d) {
    Size& total = reduced[d] ? length : columns;
    total = total * space[d];
  }
  // Judged by the hints under dynamic shapes; an empty reduction or result is torch's.
  if (length.hint() == 0 || columns.hint() == 0) return false;

  int target = -1;
  if (x_buffer < 0 && values_[x].cluster >= 0) {
    const Value& vx = values_[x];
    const int c = cluster_of(vx.cluster);
    const Cluster& cl = *clusters_[c];
    // x's own cluster takes the reduction when x is per element there and it can become this column kernel.
    if (!cl.sealed() && !vx.row && cl.space() == space && !cl.pointwise_only() && !cl.row_reduce() &&
        (!cl.column_reduce() || cl.reduced_dims() == reduced))
      target = c;
  }
  std::optional<ReductionSplit> split;
  if (!reduction_split(space, reduced, x_dtype, splittable, &target, &split)) return false;
  if (target < 0 && x_buffer < 0) x_buffer = buffer_for(x);
  if (target < 0) target = new_cluster(space);
  Cluster& c = *clusters_[target];
  c.make_column_reduce(reduced);
  c.set_split(split);
  const int x_expr = x_buffer < 0 ? values_[x].expr : load_buffer(c, x_buffer, space, false);
  std::vector<int> extra;
  for (int b : extra_buffers) extra.push_back(load_buffer(c, b, space, false));
  auto [expr, per_column] = fn(c, x_expr, extra);
  if (!per_column) throw std::logic_error("lower: a column reduction must give one value per column");
  bind_lazy(n, target, expr, true);
  return true;
}

bool Lowerer::mixed_reduce(const graph::Node& n, graph::NodeId x, int k, const std::vector<bool>& reduced, DType acc,
                           const PartialsFn& partials, const RowFn& fn) {
  const Sizes sizes = meta_sizes(graph_.nodes[x].meta);
  const size_t rank = sizes.size();
  if (k < 1 || static_cast<size_t>(k) >= rank || reduced.size() != rank || !codegen::all_static(sizes)) return false;
  // The second kernel must fit before the first is made.
  const Sizes outer(sizes.begin(), sizes.end() - k);
  const std::vector<bool> outer_reduced(reduced.begin(), reduced.end() - k);
  {
    int no_target = -1;
    std::optional<ReductionSplit> unused;
    if (!reduction_split(outer, outer_reduced, acc, partials.splittable, &no_target, &unused)) return false;
  }
  int x_expr = -1;
  const int a = trailing_rows(x, k, /*splittable=*/partials.splittable, &x_expr);
  if (a < 0) return false;
  // First kernel: the trailing dimensions, partials per outer coordinate, each in a buffer of its own.
  Cluster& rows = *clusters_[a];
  std::vector<int> partial_buffers;
  for (int e : partials.build(rows, x_expr, codegen::product(Sizes(sizes.end() - k, sizes.end())).hint())) {
    Buffer p;
    p.kind = Buffer::Kind::Alloc;
    p.dtype = acc;
    p.sizes = outer;
    p.strides = contiguous_strides(outer);
    const int pb = add_buffer(p);
    Sizes in_rows = p.strides;
    in_rows.push_back(0);
    rows.store(rows.cast(e, acc), pb, acc, in_rows, 0);
    buffer_producer_[pb] = a;
    partial_buffers.push_back(pb);
  }
  seal(a);
  // Second kernel: the other reduced dimensions of the partials, with the epilogue.
  const std::vector<int> extra(partial_buffers.begin() + 1, partial_buffers.end());
  if (!column_reduce_of(n, -1, partial_buffers.front(), outer_reduced, fn, partials.splittable, extra))
    throw std::logic_error("lower: the column stage of a mixed reduction did not fit after all");
  // keepdim=True: the result has x's rank, which the per-column value of the partials' space does not: it is
  // stored at once, in its own shape (as a trailing reduction's is), and later ops read it as a buffer.
  const Sizes shape = meta_sizes(graph_.nodes[n.id].meta);
  if (shape.size() == rank) {
    Value& result = values_[n.id];
    const int c = cluster_of(result.cluster);
    Buffer out;
    out.kind = Buffer::Kind::Alloc;
    out.node = n.id;
    out.dtype = node_dtype(n.id);
    out.sizes = shape;
    out.strides = contiguous_strides(shape);
    Sizes in_space;
    for (size_t d = 0; d < outer.size(); ++d) in_space.push_back(outer_reduced[d] ? Size(0) : out.strides[d]);
    const int ob = add_buffer(out);
    clusters_[c]->store(result.expr, ob, out.dtype, in_space, 0);
    buffer_producer_[ob] = c;
    result.buffer = ob;
    seal(c);
  }
  return true;
}

}  // namespace fastcomp::plan::detail
