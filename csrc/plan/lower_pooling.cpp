// Max pooling (F.max_pool2d, torch.max_pool2d) as two pointwise kernels of the plan: the maximum over the
// window's columns, then over its rows (the maximum of maxima is the maximum, NaN included). Each tap is a load
// shifted along one dimension only, so the coordinates where it falls into the padding are one range of that
// dimension (kernel_ir.h's Operand::valid): there it is not read, and -inf stands in for it, which no element's
// maximum keeps. The window's input is read in place, or, where it is still a lazy pointwise expression (ResNet's
// batch norm and ReLU before the pooling), recomputed at each column tap, so it is never written to memory.
//
// Both kernels walk their space in the result's memory order (channels-last after a convolution planned so), as
// a kernel with ranges is walked in the order of its space: consecutive threads then read and write consecutive
// channels. ResNet-18 at batch 8 on an H200: torch's max_pool_forward_nhwc took 37 us a call, torch.compile's
// fused kernel 6.5 us.
#include <algorithm>
#include <limits>
#include <numeric>

#include "plan/lowering.h"

namespace fastcomp::plan::detail {
namespace {

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// The output coordinates o (of `out` along a dimension) whose tap at o * stride + shift lies in [0, in).
codegen::DimRange tap_range(int dim, int64_t in, int64_t out, int64_t stride, int64_t shift) {
  const int64_t begin = std::max<int64_t>(0, floor_div(-shift + stride - 1, stride));
  const int64_t end = std::min<int64_t>(out, floor_div(in - 1 - shift, stride) + 1);
  return {dim, Size(begin), Size(std::max(begin, end))};
}

// Dimensions by `strides`, largest first (a stable order: size-1 dimensions keep their place among equals).
std::vector<size_t> memory_order(const std::vector<int64_t>& strides, const std::vector<int64_t>& sizes) {
  std::vector<size_t> order(strides.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return sizes[a] != 1 && sizes[b] != 1 && strides[a] > strides[b];
  });
  return order;
}

// Dense strides for `sizes` laid out in `order` (outermost first).
Sizes dense_in(const std::vector<int64_t>& sizes, const std::vector<size_t>& order) {
  Sizes out(sizes.size(), Size(0));
  int64_t step = 1;
  for (size_t i = order.size(); i-- > 0;) {
    out[order[i]] = Size(step);
    step *= sizes[order[i]];
  }
  return out;
}

template <class T>
std::vector<T> permuted(const std::vector<T>& v, const std::vector<size_t>& order) {
  std::vector<T> out;
  for (size_t d : order) out.push_back(v[d]);
  return out;
}

struct Window {
  int64_t kernel = 1, stride = 1, padding = 0, dilation = 1;
};

// One pass: along dimension `dim` (of the logical [.., H, W] shape), each element of `out_sizes` is the maximum
// of `taps(cluster, shift, range)`'s values over the window's taps. The kernel's space is out_sizes in `order`; a
// tap's range is over that space.
using TapFn = std::function<int(Cluster&, int64_t shift, const codegen::DimRange& range)>;
int window_max(Cluster& c, DType t, const Window& w, int space_dim, int64_t in, int64_t out, const TapFn& tap) {
  int value = -1;
  for (int64_t k = 0; k < w.kernel; ++k) {
    const int64_t shift = k * w.dilation - w.padding;
    const codegen::DimRange r = tap_range(space_dim, in, out, w.stride, shift);
    if (r.begin == r.end) continue;  // every coordinate's tap is padding
    const bool whole = r.begin == 0 && r.end == out;
    int v = tap(c, shift, whole ? codegen::DimRange{} : r);
    if (!whole)
      v = c.op(ExprOp::Where, t, {c.in_range(r), v, c.constant(t, -std::numeric_limits<double>::infinity())});
    value = value < 0 ? v : c.op(ExprOp::Max, t, {value, v});
  }
  return value;
}

// The window's parameters along each of the last two dimensions, or nullopt.
std::optional<std::pair<Window, Window>> windows(const CallArgs& args) {
  auto pair = [](const graph::Arg* a, int64_t fallback) -> std::optional<std::pair<int64_t, int64_t>> {
    if (!a || is_none(a)) return std::make_pair(fallback, fallback);
    const std::optional<std::vector<int64_t>> v = const_int_list(a);
    if (!v || v->empty()) return fallback < 0 ? std::nullopt : std::optional{std::make_pair(fallback, fallback)};
    if (v->size() == 1) return std::make_pair((*v)[0], (*v)[0]);
    if (v->size() == 2) return std::make_pair((*v)[0], (*v)[1]);
    return std::nullopt;
  };
  const auto kernel = pair(args.get(1, "kernel_size"), -1);
  if (!kernel) return std::nullopt;
  const auto stride = pair(args.get(2, "stride"), -1);  // None or []: the kernel size
  const auto padding = pair(args.get(3, "padding"), 0);
  const auto dilation = pair(args.get(4, "dilation"), 1);
  if (!padding || !dilation) return std::nullopt;
  const std::pair<int64_t, int64_t> s = stride && stride->first > 0 ? *stride : *kernel;
  Window h{kernel->first, s.first, padding->first, dilation->first};
  Window w{kernel->second, s.second, padding->second, dilation->second};
  for (const Window& x : {h, w})
    if (x.kernel < 1 || x.stride < 1 || x.padding < 0 || x.dilation < 1 || 2 * x.padding > x.kernel) return std::nullopt;
  return std::make_pair(h, w);
}

bool lower_max_pool2d(Lowerer& L, const graph::Node& n) {
  CallArgs args(n);
  if (!args.only_keywords({"input", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"}))
    return false;
  if (const graph::Arg* r = args.get(6, "return_indices"); r && const_bool(r) != false) return false;
  if (const graph::Arg* c = args.get(5, "ceil_mode"); c && !const_bool(c)) return false;
  const graph::Arg* input = args.get(0, "input");
  if (!input || input->kind != graph::Arg::Kind::Node || !L.value(input->node).tensor) return false;
  const graph::NodeId x = input->node;
  const DType t = L.node_dtype(n.id);
  if (!is_floating(t) || L.node_dtype(x) != t) return false;
  const std::optional<std::pair<Window, Window>> win = windows(args);
  if (!win) return false;
  const Sizes in_sizes = meta_sizes(L.node(x).meta), out_sizes = meta_sizes(n.meta);
  const size_t rank = in_sizes.size();
  if ((rank != 3 && rank != 4) || out_sizes.size() != rank || !codegen::all_static(in_sizes) ||
      !codegen::all_static(out_sizes) || codegen::product(out_sizes) == 0)
    return false;
  const int hd = static_cast<int>(rank) - 2, wd = static_cast<int>(rank) - 1;
  const std::vector<int64_t> in = hints(in_sizes), out = hints(out_sizes);

  // The result's memory order; the column pass's result [.., H, OW] is laid out alike.
  const Sizes out_strides_planned = L.node_strides(n.id);
  if (!codegen::all_static(out_strides_planned) || !is_dense(out_sizes, out_strides_planned)) return false;
  const std::vector<size_t> order = memory_order(hints(out_strides_planned), out);
  std::vector<int64_t> cols = in;
  cols[wd] = out[wd];
  const int space_h = static_cast<int>(std::find(order.begin(), order.end(), size_t(hd)) - order.begin());
  const int space_w = static_cast<int>(std::find(order.begin(), order.end(), size_t(wd)) - order.begin());

  // The window's input: x's lazy expression (moved to each tap), or its buffer.
  const Cluster* lazy = L.lazy_cluster(x);
  const bool recompute = lazy && lazy->space() == in_sizes && movable_expression(*lazy, L.value(x).expr);
  const int x_buffer = recompute ? -1 : L.buffer_for(x);
  const std::vector<int> x_inputs = recompute ? loaded_buffers(*lazy, L.value(x).expr) : std::vector<int>{x_buffer};

  Buffer colmax;
  colmax.kind = Buffer::Kind::Alloc;
  colmax.dtype = t;
  colmax.sizes = codegen::to_sizes(cols);
  colmax.strides = dense_in(cols, order);
  const int colmax_id = L.add_buffer(colmax);
  const Window& ww = win->second;
  // A load over x's logical space at (strides, offset), read at column o * stride + shift of the pass's space.
  auto moved = [&](const Sizes& strides, const Size& offset, int64_t shift, const codegen::DimRange& range) {
    MovedLoad m{permuted(strides, order), offset, {}};
    const Size& sw = strides[wd];
    if (sw == 0) return m;  // the same element along the columns (a per-channel statistic)
    m.strides[space_w] = sw * ww.stride;
    m.offset = offset + sw * shift;
    m.valid = range;
    return m;
  };
  L.add_kernel(codegen::to_sizes(permuted(cols, order)), x_inputs, [&](Cluster& c) {
    const int v = window_max(c, t, ww, space_w, in[wd], out[wd], [&](Cluster& c, int64_t shift,
                                                                       const codegen::DimRange& r) {
      if (recompute)
        return c.cast(copy_moved(*lazy, L.value(x).expr, c, [&](const Sizes& s, const Size& o) {
          return moved(s, o, shift, r);
        }), t);
      const Buffer& b = L.buffer(x_buffer);
      const MovedLoad m = moved(b.strides, b.offset, shift, r);
      return c.load(b.root, b.dtype, m.strides, m.offset, m.valid);
    });
    c.store(v, colmax_id, t, permuted(colmax.strides, order), 0);
  });

  // The row pass, into the result's own buffer.
  Buffer result;
  result.kind = Buffer::Kind::Alloc;
  result.node = n.id;
  result.dtype = t;
  result.sizes = out_sizes;
  result.strides = out_strides_planned;
  const int result_id = L.add_buffer(result);
  const Window& wh = win->first;
  L.add_kernel(codegen::to_sizes(permuted(out, order)), {colmax_id}, [&](Cluster& c) {
    const int v = window_max(c, t, wh, space_h, in[hd], out[hd], [&](Cluster& c, int64_t shift,
                                                                       const codegen::DimRange& r) {
      Sizes strides = permuted(colmax.strides, order);
      const Size sh = strides[space_h];
      strides[space_h] = sh * wh.stride;
      return c.load(colmax_id, t, strides, sh * shift, r);
    });
    c.store(v, result_id, t, permuted(out_strides_planned, order), 0);
  });
  L.value(n.id).tensor = true;
  L.value(n.id).buffer = result_id;
  return true;
}

}  // namespace

bool lower_pooling_op(Lowerer& L, const graph::Node& n, const std::string&) {
  if (n.type != graph::ValueType::Tensor) return false;
  const std::string op = called_op_name(n);
  const bool torch_op = n.target_name == "torch.max_pool2d" || n.target_name == "torch.nn.functional.max_pool2d" ||
                        n.target_name.rfind("torch.nn.functional.boolean_dispatch", 0) == 0;
  return op == "max_pool2d" && torch_op && lower_max_pool2d(L, n);
}

}  // namespace fastcomp::plan::detail
