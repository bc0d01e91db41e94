// Reductions over the last dimension, with their prologue and epilogue in one row-reduce kernel: sum, mean,
// amax/amin, var/std, logsumexp, softmax/log_softmax and layer_norm. They accumulate where torch does (f32 for
// f16/bf16, i64 for integer sums) and round once at the end. sum/mean/amax/amin/var/std also reduce the last
// several dimensions together (x.mean((2, 3)) of an NCHW tensor) as one row, from a materialised x, and any
// dimensions that keep the last one (x.sum(0), x.var((0, 2))) in a column-reduce kernel
// (lower_column_reduce.cpp), and over every dimension (x.sum()) as one row. sum/mean/amax/amin over a few long
// rows or columns (a whole large tensor) are split across blocks in two kernels (split_reduce.h), and over the
// last dimension together with others that are not the trailing ones (x.mean((0, 2, 3)) of NCHW) a row
// reduction into partials then a column reduction (lower_two_stage_reduce.cpp: var/std combine each row's sum
// and squared deviations, and over a few long rows or columns each piece's).
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "plan/lowering.h"

namespace fastcomp::plan::detail {
namespace {

// True when `dims` (None counts as every dimension) names exactly the last dimension of a rank-`rank` tensor.
bool last_dim_only(const graph::Arg* dims, size_t rank) {
  if (rank == 0) return false;
  if (is_none(dims)) return rank == 1;
  auto d = const_int_list(dims);
  if (!d || d->size() != 1) return false;
  const int64_t v = (*d)[0];
  return v == -1 || v == static_cast<int64_t>(rank) - 1;
}

// How many trailing dimensions `dims` names when it names the last k of a rank-`rank` tensor, each once, in any
// order (x.mean((2, 3)), x.sum((-1, -2))); 0 otherwise. None names every dimension (x.sum()).
int trailing_dims(const graph::Arg* dims, size_t rank) {
  if (last_dim_only(dims, rank)) return 1;
  if (rank == 0) return 0;
  if (is_none(dims)) return static_cast<int>(rank);
  auto d = const_int_list(dims);
  if (!d || d->empty() || d->size() > rank) return 0;
  std::vector<bool> named(rank, false);
  for (int64_t v : *d) {
    if (v < 0) v += static_cast<int64_t>(rank);
    if (v < 0 || v >= static_cast<int64_t>(rank) || named[v]) return 0;
    named[v] = true;
  }
  for (size_t i = rank - d->size(); i < rank; ++i)
    if (!named[i]) return 0;
  return static_cast<int>(d->size());
}

// The dimensions `dims` names, one flag per dimension of a rank-`rank` tensor, when they are constants, each
// named once; nullopt otherwise.
std::optional<std::vector<bool>> named_dims(const graph::Arg* dims, size_t rank) {
  if (rank < 2 || is_none(dims)) return std::nullopt;
  auto d = const_int_list(dims);
  if (!d || d->empty()) return std::nullopt;
  std::vector<bool> reduced(rank, false);
  for (int64_t v : *d) {
    if (v < 0) v += static_cast<int64_t>(rank);
    if (v < 0 || v >= static_cast<int64_t>(rank) || reduced[v]) return std::nullopt;
    reduced[v] = true;
  }
  return reduced;
}

// Which dimensions a reduction over `dims` combines (`flags`, empty when no kernel takes it), and how: the
// trailing `k` alone (a row reduction), the last one kept (a column reduction, k == 0), or the trailing k and
// others apart from them (`mixed`: a row reduction, then a column one).
struct ReducedDims {
  int k = 0;
  std::vector<bool> flags;
  bool mixed = false;
};

ReducedDims reduced_dims(const graph::Arg* dims, size_t rank) {
  ReducedDims r;
  r.k = trailing_dims(dims, rank);
  if (r.k > 0) {
    r.flags.assign(rank, false);
    std::fill(r.flags.end() - r.k, r.flags.end(), true);
  } else if (auto named = named_dims(dims, rank)) {
    r.flags = std::move(*named);
    if (r.flags.back()) {
      r.mixed = true;
      for (size_t d = rank; d-- > 0 && r.flags[d];) ++r.k;
    }
  }
  return r;
}

// The number of elements a reduction over the flagged dimensions of `sizes` combines, and whether it is the same
// for every size (no flagged dimension is symbolic).
std::pair<double, bool> reduced_length(const Sizes& sizes, const std::vector<bool>& flags) {
  double n = 1;
  bool fixed = true;
  for (size_t i = 0; i < sizes.size(); ++i)
    if (flags[i]) {
      n *= static_cast<double>(sizes[i].hint());
      fixed = fixed && sizes[i].is_static();
    }
  return {n, fixed};
}

// The reduction of x over `r`: in parts where one kernel cannot do it (Lowerer::reduce_in_parts: `partials`, in
// `acc`), else the row-reduce or column-reduce kernel computing fn (split as partials.splittable allows).
bool reduce_over(Lowerer& L, const graph::Node& n, graph::NodeId x, const ReducedDims& r, const Lowerer::RowFn& fn,
                 const Lowerer::PartialsFn& partials, DType acc) {
  if (std::optional<bool> in_parts = L.reduce_in_parts(n, x, r.k, r.flags, acc, partials)) return *in_parts;
  if (r.mixed) return false;
  const bool split = partials.splittable;
  return r.k > 0 ? L.row_reduce(n, x, {}, fn, r.k, split) : L.column_reduce(n, x, r.flags, fn, split);
}

Operand node_operand(graph::NodeId id) {
  Operand o;
  o.kind = Operand::Kind::Node;
  o.node = id;
  return o;
}

Operand scalar_operand(double v, DType t) {
  Operand o;
  o.scalar = v;
  o.scalar_dtype = t;
  return o;
}

// sum, mean, amax or amin of x over `red` (the result's shape, keepdim or not, is the node's).
bool reduce_elements(Lowerer& L, const graph::Node& n, graph::NodeId x, const std::string& op, const ReducedDims& red) {
  const DType out = L.node_dtype(n.id);
  if (op == "mean" && !is_floating(out)) return false;
  const auto [n_len, fixed_len] = reduced_length(meta_sizes(L.node(x).meta), red.flags);
  if (op == "mean" && !fixed_len)
    return L.decline(red.k > 0 ? "a mean over a symbolic row length" : "a mean over symbolic reduced dimensions");
  if (out == DType::Bool) return false;
  const DType acc = is_floating(out) ? opmath(out) : DType::I64;
  const ExprOp reduce = op == "amax" ? ExprOp::ReduceMax : op == "amin" ? ExprOp::ReduceMin : ExprOp::ReduceSum;
  const bool mean = op == "mean";
  // The result from values to reduce: x's elements, or the parts' partial results (a sum of sums).
  auto result = [=](Cluster& c, int values) {
    int r = c.op(reduce, acc, {c.cast(values, acc)});
    return mean ? c.op(ExprOp::Div, acc, {r, c.constant(acc, n_len)}) : r;
  };
  const Lowerer::PartialsFn partials{
      [=](Cluster& c, int xe, int64_t) { return std::vector<int>{c.op(reduce, acc, {c.cast(xe, acc)})}; },
      [=](Cluster& c, const std::vector<int>& parts, int64_t) { return result(c, parts[0]); },
      /*splittable=*/true};
  return reduce_over(L, n, x, red, [=](Cluster& c, int xe, const std::vector<int>&) {
    return std::make_pair(result(c, xe), true);
  }, partials, acc);
}

}  // namespace

int softmax_expr(Cluster& c, int x, DType acc, bool log) {
  const int xf = c.cast(x, acc);
  const int m = c.op(ExprOp::ReduceMax, acc, {xf});
  const int shifted = c.op(ExprOp::Sub, acc, {xf, m});
  const int e = c.op(ExprOp::Exp, acc, {shifted});
  const int s = c.op(ExprOp::ReduceSum, acc, {e});
  return log ? c.op(ExprOp::Sub, acc, {shifted, c.op(ExprOp::Log, acc, {s})}) : c.op(ExprOp::Div, acc, {e, s});
}

bool lower_reduction_op(Lowerer& L, const graph::Node& n, const std::string& op) {
  if (n.type != graph::ValueType::Tensor || n.args.empty() || n.args[0].kind != graph::Arg::Kind::Node) return false;
  const graph::NodeId x = n.args[0].node;
  if (!L.value(x).tensor) return false;
  const size_t rank = L.node(x).meta.sizes.size();
  if (rank == 0) return false;
  const double len = static_cast<double>(L.node(x).meta.sizes.back());
  // Means and variances divide by the row length, a constant in the kernel: a symbolic one is not lowered yet.
  const bool symbolic_len = !meta_sizes(L.node(x).meta).back().is_static();
  const DType out = L.node_dtype(n.id);
  CallArgs args(n);

  if (op == "sum" || op == "mean" || op == "amax" || op == "amin") {
    const ReducedDims red = reduced_dims(args.get(1, "dim"), rank);
    if (!args.only_keywords({"dim", "keepdim", "dtype"}) || red.flags.empty()) return false;
    if (args.get(2, "keepdim") && !const_bool(args.get(2, "keepdim"))) return false;
    return reduce_elements(L, n, x, op, red);
  }
  // Global average pooling (ResNet's head): the mean of each channel's H x W plane, kept as [N, C, 1, 1].
  if (op == "adaptive_avg_pool2d" && (n.target_name == "torch.nn.functional.adaptive_avg_pool2d" ||
                                      n.target_name == "torch._C._nn.adaptive_avg_pool2d")) {
    const std::optional<std::vector<int64_t>> size = const_int_list(args.get(1, "output_size"));
    if (!args.only_keywords({"input", "output_size"}) || !size || rank < 3 ||
        !std::all_of(size->begin(), size->end(), [](int64_t v) { return v == 1; }))
      return false;
    ReducedDims red;
    red.k = 2;
    red.flags.assign(rank, false);
    red.flags[rank - 1] = red.flags[rank - 2] = true;
    return reduce_elements(L, n, x, "mean", red);
  }
  if (op == "var" || op == "std") {
    if (!args.only_keywords({"dim", "unbiased", "keepdim", "correction"}) || !is_floating(out)) return false;
    const ReducedDims red = reduced_dims(args.get(1, "dim"), rank);
    if (red.flags.empty()) return false;
    const auto [n_len, fixed_len] = reduced_length(meta_sizes(L.node(x).meta), red.flags);
    if (!fixed_len)
      return L.decline(op + (red.k > 0 ? " over a symbolic row length" : " over symbolic reduced dimensions"));
    double correction = 1;
    if (const graph::Arg* c = args.get(99, "correction"); c && !is_none(c)) {
      auto v = const_number(c);
      if (!v) return false;
      correction = *v;
    }
    if (const graph::Arg* u = args.get(2, "unbiased")) {
      auto v = const_bool(u);
      if (!v) return false;
      correction = *v ? 1 : 0;
    }
    if (const graph::Arg* k = args.get(3, "keepdim"))
      if (!const_bool(k)) return false;
    const DType acc = opmath(out);
    const bool std_dev = op == "std";
    const double dof = std::max(n_len - correction, 0.0);
    auto finish = [=](Cluster& c, int squares) {
      int r = c.op(ExprOp::Div, acc, {squares, c.constant(acc, dof)});
      return std_dev ? c.op(ExprOp::Sqrt, acc, {r}) : r;
    };
    // Two passes over the reduced elements (the mean, then the squared deviations from it), as torch's result.
    auto sum_and_squares = [=](Cluster& c, int xe, double count) {
      const int xf = c.cast(xe, acc);
      const int sum = c.op(ExprOp::ReduceSum, acc, {xf});
      const int d = c.op(ExprOp::Sub, acc, {xf, c.op(ExprOp::Div, acc, {sum, c.constant(acc, count)})});
      return std::make_pair(sum, c.op(ExprOp::ReduceSum, acc, {c.op(ExprOp::Mul, acc, {d, d})}));
    };
    // Over parts of equal length m (rows of x.var((0, 2, 3)), pieces of x.var()'s one long row): each part's sum
    // and squared deviations from its own mean, then the squares are theirs plus m * (part mean - mean)^2 each
    // (Chan et al.'s pairwise update), two passes over the partials.
    const Lowerer::PartialsFn partials{
        [=](Cluster& c, int xe, int64_t m) {
          auto [sum, squares] = sum_and_squares(c, xe, static_cast<double>(m));
          return std::vector<int>{sum, squares};
        },
        [=](Cluster& c, const std::vector<int>& parts, int64_t m) {
          const int sums = parts.at(0), squares = parts.at(1);
          const int mean = c.op(ExprOp::Div, acc, {c.op(ExprOp::ReduceSum, acc, {sums}), c.constant(acc, n_len)});
          const int d = c.op(ExprOp::Sub, acc, {c.op(ExprOp::Div, acc, {sums, c.constant(acc, m)}), mean});
          const int between = c.op(ExprOp::ReduceSum, acc, {c.op(ExprOp::Mul, acc, {d, d})});
          const int within = c.op(ExprOp::ReduceSum, acc, {squares});
          return finish(c, c.op(ExprOp::Add, acc, {within, c.op(ExprOp::Mul, acc, {c.constant(acc, m), between})}));
        },
        /*splittable=*/false};
    return reduce_over(L, n, x, red, [=](Cluster& c, int xe, const std::vector<int>&) {
      return std::make_pair(finish(c, sum_and_squares(c, xe, n_len).second), true);
    }, partials, acc);
  }
  if (op == "logsumexp") {
    if (!args.only_keywords({"dim", "keepdim"}) || !last_dim_only(args.get(1, "dim"), rank) || !is_floating(out))
      return false;
    const DType acc = opmath(out);
    return L.row_reduce(n, x, {}, [=](Cluster& c, int xe, const std::vector<int>&) {
      const int xf = c.cast(xe, acc);
      int m = c.op(ExprOp::ReduceMax, acc, {xf});
      // An infinite maximum would give inf - inf = NaN: torch shifts by 0 then.
      const int inf = c.constant(acc, std::numeric_limits<double>::infinity());
      const int is_inf = c.op(ExprOp::Eq, DType::Bool, {c.op(ExprOp::Abs, acc, {m}), inf});
      m = c.op(ExprOp::Where, acc, {is_inf, c.constant(acc, 0), m});
      const int s = c.op(ExprOp::ReduceSum, acc, {c.op(ExprOp::Exp, acc, {c.op(ExprOp::Sub, acc, {xf, m})})});
      return std::make_pair(c.op(ExprOp::Add, acc, {c.op(ExprOp::Log, acc, {s}), m}), true);
    });
  }
  if (op == "softmax" || op == "log_softmax") {
    if (!args.only_keywords({"dim", "dtype", "_stacklevel", "half_to_float"}) || !is_floating(out)) return false;
    if (!last_dim_only(args.get(1, "dim"), rank)) return false;
    const DType acc = opmath(out);
    const bool log = op == "log_softmax";
    return L.row_reduce(n, x, {}, [=](Cluster& c, int xe, const std::vector<int>&) {
      // An explicit dtype= converts the input first (torch casts before the op).
      return std::make_pair(softmax_expr(c, c.cast(xe, out), acc, log), false);
    });
  }
  if (op == "layer_norm") {
    if (!args.only_keywords({"normalized_shape", "weight", "bias", "eps", "cudnn_enable"}) || !is_floating(out))
      return false;
    if (symbolic_len) return L.decline("layer_norm over a symbolic row length");
    auto shape = const_int_list(args.get(1, "normalized_shape"));
    if (!shape || shape->size() != 1 || (*shape)[0] != static_cast<int64_t>(len)) return false;
    const graph::Arg* w = args.get(2, "weight");
    const graph::Arg* b = args.get(3, "bias");
    double eps = 1e-5;
    if (const graph::Arg* e = args.get(4, "eps")) {
      auto v = const_number(e);
      if (!v) return false;
      eps = *v;
    }
    std::vector<Operand> extra;
    int w_at = -1, b_at = -1;
    for (auto [arg, at] : {std::pair{w, &w_at}, std::pair{b, &b_at}}) {
      if (is_none(arg)) continue;
      if (arg->kind != graph::Arg::Kind::Node || !L.value(arg->node).tensor) return false;
      *at = static_cast<int>(extra.size());
      extra.push_back(node_operand(arg->node));
    }
    const DType acc = opmath(out);
    extra.push_back(scalar_operand(eps, acc));
    const int eps_at = static_cast<int>(extra.size()) - 1;
    return L.row_reduce(n, x, extra, [=](Cluster& c, int xe, const std::vector<int>& ex) {
      const int xf = c.cast(xe, acc);
      const int n_len = c.constant(acc, len);
      const int mean = c.op(ExprOp::Div, acc, {c.op(ExprOp::ReduceSum, acc, {xf}), n_len});
      const int d = c.op(ExprOp::Sub, acc, {xf, mean});
      const int var = c.op(ExprOp::Div, acc, {c.op(ExprOp::ReduceSum, acc, {c.op(ExprOp::Mul, acc, {d, d})}), n_len});
      const int rstd = c.op(ExprOp::Rsqrt, acc, {c.op(ExprOp::Add, acc, {var, ex[eps_at]})});
      int y = c.op(ExprOp::Mul, acc, {d, rstd});
      if (w_at >= 0) y = c.op(ExprOp::Mul, acc, {y, c.cast(ex[w_at], acc)});
      if (b_at >= 0) y = c.op(ExprOp::Add, acc, {y, c.cast(ex[b_at], acc)});
      return std::make_pair(y, false);
    });
  }
  return false;
}

}  // namespace fastcomp::plan::detail
