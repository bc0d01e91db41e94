// Indirect loads: F.embedding (and torch.embedding), torch.gather / Tensor.gather, torch.index_select /
// Tensor.index_select and x[idx] (one integer index tensor) as a Gather expression (kernel_ir.h) of their
// consumer's pointwise kernel. The source tensor is read in place from a buffer, addressed over the result's space
// with stride 0 along the gathered dimension, plus the loaded index times its stride there; the index tensor is
// read from a buffer too. Every index is checked against the source's size along that dimension (an out-of-range
// or negative one traps, as torch's device-side assert ends the context; x[idx] first counts negative indices
// from the end, as Python does). A row reduction takes gathers with one plain index load per row into its kernel (an embedding feeding
// layer_norm); any other reduction of gathered values reads them from memory (Cluster::row_reduce_excluded and
// pointwise_only).
#include "plan/lowering.h"

namespace fastcomp::plan::detail {
namespace {

bool tensor_arg(Lowerer& L, const graph::Arg* a) {
  return a && a->kind == graph::Arg::Kind::Node && L.value(a->node).tensor;
}

// A dimension argument normalised against `rank`, or nullopt.
std::optional<int> dim_of(const graph::Arg* a, size_t rank) {
  const std::optional<int64_t> d = const_int(a);
  const int64_t r = static_cast<int64_t>(rank);
  if (!d || *d < -r || *d >= r) return std::nullopt;
  return static_cast<int>(*d < 0 ? *d + r : *d);
}

// Buffer `b`'s strides with 0 where its size is 1 (one coordinate: the stride says nothing).
Sizes strides_of(const Buffer& b) {
  Sizes out = b.strides;
  for (size_t d = 0; d < b.sizes.size(); ++d)
    if (b.sizes[d] == 1) out[d] = 0;
  return out;
}

// How a buffer (the source, the index) is addressed over the result's space; the source with stride 0 along the
// gathered dimension.
using Place = std::function<Sizes(const Buffer&)>;

// Node n's value is source gathered along `dim` by `index` (both tensor nodes), the source addressed as
// `place_source` says, the index as `place_index` says, or (null) at the result's own coordinates: then an index
// still lazy over the result's space (torch.gather's (i * 2).clamp(max=8)) joins the kernel as it is. With
// `negative_from_end` (Python indexing, x[idx]) an index below 0 counts from the end first, so the kernel's
// check then sees what torch's indexing would reject (below -size, or size and above).
bool lower_gather(Lowerer& L, const graph::Node& n, graph::NodeId source, graph::NodeId index, int dim,
                  const Place& place_source, const Place& place_index, bool negative_from_end = false) {
  const DType index_dtype = L.node_dtype(index);
  if (index_dtype != DType::I32 && index_dtype != DType::I64) return false;
  // The wrap adds the size as a constant of the kernel: a symbolic one is not lowered yet.
  if (negative_from_end && !meta_sizes(L.node(source).meta)[dim].is_static())
    return L.decline("indexing with a tensor along a dimension of symbolic size");
  const Sizes out = meta_sizes(n.meta);
  // Every index is out of range of an empty dimension, and torch says so on the host (an IndexError the program may
  // catch) rather than with the device-side assert the kernel's check stands for, even where the result is empty
  // too (x[idx] of x [0, 0]): torch runs it.
  const codegen::Size gathered = meta_sizes(L.node(source).meta)[dim];
  if (gathered.is_static() && gathered.hint() == 0 && !(codegen::product(meta_sizes(L.node(index).meta)) == 0))
    return L.decline("indexing into a dimension of size 0");
  const Buffer src = L.buffer(L.buffer_for(source));  // first: reading it may seal the index's cluster
  const Cluster* lazy = place_index ? nullptr : L.lazy_cluster(index);
  const bool fused = lazy && !lazy->reduces() && lazy->space() == out;
  const Buffer idx = fused ? Buffer{} : L.buffer(L.buffer_for(index));
  const codegen::GatherAxis axis{src.sizes[dim], src.strides[dim]};
  L.value_in_space(
      n, out,
      [&](Cluster& c) {
        if (codegen::product(out) == 0) return c.constant(src.dtype, 0);  // no element is ever computed
        int i = fused ? L.value(index).expr
                      : c.load(idx.root, idx.dtype, place_index ? place_index(idx) : strides_of(idx), idx.offset);
        if (negative_from_end) {
          // A computed index: the gather reads element by element (no vector rows, no row-reduce prologue).
          const DType t = L.node_dtype(index);
          const int below_zero = c.op(ExprOp::Lt, DType::Bool, {i, c.constant(t, 0)});
          const int from_end = c.op(ExprOp::Add, t, {i, c.constant(t, static_cast<double>(axis.size.hint()))});
          i = c.op(ExprOp::Where, t, {below_zero, from_end, i});
        }
        return c.gather(src.root, src.dtype, place_source(src), src.offset, i, axis);
      },
      fused ? index : -1);
  return true;
}

// out[..., d] = weight[input[...], d].
bool embedding(Lowerer& L, const graph::Node& n, const graph::Arg* input, const graph::Arg* weight) {
  if (!tensor_arg(L, input) || !tensor_arg(L, weight) || L.node(weight->node).meta.sizes.size() != 2) return false;
  return lower_gather(
      L, n, weight->node, input->node, 0,
      [&](const Buffer& w) {
        Sizes s(L.node(input->node).meta.sizes.size(), Size(0));
        s.push_back(strides_of(w)[1]);
        return s;
      },
      [](const Buffer& i) {
        Sizes s = strides_of(i);
        s.push_back(0);
        return s;
      });
}

// F.embedding(input, weight, padding_idx, max_norm, ...) and the op it calls, torch.embedding(weight, indices,
// padding_idx, ...). padding_idx only changes the gradient; max_norm renormalises weight rows in place, which
// stays torch's.
bool lower_embedding(Lowerer& L, const graph::Node& n, bool functional) {
  CallArgs args(n);
  if (!functional)
    return args.only_keywords({"weight", "indices", "padding_idx", "scale_grad_by_freq", "sparse"}) &&
           embedding(L, n, args.get(1, "indices"), args.get(0, "weight"));
  if (!args.only_keywords({"input", "weight", "padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse"}))
    return false;
  return is_none(args.get(3, "max_norm")) && embedding(L, n, args.get(0, "input"), args.get(1, "weight"));
}

// torch.gather(input, dim, index): out has index's shape, out[c] = input[c with c[dim] = index[c]]. index may be
// smaller than input in the other dimensions: input is then read at the same coordinates.
bool lower_torch_gather(Lowerer& L, const graph::Node& n) {
  CallArgs args(n);
  if (!args.only_keywords({"input", "dim", "index", "sparse_grad"})) return false;
  const graph::Arg* input = args.get(0, "input");
  const graph::Arg* index = args.get(2, "index");
  if (!tensor_arg(L, input) || !tensor_arg(L, index)) return false;
  const size_t rank = L.node(input->node).meta.sizes.size();
  const std::optional<int> dim = dim_of(args.get(1, "dim"), rank);
  if (!dim || L.node(index->node).meta.sizes.size() != rank) return false;
  const Sizes index_sizes = meta_sizes(L.node(index->node).meta);
  return lower_gather(
      L, n, input->node, index->node, *dim,
      [&](const Buffer& x) {
        Sizes s = x.strides;
        for (size_t d = 0; d < rank; ++d)
          if (index_sizes[d] == 1 || static_cast<int>(d) == *dim) s[d] = 0;
        return s;
      },
      nullptr);
}

// torch.index_select(input, dim, index): out is input with dimension dim replaced by index's length, out[c] =
// input[c with c[dim] = index[c[dim]]].
bool lower_index_select(Lowerer& L, const graph::Node& n) {
  CallArgs args(n);
  if (!args.only_keywords({"input", "dim", "index"})) return false;
  const graph::Arg* input = args.get(0, "input");
  const graph::Arg* index = args.get(2, "index");
  if (!tensor_arg(L, input) || !tensor_arg(L, index)) return false;
  const std::optional<int> dim = dim_of(args.get(1, "dim"), L.node(input->node).meta.sizes.size());
  if (!dim || L.node(index->node).meta.sizes.size() != 1) return false;
  return lower_gather(
      L, n, input->node, index->node, *dim,
      [&](const Buffer& x) {
        Sizes s = strides_of(x);
        s[*dim] = 0;
        return s;
      },
      [&](const Buffer& i) {
        Sizes s(L.node(input->node).meta.sizes.size(), Size(0));
        s[*dim] = strides_of(i)[0];
        return s;
      });
}

// x[idx] with one integer tensor index: index_select along dimension 0 generalised to an index of any shape, out
// = idx.shape + x.shape[1:], where negative indices count from the end. Boolean masks (a result whose size
// depends on the data) and several indices stay torch's.
bool lower_tensor_index(Lowerer& L, const graph::Node& n) {
  if (n.args.size() != 2 || !n.kwargs.empty() || !tensor_arg(L, &n.args[0]) || !tensor_arg(L, &n.args[1])) return false;
  const graph::NodeId x = n.args[0].node, index = n.args[1].node;
  const size_t x_rank = L.node(x).meta.sizes.size(), index_rank = L.node(index).meta.sizes.size();
  if (x_rank == 0) return false;
  return lower_gather(
      L, n, x, index, 0,
      [&](const Buffer& b) {
        Sizes s(index_rank, Size(0));
        const Sizes strides = strides_of(b);
        s.insert(s.end(), strides.begin() + 1, strides.end());
        return s;
      },
      [&](const Buffer& i) {
        Sizes s = strides_of(i);
        s.resize(index_rank + x_rank - 1, Size(0));
        return s;
      },
      /*negative_from_end=*/true);
}

}  // namespace

bool lower_gather_op(Lowerer& L, const graph::Node& n, const std::string& op) {
  if (n.type != graph::ValueType::Tensor) return false;
  // By full name: user functions named like these are other ops.
  const std::string& t = n.target_name;
  if (op == "embedding" && (t == "torch.nn.functional.embedding" || t == "torch.embedding"))
    return lower_embedding(L, n, t == "torch.nn.functional.embedding");
  if (op == "gather" && (t == "torch.gather" || t == "Tensor.gather")) return lower_torch_gather(L, n);
  if (op == "index_select" && (t == "torch.index_select" || t == "Tensor.index_select"))
    return lower_index_select(L, n);
  if (op == "getitem" && (t == "operator.getitem" || t == "Tensor.__getitem__")) return lower_tensor_index(L, n);
  return false;
}

}  // namespace fastcomp::plan::detail
