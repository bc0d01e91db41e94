#include "frontend/trace/attention_meta.h"

#include <vector>

#include "cpython/gil_once.h"
#include "frontend/trace/meta_args.h"

namespace fastcomp::frontend {
namespace {

using namespace meta_args;  // NOLINT: the fast paths share its vocabulary

// `module.name` as a new reference, or null (error cleared) where this torch lacks it.
PyObject* module_function(const char* module, const char* name) {
  PyRef m = PyRef::steal(PyImport_ImportModule(module));
  if (!m) PyErr_Clear();
  return lookup(m.get(), name);
}

PyObject* mha_function() {  // owned for the process
  static cpython::GilOnce<PyObject> fn;
  return fn.get([] { return module_function("torch.nn.functional", "multi_head_attention_forward"); });
}

PyObject* sdpa_function() {  // owned for the process
  static cpython::GilOnce<PyObject> fn;
  return fn.get([] { return module_function("torch._C._nn", "scaled_dot_product_attention"); });
}

bool none(PyObject* o) { return !o || o == Py_None; }
bool is(PyObject* o, PyObject* value) { return o == value; }

// An optional tensor argument: absent, or a tensor of dtype `dt` and exactly `sizes`.
bool optional_tensor(PyObject* o, int8_t dt, std::vector<int64_t> sizes, Arg* out) {
  return none(o) || (read_tensor(o, out, /*any_layout=*/true) && out->dt == dt && out->sizes == sizes);
}

}  // namespace

std::optional<AttentionMeta> attention_meta(PyObject* target, PyObject* args, PyObject* kwargs, bool grad_enabled) {
  if (target != mha_function() || !target || !PyTuple_Check(args)) return std::nullopt;
  std::vector<PyObject*> a;
  if (!bind_args(args, kwargs,
                 {"query", "key", "value", "embed_dim_to_check", "num_heads", "in_proj_weight", "in_proj_bias",
                  "bias_k", "bias_v", "add_zero_attn", "dropout_p", "out_proj_weight", "out_proj_bias", "training",
                  "key_padding_mask", "need_weights", "attn_mask", "use_separate_proj_weight", "q_proj_weight",
                  "k_proj_weight", "v_proj_weight", "static_k", "static_v", "average_attn_weights", "is_causal"},
                 13, &a))
    return std::nullopt;
  enum { kQuery, kKey, kValue, kEmbed, kHeads, kInW, kInB, kBiasK, kBiasV, kZeroAttn, kDropout, kOutW, kOutB,
         kTraining, kPadMask, kNeedWeights, kAttnMask, kSeparate, kQW, kKW, kVW, kStaticK, kStaticV, kAverage,
         kCausal };
  // The plain path only: no masks, no extra key/value biases or zero attention, packed projections.
  for (int i : {kBiasK, kBiasV, kPadMask, kAttnMask, kQW, kKW, kVW, kStaticK, kStaticV})
    if (!none(a[i])) return std::nullopt;
  if (!is(a[kZeroAttn], Py_False) || (a[kSeparate] && !is(a[kSeparate], Py_False)) ||
      (a[kCausal] && !is(a[kCausal], Py_False)))
    return std::nullopt;
  bool need_weights = !a[kNeedWeights] || is(a[kNeedWeights], Py_True);
  bool average = !a[kAverage] || is(a[kAverage], Py_True);
  if ((a[kNeedWeights] && !PyBool_Check(a[kNeedWeights])) || (a[kAverage] && !PyBool_Check(a[kAverage])) ||
      (a[kTraining] && !PyBool_Check(a[kTraining])) || !PyFloat_CheckExact(a[kDropout]) ||
      !PyLong_CheckExact(a[kEmbed]) || !PyLong_CheckExact(a[kHeads]))
    return std::nullopt;

  Arg q, k, v, in_w, in_b, out_w, out_b;
  if (!read_tensor(a[kQuery], &q, true) || !read_tensor(a[kKey], &k, true) || !read_tensor(a[kValue], &v, true))
    return std::nullopt;
  size_t ndim = q.sizes.size();
  if ((ndim != 3 && ndim != 2) || k.sizes.size() != ndim || k.sizes != v.sizes || !is_float(q.dt) ||
      k.dt != q.dt || v.dt != q.dt)
    return std::nullopt;
  bool batched = ndim == 3;
  int64_t L = q.sizes[0], S = k.sizes[0], N = batched ? q.sizes[1] : 1, E = q.sizes.back();
  int64_t H = PyLong_AsLongLong(a[kHeads]);
  if (PyLong_AsLongLong(a[kEmbed]) != E || k.sizes.back() != E || (batched && k.sizes[1] != N) || H <= 0 ||
      E % H != 0) {
    PyErr_Clear();
    return std::nullopt;
  }
  if (!read_tensor(a[kInW], &in_w, true) || in_w.dt != q.dt || in_w.sizes != std::vector<int64_t>{3 * E, E} ||
      !optional_tensor(a[kInB], q.dt, {3 * E}, &in_b) || !read_tensor(a[kOutW], &out_w, true) ||
      out_w.dt != q.dt || out_w.sizes != std::vector<int64_t>{E, E} || !optional_tensor(a[kOutB], q.dt, {E}, &out_b))
    return std::nullopt;

  bool scores_grad = grad_enabled && (q.requires_grad || k.requires_grad || in_w.requires_grad || in_b.requires_grad);
  bool out_grad = scores_grad || (grad_enabled && (v.requires_grad || out_w.requires_grad || out_b.requires_grad));
  AttentionMeta out;
  out.output = fresh_result(q.dt, batched ? std::vector<int64_t>{L, N, E} : std::vector<int64_t>{L, E}, out_grad);
  if (need_weights) {
    std::vector<int64_t> sizes = average ? std::vector<int64_t>{N, L, S} : std::vector<int64_t>{N, H, L, S};
    if (!batched) sizes.erase(sizes.begin());
    out.weights = fresh_result(q.dt, std::move(sizes), scores_grad);
  }
  return out;
}

namespace {

// Whether a mask of `mask` sizes broadcasts to `scores` sizes (trailing dimensions equal or 1, no more of them).
bool broadcasts_to(const std::vector<int64_t>& mask, const std::vector<int64_t>& scores) {
  if (mask.size() > scores.size()) return false;
  for (size_t i = 1; i <= mask.size(); ++i) {
    const int64_t m = mask[mask.size() - i], s = scores[scores.size() - i];
    if (m != 1 && m != s) return false;
  }
  return true;
}

}  // namespace

bool is_scaled_dot_product_attention(PyObject* target) { return target && target == sdpa_function(); }

bool bind_attention_args(PyObject* args, PyObject* kwargs, std::vector<PyObject*>* out) {
  const char* const* n = sdpa_param::kNames;
  return PyTuple_Check(args) && bind_args(args, kwargs, {n[0], n[1], n[2], n[3], n[4], n[5], n[6], n[7]}, 3, out);
}

std::optional<ComputedMeta> scaled_dot_product_attention_meta(PyObject* target, PyObject* args, PyObject* kwargs,
                                                              bool grad_enabled) {
  using namespace sdpa_param;  // NOLINT: the parameters' indices
  std::vector<PyObject*> a;
  if (!is_scaled_dot_product_attention(target) || !bind_attention_args(args, kwargs, &a)) return std::nullopt;
  Arg q, k, v, mask;
  if (!read_tensor(a[kQuery], &q, true) || !read_tensor(a[kKey], &k, true) || !read_tensor(a[kValue], &v, true))
    return std::nullopt;
  const size_t ndim = q.sizes.size();
  if ((ndim != 3 && ndim != 4) || k.sizes.size() != ndim || v.sizes.size() != ndim || !is_float(q.dt) ||
      k.dt != q.dt || v.dt != q.dt)
    return std::nullopt;
  // Scalars as torch's argument parser takes them without a conversion of its own: exact floats and bools.
  if (a[kDropout] && !PyFloat_CheckExact(a[kDropout])) return std::nullopt;
  if (a[kDropout] && PyFloat_AS_DOUBLE(a[kDropout]) != 0.0) {
    const double p = PyFloat_AS_DOUBLE(a[kDropout]);
    if (!(p > 0.0 && p < 1.0)) return std::nullopt;
  }
  const bool gqa = a[kGqa] && a[kGqa] == Py_True;
  if ((a[kCausal] && !PyBool_Check(a[kCausal])) || (a[kGqa] && !PyBool_Check(a[kGqa])) ||
      (!none(a[kScale]) && !PyFloat_CheckExact(a[kScale])))
    return std::nullopt;
  // [..., heads, L, E] queries against [..., heads, S, E] keys and [..., heads, S, Ev] values.
  const int64_t S = k.sizes[ndim - 2];
  if (k.sizes[ndim - 1] != q.sizes[ndim - 1] || v.sizes[ndim - 2] != S || k.sizes[0] != q.sizes[0] ||
      v.sizes[0] != q.sizes[0])
    return std::nullopt;
  if (ndim == 4) {
    const int64_t hq = q.sizes[1], hk = k.sizes[1];
    if (v.sizes[1] != hk || (hq != hk && !(gqa && hq % hk == 0))) return std::nullopt;
  }
  std::vector<int64_t> scores(q.sizes.begin(), q.sizes.end() - 1);
  scores.push_back(S);
  if (!none(a[kMask])) {
    // A mask together with is_causal: the math path raises (and so does the meta call, which runs it), the CPU
    // flash kernel applies both. The graph calls torch's function, which does as it does eagerly.
    if (!read_tensor(a[kMask], &mask, true) || (mask.dt != kBool && mask.dt != q.dt) ||
        !broadcasts_to(mask.sizes, scores))
      return std::nullopt;
  }
  std::vector<int64_t> sizes(q.sizes.begin(), q.sizes.end() - 1);
  sizes.push_back(v.sizes[ndim - 1]);
  const bool grad = grad_enabled && (q.requires_grad || k.requires_grad || v.requires_grad || mask.requires_grad);
  return fresh_result(q.dt, std::move(sizes), grad);
}

}  // namespace fastcomp::frontend
