// nn.MultiheadAttention's F.multi_head_attention_forward as the backend's own steps, instead of one call into
// torch's slow path (which also computes the averaged attention weights that callers usually discard). For
// self-attention in inference without masks, with T = seq len, B = batch, E = embed, H = heads, D = E / H:
//   qkv = x @ in_proj_weight^T + in_proj_bias    one GEMM over x's rows in their storage order (no transpose copy)
//   q, k, v -> [B*H, T, D] each, q * D^-1/2       one kernel (torch scales q before the product too)
//   s = q @ k^T; p = softmax(s); o = p @ v        batched GEMMs around a row-reduce kernel; o lands as [T, B, E]
//   out = o @ out_proj_weight^T + out_proj_bias   one GEMM into item 0 of the result, in torch's layout
// With fastcomp.config.fused_attention, heads whose keys and values fit in shared memory run the middle
// two lines as one attention kernel (emit_attention.cpp) that reads q, k, v from qkv and writes o.
// Item 1 (the weights) must be unused: it never exists. Masks, dropout, bias_k/v, separate projection weights,
// a key or value other than the query, or any other use of the result keep the extern call.
#include <cmath>

#include "plan/lowering.h"

namespace fastcomp::plan::detail {
namespace {

bool mentions(const graph::Arg& a, graph::NodeId id) {
  if (a.kind == graph::Arg::Kind::Node && a.node == id) return true;
  for (const auto& item : a.items)
    if (mentions(item, id)) return true;
  return false;
}

bool uses(const graph::Node& user, graph::NodeId id) {
  for (const auto& a : user.args)
    if (mentions(a, id)) return true;
  for (const auto& a : user.kwargs)
    if (mentions(a, id)) return true;
  return false;
}

bool used(const graph::Graph& g, graph::NodeId id) {
  if (mentions(g.output, id)) return true;
  for (const graph::Node& n : g.nodes)
    if (uses(n, id)) return true;
  return false;
}

// The getitem(tuple, 0) node when the tuple is read only by it and by unused getitem(tuple, 1) nodes; -1 when
// the tuple, or the weights item, is needed in any other way.
graph::NodeId output_item(const graph::Graph& g, graph::NodeId tuple) {
  if (mentions(g.output, tuple)) return -1;
  graph::NodeId out = -1;
  for (const graph::Node& n : g.nodes) {
    if (!uses(n, tuple)) continue;
    std::optional<int64_t> i;
    if (n.target_name == "operator.getitem" && n.args.size() == 2 && !n.kwnames &&
        n.args[0].kind == graph::Arg::Kind::Node && n.args[0].node == tuple)
      i = const_int(&n.args[1]);
    if (i && *i < 0) *i += 2;
    if (i == 0 && out < 0 && n.type == graph::ValueType::Tensor) out = n.id;
    else if (i != 1 || used(g, n.id)) return -1;
  }
  return out;
}

bool dense_row_major(const Sizes& sizes, const Sizes& strides) {
  const Sizes expected = contiguous_strides(sizes);
  for (size_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] != 1 && strides[d] != expected[d]) return false;
  return true;
}

// Buffer `b` itself when cuBLASLt can read it as a row-major matrix (rows = all but its last dimension, which
// has stride 1; a vector: stride 1), else a contiguous copy.
int row_major(Lowerer& L, int b) {
  const Buffer& buf = L.buffer(b);
  const size_t r = buf.sizes.size();
  bool ok = buf.sizes[r - 1] == 1 || buf.strides[r - 1] == 1;
  if (r == 2) ok = ok && (buf.sizes[0] == 1 || known_ge(buf.strides[0], buf.sizes[1]));
  return ok ? b : L.contiguous_copy(b);
}

// The query [T, B, E] read as T*B rows of E: in t-major order (row t*B + b) or b-major (row b*T + t), one row
// stride apart. nullopt when neither order has a single stride (the caller copies the query first).
struct Rows {
  bool t_major = true;
  Size stride = 0;
};
std::optional<Rows> rows_of(const Buffer& q) {
  const Size T = q.sizes[0], B = q.sizes[1], E = q.sizes[2];
  if (E != 1 && E != 0 && q.strides[2] != 1) return std::nullopt;
  Rows r;
  if (T == 1 && B == 1) r.stride = E;
  else if (B == 1) r.stride = q.strides[0];
  else if (T == 1 || q.strides[0] == B * q.strides[1]) r.stride = q.strides[1];
  else if (q.strides[1] == T * q.strides[0]) r = {false, q.strides[0]};
  else return std::nullopt;
  if (!known_ge(r.stride, E)) return std::nullopt;  // overlapping rows (an expanded query)
  return r;
}

int alloc(Lowerer& L, DType t, const Sizes& sizes, graph::NodeId node = -1) {
  Buffer b;
  b.kind = Buffer::Kind::Alloc;
  b.node = node;
  b.dtype = t;
  b.sizes = sizes;
  b.strides = contiguous_strides(sizes);
  return L.add_buffer(b);
}

// out[m, n] = x[m, k] @ w[n, k]^T (+ bias): F.linear on row-major x (row stride `x_row_stride`) and weight `w`.
void linear(Lowerer& L, DType t, int x, const Size& x_row_stride, int w, int bias, int out, const Size& m,
            graph::NodeId node) {
  const Buffer& wb = L.buffer(w);
  linear_product(L, {t, x, w, bias, out, m, wb.sizes[0], wb.sizes[1], x_row_stride, 1, wb.strides[0], wb.strides[1]},
                 node);
}

const graph::Arg* tensor_arg(const graph::Arg* a) {
  return a && a->kind == graph::Arg::Kind::Node ? a : nullptr;
}

bool is_false(const graph::Arg* a) { return !a || const_bool(a) == false; }

bool lower_self_attention(Lowerer& L, const graph::Node& n) {
  CallArgs args(n);
  if (!args.only_keywords({"query", "key", "value", "embed_dim_to_check", "num_heads", "in_proj_weight",
                           "in_proj_bias", "bias_k", "bias_v", "add_zero_attn", "dropout_p", "out_proj_weight",
                           "out_proj_bias", "training", "key_padding_mask", "need_weights", "attn_mask",
                           "use_separate_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight",
                           "static_k", "static_v", "average_attn_weights", "is_causal"}))
    return false;
  const graph::Arg* q = tensor_arg(args.get(0, "query"));
  const graph::Arg* k = tensor_arg(args.get(1, "key"));
  const graph::Arg* v = tensor_arg(args.get(2, "value"));
  const graph::Arg* in_w = tensor_arg(args.get(5, "in_proj_weight"));
  const graph::Arg* in_b = args.get(6, "in_proj_bias");
  const graph::Arg* out_w = tensor_arg(args.get(11, "out_proj_weight"));
  const graph::Arg* out_b = args.get(12, "out_proj_bias");
  if (!q || !k || !v || q->node != k->node || q->node != v->node || !in_w || !out_w) return false;
  if ((!is_none(in_b) && !tensor_arg(in_b)) || (!is_none(out_b) && !tensor_arg(out_b))) return false;
  static const std::pair<size_t, const char*> kMustBeNone[] = {
      {7, "bias_k"},         {8, "bias_v"},         {14, "key_padding_mask"}, {16, "attn_mask"}, {18, "q_proj_weight"},
      {19, "k_proj_weight"}, {20, "v_proj_weight"}, {21, "static_k"},         {22, "static_v"}};
  for (auto [position, name] : kMustBeNone)
    if (!is_none(args.get(position, name))) return false;
  if (!is_false(args.get(9, "add_zero_attn")) || !is_false(args.get(17, "use_separate_proj_weight")) ||
      !is_false(args.get(24, "is_causal")))
    return false;
  const std::optional<double> dropout = const_number(args.get(10, "dropout_p"));
  const graph::Arg* training = args.get(13, "training");  // defaults to True
  if (!dropout || (*dropout != 0 && !(training && const_bool(training) == false))) return false;
  if (const graph::Arg* w = args.get(15, "need_weights"); w && !const_bool(w)) return false;

  const graph::NodeId item0 = output_item(L.graph(), n.id);
  if (item0 < 0 || !L.value(q->node).tensor) return false;
  // T and B may be symbolic (dynamic shapes); E, and so the heads' width, must be constants.
  const Sizes qs = meta_sizes(L.node(q->node).meta);
  if (qs.size() != 3 || !qs[2].is_static()) return false;  // an unbatched query
  const Size T = qs[0], B = qs[1];
  const int64_t E = qs[2].hint();
  const std::optional<int64_t> H = const_int(args.get(4, "num_heads"));
  if (!H || *H <= 0 || E % *H != 0 || const_int(args.get(3, "embed_dim_to_check")) != E || T * B * E == 0)
    return false;
  const int64_t D = E / *H;
  const DType t = L.node_dtype(q->node);
  if (t != DType::F32 && t != DType::F16 && t != DType::BF16) return false;
  auto shaped = [&](const graph::Arg* a, std::vector<int64_t> sizes) {
    return is_none(a) || (L.value(a->node).tensor && L.node_dtype(a->node) == t && L.node(a->node).meta.sizes == sizes);
  };
  if (!shaped(in_w, {3 * E, E}) || !shaped(in_b, {3 * E}) || !shaped(out_w, {E, E}) || !shaped(out_b, {E}))
    return false;
  const graph::TensorMeta& out_meta = L.node(item0).meta;
  if (L.node_dtype(item0) != t || meta_sizes(out_meta) != qs ||
      !dense_row_major(meta_sizes(out_meta), meta_strides(out_meta)))
    return false;

  // From here on the node is lowered: no more fallbacks.
  int x = L.buffer_for(q->node);
  std::optional<Rows> rows = rows_of(L.buffer(x));
  if (!rows) {
    x = L.contiguous_copy(x);
    rows = Rows{true, E};
  }
  const int w_in = row_major(L, L.buffer_for(in_w->node));
  const int b_in = is_none(in_b) ? -1 : row_major(L, L.buffer_for(in_b->node));
  const int w_out = row_major(L, L.buffer_for(out_w->node));
  const int b_out = is_none(out_b) ? -1 : row_major(L, L.buffer_for(out_b->node));

  const int qkv = alloc(L, t, {T * B, 3 * E});
  linear(L, t, x, rows->stride, w_in, b_in, qkv, T * B, n.id);

  // Head (b, h)'s row t of q, k or v: qkv's row t*B + b (t-major) or b*T + t, columns h*D.. of its part.
  const int64_t row = 3 * E;
  const Sizes qkv_strides = {rows->t_major ? Size(row) : T * row, D, rows->t_major ? B * row : Size(row), 1};
  const Sizes head_space = {B, *H, T, D};
  const double scale = std::sqrt(1.0 / D);
  if (L.options().fused_attention && T.is_static() &&
      codegen::attention_shared_bytes(T.hint(), D) <= L.options().attention_shared_limit) {
    // One kernel for the heads (emit_attention.cpp), o written straight into [T, B, E]: element (b, h, t, d) at
    // t*B*E + b*E + h*D + d.
    const int o = alloc(L, t, {T, B, E});
    L.add_kernel(head_space, {qkv}, [&](Cluster& c) {
      const int q_load = c.load(qkv, t, qkv_strides, 0), k_load = c.load(qkv, t, qkv_strides, E),
                v_load = c.load(qkv, t, qkv_strides, 2 * E);
      c.make_attention(q_load, k_load, v_load, scale, /*causal=*/false, codegen::Kernel::AttentionRounding::EveryStep);
      c.store(v_load, o, t, {E, D, B * E, 1}, 0);
    });
    const int out = alloc(L, t, qs, item0);
    linear(L, t, o, E, w_out, b_out, out, T * B, n.id);
    L.value(n.id).items = {out, -1};
    return true;
  }

  // Heads apart: q, k, v as [B*H, T, D] (index b*H + h, as torch's view of [T, B*H, D] transposed numbers them).
  const int q_h = alloc(L, t, {B * *H, T, D}), k_h = alloc(L, t, {B * *H, T, D}), v_h = alloc(L, t, {B * *H, T, D});
  const DType acc = opmath(t);
  L.add_kernel(head_space, {qkv}, [&](Cluster& c) {
    const Sizes out_strides = contiguous_strides(head_space);
    const int scaled = c.op(ExprOp::Mul, acc,
                            {c.cast(c.load(qkv, t, qkv_strides, 0), acc), c.constant(acc, scale)});
    c.store(c.cast(scaled, t), q_h, t, out_strides, 0);
    c.store(c.load(qkv, t, qkv_strides, E), k_h, t, out_strides, 0);
    c.store(c.load(qkv, t, qkv_strides, 2 * E), v_h, t, out_strides, 0);
  });

  MatmulStep scores;  // s[i] = q[i] @ k[i]^T: [T, T] per (b, h)
  scores.dtype = t;
  scores.m = T;
  scores.n = T;
  scores.k = D;
  scores.batch = B * *H;
  scores.a = q_h;
  scores.a_row_stride = D;
  scores.a_col_stride = 1;
  scores.a_batch_stride = T * D;
  scores.b = k_h;  // B[d][t'] = k[t'][d]
  scores.b_row_stride = 1;
  scores.b_col_stride = D;
  scores.b_batch_stride = T * D;
  scores.d = alloc(L, t, {B * *H, T, T});
  scores.d_row_stride = T;
  scores.d_batch_stride = T * T;
  scores.node = n.id;
  L.add_matmul(scores);

  const int p = alloc(L, t, {B * *H, T, T});
  L.add_kernel({B * *H, T, T}, {scores.d}, [&](Cluster& c) {
    c.make_row_reduce();
    const Sizes strides = contiguous_strides({B * *H, T, T});
    c.store(c.cast(softmax_expr(c, c.load(scores.d, t, strides, 0), acc, false), t), p, t, strides, 0);
  });

  // o[i] = p[i] @ v[i], written straight into [T, B, E]: row t of (b, h) at t*B*E + (b*H + h)*D.
  MatmulStep values;
  values.dtype = t;
  values.m = T;
  values.n = D;
  values.k = T;
  values.batch = B * *H;
  values.a = p;
  values.a_row_stride = T;
  values.a_col_stride = 1;
  values.a_batch_stride = T * T;
  values.b = v_h;
  values.b_row_stride = D;
  values.b_col_stride = 1;
  values.b_batch_stride = T * D;
  values.d = alloc(L, t, {T, B, E});
  values.d_row_stride = B * E;
  values.d_batch_stride = D;
  values.node = n.id;
  L.add_matmul(values);

  const int out = alloc(L, t, qs, item0);
  linear(L, t, values.d, E, w_out, b_out, out, T * B, n.id);
  L.value(n.id).items = {out, -1};
  return true;
}

// F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
// enable_gqa=False) with fastcomp.config.fused_attention: heads [B, H, T, D] of queries against [B, Hk, S, D] keys
// and values (H, T, S and D static, the batch may be a symbol; Hk = H, or with enable_gqa a divisor of it) whose
// keys and values fit in shared memory, without dropout, with no mask, a causal one, or (see LowerOptions::
// masked_attention and sdp_kernel) a mask tensor of bool or the queries' dtype that broadcasts to
// [B, H, T, S] (not both: torch's kernels disagree on that pair), run as one
// attention kernel reading q, k, v and the mask in place and writing the output in the layout the trace gave it
// (the probe of torch's kernel: [B, T, H, D] in memory for flash and memory-efficient). Rounded as the fused SDPA
// kernels round (scores and softmax in f32, the probabilities in the dtype for the product with v), or, where torch
// runs a masked f16 or bf16 head on its math path (LowerOptions::sdp_kernel), as that path (everything in f32, the
// output rounded). Anything else stays the extern call (torch's flash, memory-efficient, cuDNN or math path).
// F.scaled_dot_product_attention's arguments where lowering can read them: q, k and v tensors, the mask a tensor or
// absent, no dropout, and is_causal, scale and enable_gqa constants.
struct SdpaArgs {
  const graph::Arg *q = nullptr, *k = nullptr, *v = nullptr, *mask = nullptr;  // mask: null for none
  size_t mask_slot = 0;  // the mask's argument slot (ExternStep::passed)
  bool causal = false, gqa = false;
  std::optional<double> scale;  // nullopt: torch's default

  // The scale of heads of size `d`: the given one, or 1 / sqrt(d).
  double scale_for(int64_t d) const { return scale.value_or(1.0 / std::sqrt(double(d))); }
};

std::optional<SdpaArgs> sdpa_args(const graph::Node& n) {
  CallArgs args(n);
  if (!args.only_keywords({"query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"}))
    return std::nullopt;
  SdpaArgs a;
  a.q = tensor_arg(args.get(0, "query"));
  a.k = tensor_arg(args.get(1, "key"));
  a.v = tensor_arg(args.get(2, "value"));
  const graph::Arg* mask_arg = args.get(3, "attn_mask");
  a.mask = is_none(mask_arg) ? nullptr : tensor_arg(mask_arg);
  if (!a.q || !a.k || !a.v || (!is_none(mask_arg) && !a.mask)) return std::nullopt;
  if (a.mask) a.mask_slot = args.slot_of(a.mask);
  if (const graph::Arg* p = args.get(4, "dropout_p"); p && const_number(p) != 0.0) return std::nullopt;
  if (const graph::Arg* c = args.get(5, "is_causal")) {
    const std::optional<bool> b = const_bool(c);
    if (!b) return std::nullopt;
    a.causal = *b;
  }
  if (const graph::Arg* g = args.get(7, "enable_gqa")) {
    const std::optional<bool> b = const_bool(g);
    if (!b) return std::nullopt;
    a.gqa = *b;
  }
  if (const graph::Arg* sc = args.get(6, "scale"); !is_none(sc)) {
    a.scale = const_number(sc);
    if (!a.scale) return std::nullopt;
  }
  return a;
}

bool lower_scaled_dot_product_attention(Lowerer& L, const graph::Node& n) {
  if (!L.options().fused_attention || n.type != graph::ValueType::Tensor) return false;
  const std::optional<SdpaArgs> call = sdpa_args(n);
  if (!call) return false;
  const graph::Arg *q = call->q, *k = call->k, *v = call->v, *mask = call->mask;
  const bool causal = call->causal, gqa = call->gqa;
  if (causal && mask) return false;
  const DType t = L.node_dtype(n.id);
  if (t != DType::F32 && t != DType::F16 && t != DType::BF16) return false;
  // A row the mask leaves no key: LowerOptions::masked_attention; in f16 and bf16 see sdp_kernel below.
  if (mask && t == DType::F32 && !L.options().masked_attention) return false;
  const Sizes shape = meta_sizes(n.meta);
  // The batch may be a symbol; H, T, S and D size the kernel's shared arrays and loops.
  if (shape.size() != 4 || !codegen::all_static({shape[1], shape[2], shape[3]})) return false;
  for (const graph::Arg* a : {q, k, v})
    if (!L.value(a->node).tensor || L.node_dtype(a->node) != t || meta_sizes(L.node(a->node).meta).size() != 4)
      return false;
  const Sizes qs = meta_sizes(L.node(q->node).meta), ks = meta_sizes(L.node(k->node).meta),
              vs = meta_sizes(L.node(v->node).meta);
  if (qs != shape || ks != vs || !codegen::all_static({ks[1], ks[2], ks[3]}) || ks[0] != shape[0] ||
      ks[3].hint() != shape[3].hint())
    return false;
  const int64_t H = shape[1].hint(), T = shape[2].hint(), D = shape[3].hint(), Hk = ks[1].hint(), S = ks[2].hint();
  if (Hk < 1 || (Hk != H && !(gqa && H % Hk == 0))) return false;
  if (T * D * S == 0 || shape[0].hint() * H == 0 ||
      codegen::attention_shared_bytes(S, D) > L.options().attention_shared_limit)
    return false;
  const double scale = call->scale_for(D);
  const Sizes out_strides = meta_strides(n.meta);
  if (!is_dense(shape, out_strides)) return false;
  // The mask broadcasts to the scores [B, H, T, S] by torch's rules (trailing dimensions line up, size-1 and
  // missing leading ones broadcast).
  const Sizes scores = {shape[0], Size(H), Size(T), Size(S)};
  if (mask) {
    const DType mask_dtype = L.node_dtype(mask->node);
    if (!L.value(mask->node).tensor || (mask_dtype != DType::Bool && mask_dtype != t)) return false;
    const Sizes msizes = meta_sizes(L.node(mask->node).meta);
    if (msizes.size() > 4) return false;
    for (size_t d = 0; d < msizes.size(); ++d)
      if (msizes[d] != 1 && msizes[d] != scores[4 - msizes.size() + d]) return false;
  }
  // A masked half head rounds as the kernel torch runs it on rounds; cuDNN's (or an unknown one) stays torch's.
  auto rounding = codegen::Kernel::AttentionRounding::Probabilities;
  if (mask && t != DType::F32) {
    const SdpKernel torch_kernel =
        L.options().sdp_kernel ? L.options().sdp_kernel({&L.node(q->node).meta, &L.node(k->node).meta,
                                                         &L.node(v->node).meta, &L.node(mask->node).meta, causal,
                                                         scale, gqa})
                               : SdpKernel::Unknown;
    if (torch_kernel == SdpKernel::Math) rounding = codegen::Kernel::AttentionRounding::Output;
    else if (torch_kernel != SdpKernel::MemoryEfficient) return false;
  }

  // From here on the node is lowered.
  const int qb = L.buffer_for(q->node), kb = L.buffer_for(k->node), vb = L.buffer_for(v->node);
  const int mask_buffer = mask ? L.buffer_for(mask->node) : -1;
  Buffer o;
  o.kind = Buffer::Kind::Alloc;
  o.node = n.id;
  o.dtype = t;
  o.sizes = shape;
  o.strides = out_strides;
  const int ob = L.add_buffer(o);
  L.value(n.id).tensor = true;
  L.value(n.id).buffer = ob;
  std::vector<int> inputs = {qb, kb, vb};
  if (mask) inputs.push_back(mask_buffer);
  L.add_kernel(shape, inputs, [&](Cluster& c) {
    int loads[4] = {-1, -1, -1, -1};
    for (int i = 0; i < 3; ++i) {
      const Buffer& b = L.buffer(inputs[i]);
      loads[i] = c.load(b.root, t, b.strides, b.offset);
    }
    if (mask) loads[3] = L.load_buffer(c, mask_buffer, scores, /*row=*/false);
    c.make_attention(loads[0], loads[1], loads[2], scale, causal, rounding, S, Hk, loads[3]);
    c.store(loads[2], ob, t, out_strides, 0);
  });
  return true;
}

}  // namespace

// F.scaled_dot_product_attention with a boolean mask on an f16 or bf16 head that torch runs on cuDNN (and so
// lower_scaled_dot_product_attention leaves to it): torch converts the mask to an additive bias inside every call,
// in three launches (a scalar tensor's fill, the fill value's, a `where`: 20 us a call for GPT-2's four layers at
// batch 8 on an H100, against 5 for torch.compile's one kernel). The plan makes that bias itself, the very tensor
// torch would (SdpMaskBias: its values and layout, learnt from torch), in one kernel that every head on the mask
// shares (combine_kernels' dedup of identical kernels), and passes it for the mask; torch's call takes a bias of the
// query's dtype as it is.
void Lowerer::pass_attention_bias(const graph::Node& n, ExternStep* step) {
  if (!options_.sdp_kernel || !options_.sdp_mask_bias || n.type != graph::ValueType::Tensor ||
      called_op_name(n) != "scaled_dot_product_attention")
    return;
  const std::optional<SdpaArgs> call = sdpa_args(n);
  if (!call || !call->mask || step->passed_buffer(call->mask_slot) >= 0) return;
  const graph::NodeId mask = call->mask->node;
  const DType t = node_dtype(n.id);
  if ((t != DType::F16 && t != DType::BF16) || !value(mask).tensor || node_dtype(mask) != DType::Bool ||
      node_dtype(call->q->node) != t || graph_.nodes[mask].meta.is_dynamic() || graph_.nodes[call->q->node].meta.is_dynamic() ||
      graph_.nodes[call->k->node].meta.is_dynamic() || graph_.nodes[call->v->node].meta.is_dynamic())
    return;
  const graph::TensorMeta& qm = graph_.nodes[call->q->node].meta;
  if (qm.sizes.empty()) return;
  const double scale = call->scale_for(qm.sizes.back());
  const SdpQuery query{&qm, &graph_.nodes[call->k->node].meta, &graph_.nodes[call->v->node].meta,
                       &graph_.nodes[mask].meta, call->causal, scale, call->gqa};
  if (options_.sdp_kernel(query) != SdpKernel::Cudnn) return;
  const std::optional<SdpMaskBias> bias = options_.sdp_mask_bias(query);
  if (!bias) return;
  const int mask_buffer = buffer_for(mask);
  const Buffer m = buffer(mask_buffer);
  Buffer b;
  b.kind = Buffer::Kind::Alloc;
  b.dtype = t;
  b.sizes = m.sizes;
  b.strides = codegen::to_sizes(bias->strides);
  if (!is_dense(b.sizes, b.strides)) return;
  const int out = add_buffer(b);
  add_kernel(m.sizes, {mask_buffer}, [&](Cluster& c) {
    // The values rounded to the dtype as torch rounds a Python float scalar (to float, then to nearest even).
    auto value = [&](double x) { return c.cast(c.constant(DType::F32, x), t); };
    const int where = c.op(ExprOp::Where, t, {c.load(m.root, DType::Bool, m.strides, m.offset),
                                              value(bias->where_true), value(bias->where_false)});
    c.store(where, out, t, b.strides, 0);
  });
  step->passed.push_back({call->mask_slot, out});
}

bool lower_attention_op(Lowerer& L, const graph::Node& n, const std::string& op) {
  if (op == "multi_head_attention_forward") return lower_self_attention(L, n);
  if (op == "scaled_dot_product_attention") return lower_scaled_dot_product_attention(L, n);
  return false;
}

}  // namespace fastcomp::plan::detail
