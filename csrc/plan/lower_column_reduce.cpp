// Reductions that keep the last dimension (x.sum(0) of [N, M], x.mean((0, 2)) of [A, B, C, D]) as one
// column-reduce kernel (kernel_ir.h): x's pointwise prologue is evaluated in it, and the per-column result is a
// lazy value its epilogue (ops over the result's shape: x.sum(0) * 2, x.mean(0) + b) extends. Which dimensions
// are reduced is a flag per dimension of the space, so reduced dimensions need not be adjacent.
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
  // Reductions of buffers (the partials of a two-stage reduction) over one space and dimensions are one kernel:
  // batch norm's mean and var combine their row partials together.
  for (size_t c = clusters_.size(); x_buffer >= 0 && target < 0 && c-- > 0;)
    if (merged_into_[c] < 0 && !clusters_[c]->sealed() && clusters_[c]->column_reduce() &&
        clusters_[c]->space() == space && clusters_[c]->reduced_dims() == reduced && !clusters_[c]->split())
      target = static_cast<int>(c);
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

}  // namespace fastcomp::plan::detail
