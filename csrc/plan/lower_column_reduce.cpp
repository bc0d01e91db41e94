// Reductions that keep the last dimension (x.sum(0) of [N, M], x.mean((0, 2)) of [A, B, C, D]) as one
// column-reduce kernel (kernel_ir.h): x's pointwise prologue is evaluated in it, and the per-column result is a
// lazy value its epilogue (ops over the result's shape: x.sum(0) * 2, x.mean(0) + b) extends. Which dimensions
// are reduced is a flag per dimension of the space, so reduced dimensions need not be adjacent.
#include "plan/lowering.h"

namespace fastcomp::plan::detail {
namespace {

// Torch's own kernel splits a long reduction across blocks (a semaphore, a second stage); the column kernel
// spreads only its columns over blocks, 128 bytes of columns per block at the least. With fewer such blocks than
// an H100 has SMs and columns longer than this, the column kernel would leave most of the GPU idle.
constexpr int64_t kColumnLinesFloor = 132;
constexpr int64_t kLongColumn = 4096;

}  // namespace

bool Lowerer::column_reduce(const graph::Node& n, graph::NodeId x, const std::vector<bool>& reduced,
                            const RowFn& fn) {
  const Sizes space = meta_sizes(graph_.nodes[x].meta);
  if (space.empty() || reduced.size() != space.size() || reduced.back()) return false;
  Size length = 1, columns = 1;
  for (size_t d = 0; d < space.size(); ++d) {
    Size& total = reduced[d] ? length : columns;
    total = total * space[d];
  }
  // Judged by the hints under dynamic shapes; an empty reduction or result is torch's.
  if (length.hint() == 0 || columns.hint() == 0) return false;
  const int64_t lines = (columns.hint() * codegen::dtype_size(node_dtype(x)) + 127) / 128;
  if (lines < kColumnLinesFloor && length.hint() > kLongColumn) return false;

  Value& vx = values_[x];
  int target = -1;
  if (vx.cluster >= 0) {
    const int c = cluster_of(vx.cluster);
    const Cluster& cl = *clusters_[c];
    // x's own cluster takes the reduction when x is per element there and it can become this column kernel.
    if (!cl.sealed() && !vx.row && cl.space() == space && !cl.pointwise_only() && !cl.row_reduce() &&
        (!cl.column_reduce() || cl.reduced_dims() == reduced))
      target = c;
  }
  int x_buffer = -1;
  if (target < 0) {
    x_buffer = buffer_for(x);
    target = new_cluster(space);
  }
  Cluster& c = *clusters_[target];
  c.make_column_reduce(reduced);
  const int x_expr = x_buffer < 0 ? vx.expr : load_buffer(c, x_buffer, space, false);
  auto [expr, per_column] = fn(c, x_expr, {});
  if (!per_column) throw std::logic_error("lower: a column reduction must give one value per column");
  bind_lazy(n, target, expr, true);
  return true;
}

}  // namespace fastcomp::plan::detail
