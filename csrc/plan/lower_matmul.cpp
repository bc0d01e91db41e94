// Matrix products as cuBLASLt calls: F.linear and addmm (bias fused as cuBLASLt's epilogue), matmul/mm/bmm and `@` on
// 2-D and batched operands. Operands are read in place when one of their two matrix strides is 1 (a transposed
// view such as k.transpose(-2, -1) needs no copy) and their batch or leading dimensions collapse into one
// stride; otherwise a contiguous copy is made first. The pointwise ops that follow read the result in the next
// kernel.
#include <optional>

#include "plan/lowering.h"

namespace fastcomp::plan::detail {
namespace {

bool gemm_dtype(DType t) { return t == DType::F16 || t == DType::BF16 || t == DType::F32; }

struct Matrices {
  Size batch = 1, batch_stride = 0;
  Size rows = 1, cols = 1, row_stride = 0, col_stride = 0;
};

// cuBLASLt reads a matrix with one unit stride and the other at least the extent it spans (for every size).
bool readable(Matrices& m) {
  if (m.cols == 1) m.col_stride = 1;
  if (m.rows == 1) m.row_stride = m.col_stride == 1 ? m.cols : Size(1);
  if (m.rows == 1 && m.cols == 1) m.row_stride = m.col_stride = 1;
  if (m.col_stride == 1) return known_ge(m.row_stride, m.cols);
  if (m.row_stride == 1) return known_ge(m.col_stride, m.rows);
  return false;
}

// `b` (sizes/strides) as matrices over its last two dimensions, with its leading dimensions either folded into
// the rows (fold_rows) or broadcast/collapsed against the output's batch sizes `batch_sizes`.
std::optional<Matrices> as_matrices(const Buffer& b, bool fold_rows, const Sizes& batch_sizes) {
  const size_t r = b.sizes.size();
  if (r < 2) return std::nullopt;
  Matrices m;
  m.cols = b.sizes[r - 1];
  m.col_stride = b.strides[r - 1];
  if (fold_rows) {
    auto rows = collapse(b.sizes, b.strides, 0, r - 1);
    if (!rows) return std::nullopt;
    m.rows = rows->first;
    m.row_stride = rows->second;
  } else {
    m.rows = b.sizes[r - 2];
    m.row_stride = b.strides[r - 2];
    // Batch dimensions aligned right against the output's; missing or size-1 ones broadcast with stride 0.
    if (r - 2 > batch_sizes.size()) return std::nullopt;
    Sizes strides(batch_sizes.size(), 0);
    const size_t lead = batch_sizes.size() - (r - 2);
    for (size_t d = 0; d + 2 < r; ++d) {
      if (b.sizes[d] != 1 && b.sizes[d] != batch_sizes[lead + d]) return std::nullopt;
      strides[lead + d] = b.sizes[d] == 1 ? 0 : b.strides[d];
    }
    auto batch = collapse(batch_sizes, strides, 0, batch_sizes.size());
    if (!batch) return std::nullopt;
    m.batch = batch->first;
    m.batch_stride = batch->second;
  }
  if (!readable(m)) return std::nullopt;
  return m;
}

// The operand's matrices, copying it into a contiguous buffer when its own layout does not fit.
std::optional<Matrices> operand(Lowerer& L, int* buffer, bool fold_rows, const Sizes& batch) {
  if (auto m = as_matrices(L.buffer(*buffer), fold_rows, batch)) return m;
  if (L.buffer(*buffer).is_contiguous()) return std::nullopt;
  *buffer = L.contiguous_copy(*buffer);
  return as_matrices(L.buffer(*buffer), fold_rows, batch);
}

int output_buffer(Lowerer& L, const graph::Node& n) {
  Buffer d;
  d.kind = Buffer::Kind::Alloc;
  d.node = n.id;
  d.dtype = L.node_dtype(n.id);
  d.sizes = meta_sizes(n.meta);
  d.strides = contiguous_strides(d.sizes);
  const int id = L.add_buffer(d);
  L.value(n.id).tensor = true;
  L.value(n.id).buffer = id;
  return id;
}

// The product as a cuBLASLt call, the bias as its epilogue.
void add_linear_matmul(Lowerer& L, const LinearOperands& p, graph::NodeId node) {
  MatmulStep s;
  s.dtype = p.dtype;
  s.m = p.m;
  s.n = p.n;
  s.k = p.k;
  s.a = p.a;
  s.a_row_stride = p.a_row_stride;
  s.a_col_stride = p.a_col_stride;
  s.b = p.w;  // B = W^T: B[k][n] = W[n][k]
  s.b_row_stride = p.w_col_stride;
  s.b_col_stride = p.w_row_stride;
  s.bias = p.bias;
  s.epilogue = p.bias >= 0 ? MatmulStep::Epilogue::Bias : MatmulStep::Epilogue::None;
  s.d = p.d;
  s.d_row_stride = s.n;
  s.node = node;
  L.add_matmul(s);
}

bool lower_linear(Lowerer& L, const graph::Node& n) {
  CallArgs args(n);
  const graph::Arg* x = args.get(0, "input");
  const graph::Arg* w = args.get(1, "weight");
  const graph::Arg* bias = args.get(2, "bias");
  if (!x || !w || x->kind != graph::Arg::Kind::Node || w->kind != graph::Arg::Kind::Node) return false;
  if (!is_none(bias) && bias->kind != graph::Arg::Kind::Node) return false;
  const DType t = L.node_dtype(n.id);
  if (!gemm_dtype(t) || L.node_dtype(x->node) != t || L.node_dtype(w->node) != t) return false;
  const auto& ws = L.node(w->node).meta.sizes;
  if (ws.size() != 2 || L.node(x->node).meta.sizes.size() < 2) return false;
  int bias_buffer = -1;
  if (!is_none(bias)) {
    const auto& meta = L.node(bias->node).meta;
    if (L.node_dtype(bias->node) != t || meta.sizes.size() != 1 || (meta.sizes[0] > 1 && meta.strides[0] != 1))
      return false;
  }
  int a = L.buffer_for(x->node);
  int wb = L.buffer_for(w->node);
  if (!is_none(bias)) bias_buffer = L.buffer_for(bias->node);
  auto am = operand(L, &a, true, {});
  auto wm = operand(L, &wb, true, {});
  if (!am || !wm) return false;
  linear_product(L, {t, a, wb, bias_buffer, output_buffer(L, n), am->rows, wm->rows, am->cols, am->row_stride,
                     am->col_stride, wm->row_stride, wm->col_stride}, n.id);
  return true;
}

// torch.addmm(bias, x, w) = x @ w + bias (GPT-2's Conv1D), with beta and alpha at their default 1: F.linear's
// cuBLASLt product with W = w^T.
bool lower_addmm(Lowerer& L, const graph::Node& n) {
  if (n.args.size() != 3 || n.kwnames) return false;
  for (const graph::Arg& a : n.args)
    if (a.kind != graph::Arg::Kind::Node) return false;
  const DType t = L.node_dtype(n.id);
  const graph::NodeId xb = n.args[0].node, xa = n.args[1].node, xw = n.args[2].node;
  if (!gemm_dtype(t) || L.node_dtype(xa) != t || L.node_dtype(xw) != t || L.node_dtype(xb) != t) return false;
  const auto& bias = L.node(xb).meta;
  if (L.node(xa).meta.sizes.size() != 2 || L.node(xw).meta.sizes.size() != 2 || bias.sizes.size() != 1 ||
      (bias.sizes[0] > 1 && bias.strides[0] != 1) || bias.sizes[0] != L.node(xw).meta.sizes[1])
    return false;
  int a = L.buffer_for(xa), w = L.buffer_for(xw);
  const int bias_buffer = L.buffer_for(xb);
  auto am = operand(L, &a, true, {});
  auto wm = operand(L, &w, false, {});
  if (!am || !wm) return false;
  add_linear_matmul(L, {t, a, w, bias_buffer, output_buffer(L, n), am->rows, wm->cols, am->cols, am->row_stride,
                        am->col_stride, wm->col_stride, wm->row_stride}, n.id);
  return true;
}

bool lower_product(Lowerer& L, const graph::Node& n) {
  if (n.args.size() != 2 || n.kwnames || n.args[0].kind != graph::Arg::Kind::Node ||
      n.args[1].kind != graph::Arg::Kind::Node)
    return false;
  const graph::NodeId xa = n.args[0].node, xb = n.args[1].node;
  const DType t = L.node_dtype(n.id);
  if (!gemm_dtype(t) || L.node_dtype(xa) != t || L.node_dtype(xb) != t) return false;
  const auto& as = L.node(xa).meta.sizes;
  const auto& bs = L.node(xb).meta.sizes;
  const Sizes out = meta_sizes(n.meta);
  if (as.size() < 2 || bs.size() < 2) return false;
  int a = L.buffer_for(xa);
  int b = L.buffer_for(xb);
  // [..., m, k] @ [k, n] is one product with the batch folded into the rows when the batch collapses.
  const bool fold = bs.size() == 2 && collapse(L.buffer(a).sizes, L.buffer(a).strides, 0, as.size() - 1).has_value();
  const Sizes batch(out.begin(), out.end() - 2);
  auto am = operand(L, &a, fold, batch);
  auto bm = operand(L, &b, false, batch);
  if (!am || !bm) return false;
  MatmulStep s;
  s.dtype = t;
  s.m = am->rows;
  s.k = am->cols;
  s.n = bm->cols;
  // Both operands' batches are the output's (or 1 where nothing is batched): either gives the count.
  s.batch = fold ? Size(1) : am->batch == 1 ? bm->batch : am->batch;
  s.a = a;
  s.a_row_stride = am->row_stride;
  s.a_col_stride = am->col_stride;
  s.a_batch_stride = am->batch_stride;
  s.b = b;
  s.b_row_stride = bm->row_stride;
  s.b_col_stride = bm->col_stride;
  s.b_batch_stride = fold ? 0 : bm->batch_stride;
  s.d = output_buffer(L, n);
  s.d_row_stride = s.n;
  s.d_batch_stride = fold ? Size(0) : s.m * s.n;
  s.node = n.id;
  L.add_matmul(s);
  return true;
}

// A small-matmul kernel for the product, when linear_product may make one; false otherwise.
bool small_linear(Lowerer& L, const LinearOperands& p) {
  if (!L.options().small_matmul) return false;
  if (!codegen::all_static({p.m, p.n, p.k, p.a_row_stride, p.a_col_stride, p.w_row_stride, p.w_col_stride,
                            L.buffer(p.a).offset, L.buffer(p.w).offset}))
    return false;
  const int64_t terms = p.m.hint() * p.n.hint() * p.k.hint();
  if ((p.k.hint() > 1 && (p.a_col_stride.hint() != 1 || p.w_col_stride.hint() != 1)) ||
      p.m.hint() > codegen::kSmallMatmulMaxRows || terms > kSmallMatmulMaxTerms || terms == 0)
    return false;
  if (p.bias >= 0 && !codegen::all_static({L.buffer(p.bias).strides[0], L.buffer(p.bias).offset})) return false;
  std::vector<int> inputs = {p.a, p.w};
  if (p.bias >= 0) inputs.push_back(p.bias);
  L.add_kernel({p.m, p.n, p.k}, inputs, [&](Cluster& c) {
    // Looked up here: sealing the inputs' producers may add buffers (and move the buffer list).
    const Buffer &ab = L.buffer(p.a), &wb = L.buffer(p.w);
    const int a_load = c.load(ab.root, p.dtype, {p.a_row_stride, 0, 1}, ab.offset);
    const int w_load = c.load(wb.root, p.dtype, {0, p.w_row_stride, 1}, wb.offset);
    int bias_load = -1;
    if (p.bias >= 0) {
      const Buffer& bb = L.buffer(p.bias);
      bias_load = c.load(bb.root, p.dtype, {0, p.n.hint() > 1 ? bb.strides[0] : Size(0), 0}, bb.offset);
    }
    c.make_small_matmul(a_load, w_load, bias_load);
    c.store(a_load, p.d, p.dtype, {p.n, 1, 0}, 0);  // the kernel computes D; the stored expression is not used
  });
  return true;
}

}  // namespace

void linear_product(Lowerer& L, const LinearOperands& p, graph::NodeId node) {
  if (!small_linear(L, p)) add_linear_matmul(L, p, node);
}

bool lower_matmul_op(Lowerer& L, const graph::Node& n, const std::string& op) {
  if (n.type != graph::ValueType::Tensor) return false;
  if (op == "linear") return lower_linear(L, n);
  if (op == "matmul" || op == "mm" || op == "bmm") return lower_product(L, n);
  if (op == "addmm") return lower_addmm(L, n);
  return false;
}

}  // namespace fastcomp::plan::detail
