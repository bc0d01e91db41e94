#include "plan/split_reduce.h"

#include <algorithm>
#include <utility>

#include "plan/program.h"

namespace fastcomp::plan {
namespace {

using codegen::DType;
using codegen::Expr;
using codegen::ExprOp;
using codegen::is_reduce;
using codegen::Kernel;
using codegen::Size;
using codegen::Sizes;

// Blocks one split reduction aims to run: two per SM of an H100/H200 (132 SMs), where a row-reduce block of 1024
// threads or a column-reduce block fills half an SM. A GPU with fewer SMs gets more pieces than it needs, which
// costs little: a piece is still thousands of elements.
constexpr int64_t kSmCount = 132;
constexpr int64_t kTargetBlocks = 2 * kSmCount;
// Up to these reduced lengths one kernel is as fast: a second launch costs about what the idle SMs lose (the column
// kernel also splits a column across the threads of its block). Measured on an H100: x.sum(0) of [4096, 4096]
// f32 (128 lines of columns) takes 28.5 us in one kernel, 29.6 split.
constexpr int64_t kRowSplitFrom = 65536;  // elements per row
constexpr int64_t kColumnSplitFrom = 4096;  // elements per column
constexpr int64_t kRowSplitBelow = 64;  // rows: one block each
// A piece shorter than this spends more time in its block's final tree than in reading.
constexpr int64_t kMinRowPiece = 4096;
constexpr int64_t kMinColumnPiece = 256;
constexpr int kColumnLineBytes = 128;  // a column-reduce block covers at least one 128-byte line of columns

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// `strides` over the partial kernel's space: dimension `dim` becomes [pieces, piece length].
Sizes split_strides(const Sizes& strides, int dim, int64_t piece) {
  Sizes s = strides;
  s[dim] = strides[dim] * Size(piece);
  s.insert(s.begin() + dim + 1, strides[dim]);
  return s;
}

// Results and reduced length of a reduction over `shape`, at the hints.
std::pair<int64_t, int64_t> results_and_length(const Sizes& shape, const std::vector<bool>& reduced) {
  int64_t results = 1, length = 1;
  for (size_t d = 0; d < shape.size(); ++d) (reduced[d] ? length : results) *= shape[d].hint();
  return {results, length};
}

// Blocks the kernel runs unsplit: one per row, or one per 128-byte line of columns.
int64_t unsplit_blocks(bool row, int64_t results, int element_bytes) {
  return row ? results : ceil_div(results * element_bytes, kColumnLineBytes);
}

}  // namespace

bool one_kernel_reduction_fits(Kernel::Kind kind, const Sizes& shape, const std::vector<bool>& reduced,
                               int element_bytes) {
  const bool row = kind == Kernel::Kind::RowReduce;
  const auto [results, length] = results_and_length(shape, reduced);
  const int64_t blocks = unsplit_blocks(row, results, element_bytes);
  // Torch's kernel splits a long reduction across blocks; with fewer of ours than half (rows) or all (columns) of
  // an H100's SMs, and rows (columns) this long, it is the faster one.
  return row ? !(blocks < kRowSplitBelow && length > kRowSplitFrom) : !(blocks < kSmCount && length > kColumnSplitFrom);
}

std::optional<ReductionSplit> choose_split(Kernel::Kind kind, const Sizes& shape, const std::vector<bool>& reduced,
                                           int element_bytes) {
  if (!codegen::all_static(shape) || reduced.size() != shape.size()) return std::nullopt;
  const bool row = kind == Kernel::Kind::RowReduce;
  const auto [results, length] = results_and_length(shape, reduced);
  if (results == 0 || length == 0 || one_kernel_reduction_fits(kind, shape, reduced, element_bytes))
    return std::nullopt;
  const int64_t blocks = unsplit_blocks(row, results, element_bytes);
  const int64_t wanted = ceil_div(kTargetBlocks, blocks);
  std::optional<ReductionSplit> best;
  // The fewest pieces that reach the target, else the most there are; a row reduction cuts its row.
  auto better = [&](int64_t p) {
    if (!best) return true;
    const bool reaches = p >= wanted, best_reaches = best->pieces >= wanted;
    return reaches != best_reaches ? reaches : reaches ? p < best->pieces : p > best->pieces;
  };
  for (size_t d = row ? shape.size() - 1 : 0; d < shape.size(); ++d) {
    if (!reduced[d]) continue;
    const int64_t n = shape[d].hint(), others = length / n;
    for (int64_t p = 2; p <= std::min<int64_t>(n, 4 * wanted); ++p) {
      if (n % p != 0) continue;
      const int64_t piece = n / p;
      if (piece * others < (row ? kMinRowPiece : kMinColumnPiece)) break;
      // Row pieces start on 16-element boundaries, so a piece's vector loads stay aligned.
      if (row && piece % 16 != 0) continue;
      if (better(p)) best = ReductionSplit{static_cast<int>(d), p};
    }
  }
  if (best && best->pieces < 2) return std::nullopt;
  return best;
}

std::optional<SplitKernels> split_reduction(const Kernel& k, const ReductionSplit& split) {
  const bool row = k.kind == Kernel::Kind::RowReduce;
  if ((!row && k.kind != Kernel::Kind::ColumnReduce) || !codegen::all_static(k.shape)) return std::nullopt;
  const size_t rank = k.shape.size(), n_in = k.inputs.size();
  std::vector<bool> reduced = k.reduced_dims;
  if (row) {
    reduced.assign(rank, false);
    reduced.back() = true;
  }
  const int dim = split.dim;
  if (dim < 0 || static_cast<size_t>(dim) >= rank || !reduced[dim] || split.pieces < 2 ||
      k.shape[dim].hint() % split.pieces != 0)
    return std::nullopt;
  const int64_t pieces = split.pieces, piece = k.shape[dim].hint() / pieces;

  // Which values move along the reduced dimensions, and which are computed from a reduction.
  auto moves = [&](const Sizes& strides) {
    for (size_t d = 0; d < rank; ++d)
      if (reduced[d] && strides[d] != 0) return true;
    return false;
  };
  std::vector<bool> varies(k.exprs.size(), false), after_reduce(k.exprs.size(), false);
  for (size_t i = 0; i < k.exprs.size(); ++i) {
    const Expr& e = k.exprs[i];
    // A row index would count from the piece's start; gathers and ranges are left to one kernel.
    if (e.op == ExprOp::RowIndex || e.op == ExprOp::Gather || e.op == ExprOp::InRange) return std::nullopt;
    if (e.op == ExprOp::Load) {
      varies[i] = moves(k.inputs[e.operand].strides);
    } else if (is_reduce(e.op)) {
      // The partials are combined in the reduction's own type: f16/bf16 would round each one.
      if (after_reduce[e.args[0]] || e.dtype == DType::F16 || e.dtype == DType::BF16) return std::nullopt;
      after_reduce[i] = true;
    } else {
      for (int a : e.args) {
        varies[i] = varies[i] || varies[a];
        after_reduce[i] = after_reduce[i] || after_reduce[a];
      }
    }
  }
  std::vector<bool> per_element(k.outputs.size());
  for (const codegen::Store& s : k.stores) {
    per_element[s.output] = moves(k.outputs[s.output].strides);
    if (per_element[s.output] ? after_reduce[s.expr] : varies[s.expr]) return std::nullopt;
  }
  // The reductions the per-row (per-column) outputs need.
  std::vector<bool> needed(k.exprs.size(), false);
  for (const codegen::Store& s : k.stores)
    if (!per_element[s.output]) needed[s.expr] = true;
  for (size_t i = k.exprs.size(); i-- > 0;)
    if (needed[i] && !is_reduce(k.exprs[i].op))
      for (int a : k.exprs[i].args) needed[a] = true;

  SplitKernels out;
  // The partial kernel: dimension `dim` becomes [pieces, piece], the pieces kept, the rest reduced as before.
  Kernel& p = out.partial;
  p.kind = k.kind;
  p.name = k.name + "_partial";
  p.shape = k.shape;
  p.shape[dim] = pieces;
  p.shape.insert(p.shape.begin() + dim + 1, Size(piece));
  std::vector<bool> p_reduced = reduced;
  p_reduced[dim] = false;
  p_reduced.insert(p_reduced.begin() + dim + 1, true);
  if (!row) p.reduced_dims = p_reduced;
  for (const codegen::Operand& in : k.inputs) {
    codegen::Operand o = in;
    o.strides = split_strides(in.strides, dim, piece);
    p.inputs.push_back(o);
  }
  p.exprs = k.exprs;
  // Each partial buffer holds one value per kept coordinate of the partial space, row-major.
  Sizes kept_sizes;
  for (size_t d = 0; d < p.shape.size(); ++d)
    if (!p_reduced[d]) kept_sizes.push_back(p.shape[d]);
  const Sizes kept_strides = contiguous_strides(kept_sizes);
  Sizes partial_strides;  // over the partial space
  for (size_t d = 0, kept = 0; d < p.shape.size(); ++d)
    partial_strides.push_back(p_reduced[d] ? Size(0) : kept_strides[kept++]);
  std::vector<int> partial_of(k.exprs.size(), -1);
  for (size_t i = 0; i < k.exprs.size(); ++i) {
    if (!needed[i] || !is_reduce(k.exprs[i].op)) continue;
    partial_of[i] = static_cast<int>(out.partials.size());
    out.partials.push_back({k.exprs[i].dtype, kept_sizes});
    p.stores.push_back({static_cast<int>(i), static_cast<int>(p.outputs.size())});
    p.outputs.push_back(codegen::Operand{k.exprs[i].dtype, partial_strides, 0, {}});
  }
  if (out.partials.empty()) return std::nullopt;
  for (const codegen::Store& s : k.stores) {
    if (!per_element[s.output]) continue;
    codegen::Operand o = k.outputs[s.output];
    o.strides = split_strides(o.strides, dim, piece);
    p.stores.push_back({s.expr, static_cast<int>(p.outputs.size())});
    p.outputs.push_back(o);
    out.partial_outputs.push_back(s.output);
  }

  // The combine kernel: the original space with dimension `dim` now the pieces and the other reduced dimensions
  // already combined (size 1); it reduces the partials and computes what the reductions feed.
  Kernel& c = out.combine;
  c.kind = k.kind;
  c.name = k.name;
  c.reduced_dims = k.reduced_dims;
  c.shape = k.shape;
  for (size_t d = 0; d < rank; ++d)
    if (reduced[d]) c.shape[d] = static_cast<int>(d) == dim ? Size(pieces) : Size(1);
  // The inputs the epilogue reads, each the same along the reduced dimensions.
  std::vector<int> input_at(n_in, -1);
  for (size_t i = 0; i < k.exprs.size(); ++i) {
    const Expr& e = k.exprs[i];
    if (!needed[i] || e.op != ExprOp::Load || input_at[e.operand] >= 0) continue;
    input_at[e.operand] = static_cast<int>(c.inputs.size());
    out.combine_inputs.push_back(e.operand);
    codegen::Operand o = k.inputs[e.operand];
    for (size_t d = 0; d < rank; ++d)
      if (reduced[d]) o.strides[d] = 0;  // 0 already, but for size-1 dimensions
    c.inputs.push_back(o);
  }
  const int first_partial = static_cast<int>(c.inputs.size());
  for (const SplitKernels::PartialBuffer& b : out.partials) {
    Sizes strides;  // the partial space's kept dimensions are the combine space's, with `dim` the pieces
    for (size_t d = 0; d < p.shape.size(); ++d) {
      if (static_cast<int>(d) == dim + 1) continue;
      strides.push_back(partial_strides[d]);
    }
    c.inputs.push_back(codegen::Operand{b.dtype, strides, 0, {}});
  }
  std::vector<int> map(k.exprs.size(), -1);
  auto add = [&](Expr e) {
    c.exprs.push_back(std::move(e));
    return static_cast<int>(c.exprs.size()) - 1;
  };
  for (size_t i = 0; i < k.exprs.size(); ++i) {
    const Expr& e = k.exprs[i];
    if (!needed[i]) continue;
    if (is_reduce(e.op)) {
      Expr load;
      load.op = ExprOp::Load;
      load.dtype = e.dtype;
      load.operand = first_partial + partial_of[i];
      Expr combine;
      combine.op = e.op;  // a sum of sums, a max of maxes, a min of mins
      combine.dtype = e.dtype;
      combine.args = {add(load)};
      map[i] = add(combine);
      continue;
    }
    Expr copy = e;
    for (int& a : copy.args) a = map[a];
    if (copy.op == ExprOp::Load) copy.operand = input_at[e.operand];
    map[i] = add(copy);
  }
  for (const codegen::Store& s : k.stores) {
    if (per_element[s.output]) continue;
    c.stores.push_back({map[s.expr], static_cast<int>(c.outputs.size())});
    c.outputs.push_back(k.outputs[s.output]);
    out.combine_outputs.push_back(s.output);
  }
  return out;
}

}  // namespace fastcomp::plan
