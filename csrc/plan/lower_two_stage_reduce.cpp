// Reductions in two kernels that the one-kernel shapes (row, column) and the generic split (split_reduce.h) do
// not take: a first kernel reduces x's trailing dimensions to partials per row, a second combines the partials.
//  - mixed_reduce: the last dimension reduced with others that are not trailing (x.mean((0, 2, 3)) of NCHW,
//    batch-norm statistics): the partials of each row, then a column reduction over the other dimensions.
//  - pieces_reduce: a few long rows (x.var() of a large tensor) for a reduction whose partials do not simply add
//    up: each row cut into equal pieces, each piece's partials, then a row reduction over each row's pieces.
//  - column_pieces_reduce: the same for few long columns (x.var(0) of [8192, 1024]): one reduced dimension cut
//    into equal pieces, partials per piece and column, then a column reduction over the pieces.
// Sums, maxima and minima combine as themselves (a sum of sums); var/std combine each part's sum and squared
// deviations from its own mean (lower_reduce.cpp).
#include <tuple>

#include "plan/lowering.h"
#include "plan/split_reduce.h"

namespace fastcomp::plan::detail {

std::vector<int> keepdim_rows(size_t rank, int k) {
  std::vector<int> out_dims;
  for (size_t d = 0; d + k < rank; ++d) out_dims.push_back(static_cast<int>(d));
  out_dims.push_back(-1);
  return out_dims;
}

std::optional<bool> Lowerer::reduce_in_parts(const graph::Node& n, graph::NodeId x, int k,
                                             const std::vector<bool>& reduced, DType acc, const PartialsFn& partials) {
  const Sizes sizes = meta_sizes(graph_.nodes[x].meta);
  const size_t rank = sizes.size();
  if (reduced.size() != rank || rank == 0) return std::nullopt;
  if (reduced.back() && static_cast<size_t>(k) < rank && !reduced[rank - k - 1]) {
    bool others = false;
    for (size_t d = 0; d + k < rank; ++d) others = others || reduced[d];
    if (others) return mixed_reduce(n, x, k, reduced, acc, partials);
  }
  // Few long rows or columns: the generic split takes splittable reductions; the others are cut here.
  if (partials.splittable || !codegen::all_static(sizes)) return std::nullopt;
  const int bytes = codegen::dtype_size(node_dtype(x));
  if (reduced.back()) {
    Sizes rows(sizes.begin(), sizes.end() - k);
    rows.push_back(codegen::product(Sizes(sizes.end() - k, sizes.end())));
    std::vector<bool> last(rows.size(), false);
    last.back() = true;
    if (auto split = choose_split(codegen::Kernel::Kind::RowReduce, rows, last, bytes))
      return pieces_reduce(n, x, k, split->pieces, acc, partials);
  } else if (auto split = choose_split(codegen::Kernel::Kind::ColumnReduce, sizes, reduced, bytes)) {
    return column_pieces_reduce(n, x, reduced, *split, acc, partials);
  }
  return std::nullopt;
}

std::vector<int> Lowerer::store_partials(int cluster, const std::vector<int>& exprs, DType acc, const Sizes& sizes,
                                         const Sizes& in_space) {
  Cluster& cl = *clusters_[cluster];
  std::vector<int> buffers;
  for (int e : exprs) {
    e = cl.cast(e, acc);
    // A partial another reduction of x already stores (mean's sum, var's sum) is read from its buffer.
    if (auto it = stored_partials_.find({cluster, e}); it != stored_partials_.end()) {
      buffers.push_back(it->second);
      continue;
    }
    Buffer p;
    p.kind = Buffer::Kind::Alloc;
    p.dtype = acc;
    p.sizes = sizes;
    p.strides = contiguous_strides(sizes);
    const int pb = add_buffer(p);
    cl.store(e, pb, acc, in_space, 0);
    buffer_producer_[pb] = cluster;
    stored_partials_[{cluster, e}] = pb;
    buffers.push_back(pb);
  }
  seal(cluster);
  return buffers;
}

std::vector<int> Lowerer::store_row_partials(int rows, int x_expr, DType acc, const PartialsFn& partials,
                                             int64_t part_length) {
  Cluster& cl = *clusters_[rows];
  const Sizes outer(cl.space().begin(), cl.space().end() - 1);
  Sizes in_space = contiguous_strides(outer);
  in_space.push_back(0);
  return store_partials(rows, partials.build(cl, x_expr, part_length), acc, outer, in_space);
}

bool Lowerer::combine_columns(const graph::Node& n, const std::vector<int>& parts, const std::vector<bool>& reduced,
                              const PartialsFn& partials, int64_t part_length) {
  const std::vector<int> extra(parts.begin() + 1, parts.end());
  return column_reduce_of(n, -1, parts.front(), reduced, [&](Cluster& c, int first, const std::vector<int>& others) {
    std::vector<int> loaded{first};
    loaded.insert(loaded.end(), others.begin(), others.end());
    return std::make_pair(partials.combine(c, loaded, part_length), true);
  }, partials.splittable, extra);
}

void Lowerer::store_keepdim_result(const graph::Node& n, const std::vector<int>& out_dims) {
  Value& result = values_[n.id];
  const int c = cluster_of(result.cluster);
  Buffer out;
  out.kind = Buffer::Kind::Alloc;
  out.node = n.id;
  out.dtype = node_dtype(n.id);
  out.sizes = meta_sizes(graph_.nodes[n.id].meta);
  out.strides = contiguous_strides(out.sizes);
  Sizes in_space;
  for (int d : out_dims) in_space.push_back(d < 0 ? Size(0) : out.strides[d]);
  const int ob = add_buffer(out);
  clusters_[c]->store(result.expr, ob, out.dtype, in_space, 0);
  buffer_producer_[ob] = c;
  result.buffer = ob;
  seal(c);
}

bool Lowerer::mixed_reduce(const graph::Node& n, graph::NodeId x, int k, const std::vector<bool>& reduced, DType acc,
                           const PartialsFn& partials) {
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
  // Another mixed reduction of x over the same trailing dimensions (batch norm's mean and var) adds its partials
  // to that one's first kernel, which reads x once for both (a sealed kernel may gain outputs, not loads).
  int x_expr = -1, rows = -1;
  if (auto it = mixed_rows_.find({x, k}); it != mixed_rows_.end() && !clusters_[it->second.first]->split())
    std::tie(rows, x_expr) = it->second;
  if (rows < 0 && (rows = trailing_rows(x, k, partials.splittable, &x_expr)) < 0) return false;
  mixed_rows_[{x, k}] = {rows, x_expr};
  const int64_t row_length = codegen::product(Sizes(sizes.end() - k, sizes.end())).hint();
  const std::vector<int> parts = store_row_partials(rows, x_expr, acc, partials, row_length);
  if (!combine_columns(n, parts, outer_reduced, partials, row_length))
    throw std::logic_error("lower: the column stage of a mixed reduction did not fit after all");
  // keepdim=True: the result has x's rank, which the per-column value of the partials' space does not: it is
  // stored at once, in its own shape (as a trailing reduction's is), and later ops read it as a buffer.
  if (meta_sizes(graph_.nodes[n.id].meta).size() == rank) {
    std::vector<int> out_dims;
    for (size_t d = 0; d < outer.size(); ++d) out_dims.push_back(outer_reduced[d] ? -1 : static_cast<int>(d));
    store_keepdim_result(n, out_dims);
  }
  return true;
}

bool Lowerer::pieces_reduce(const graph::Node& n, graph::NodeId x, int k, int64_t pieces, DType acc,
                            const PartialsFn& partials) {
  const Sizes sizes = meta_sizes(graph_.nodes[x].meta);
  const size_t rank = sizes.size();
  if (k < 1 || static_cast<size_t>(k) > rank || pieces < 2 || !codegen::all_static(sizes)) return false;
  const int64_t len = codegen::product(Sizes(sizes.end() - k, sizes.end())).hint();
  if (len % pieces != 0) return false;
  int x_expr = -1;
  const int cut = trailing_rows(x, k, /*splittable=*/false, &x_expr, pieces);
  if (cut < 0) return false;
  const std::vector<int> parts = store_row_partials(cut, x_expr, acc, partials, len / pieces);
  // Second kernel: each row's pieces, [outer..., pieces], one row reduction with the epilogue.
  const Sizes space = buffer(parts.front()).sizes;
  const int c = new_cluster(space);
  Cluster& combine = *clusters_[c];
  combine.make_row_reduce();
  std::vector<int> loaded;
  for (int b : parts) loaded.push_back(load_buffer(combine, b, space, false));
  const int expr = partials.combine(combine, loaded, len / pieces);
  bind_lazy(n, c, expr, true);
  if (meta_sizes(graph_.nodes[n.id].meta).size() == rank) store_keepdim_result(n, keepdim_rows(rank, k));
  return true;
}

bool Lowerer::column_pieces_reduce(const graph::Node& n, graph::NodeId x, const std::vector<bool>& reduced,
                                   const ReductionSplit& split, DType acc, const PartialsFn& partials) {
  const Sizes sizes = meta_sizes(graph_.nodes[x].meta);
  const size_t rank = sizes.size();
  const int d = split.dim;
  if (!codegen::all_static(sizes) || reduced.size() != rank || reduced.back() || d < 0 ||
      static_cast<size_t>(d) >= rank || !reduced[d] || split.pieces < 2 || sizes[d].hint() % split.pieces != 0)
    return false;
  const int64_t pieces = split.pieces, piece = sizes[d].hint() / pieces;
  // First kernel: x's space with dimension d cut into [pieces, piece], the pieces kept (partials per piece and
  // column), x read from memory.
  Sizes space = sizes;
  space[d] = pieces;
  space.insert(space.begin() + d + 1, Size(piece));
  std::vector<bool> first = reduced;
  first[d] = false;
  first.insert(first.begin() + d + 1, true);
  int64_t part_length = 1;
  for (size_t i = 0; i < space.size(); ++i)
    if (first[i]) part_length *= space[i].hint();
  // The partials' space: the first kernel's kept dimensions, in order; the pieces are what the second reduces.
  Sizes parts_sizes;
  std::vector<bool> second;
  std::vector<int> out_dims;  // per dimension of the partials' space: x's dimension, -1 for the pieces
  for (int i = 0; i < static_cast<int>(space.size()); ++i) {
    if (first[i]) continue;
    parts_sizes.push_back(space[i]);
    second.push_back(i == d);
    out_dims.push_back(i == d ? -1 : i < d ? i : i - 1);  // x's dimension: the pieces' dimension follows d
  }
  {
    int no_target = -1;
    std::optional<ReductionSplit> unused;
    if (!reduction_split(parts_sizes, second, acc, /*splittable=*/false, &no_target, &unused)) return false;
  }
  const int xb = buffer_for(x);
  const Buffer& b = buffer(xb);
  Sizes strides;
  for (size_t i = 0; i < rank; ++i) strides.push_back(sizes[i] == 1 ? Size(0) : b.strides[i]);
  strides.insert(strides.begin() + d + 1, strides[d]);
  strides[d] = strides[d] * Size(piece);
  const int c = new_cluster(space);
  Cluster& cl = *clusters_[c];
  cl.make_column_reduce(first);
  const int x_expr = cl.load(b.root, b.dtype, strides, b.offset);
  const Sizes parts_strides = contiguous_strides(parts_sizes);
  Sizes in_space;
  for (size_t i = 0, kept = 0; i < space.size(); ++i) in_space.push_back(first[i] ? Size(0) : parts_strides[kept++]);
  const std::vector<int> parts =
      store_partials(c, partials.build(cl, x_expr, part_length), acc, parts_sizes, in_space);
  // Second kernel: the pieces of each column combined, with the epilogue.
  if (!combine_columns(n, parts, second, partials, part_length))
    throw std::logic_error("lower: the combine stage of a column reduction in pieces did not fit after all");
  if (meta_sizes(graph_.nodes[n.id].meta).size() == rank) store_keepdim_result(n, out_dims);
  return true;
}

}  // namespace fastcomp::plan::detail
