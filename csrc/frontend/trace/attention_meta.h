// Output metadata of the attention functions, computed in C++. torch.nn.functional.multi_head_attention_forward
// (what nn.MultiheadAttention calls) is recorded as one node; its meta call would run the function's Python body on
// meta tensors, whose linear projections go through a Python decomposition that imports torch._dynamo.
// F.scaled_dot_product_attention's meta call runs the math path's decomposition: about 4 ms a call, and the first
// imports torch._dynamo (two seconds).
#pragma once
#include <Python.h>

#include <optional>
#include <vector>

#include "frontend/trace/meta.h"

namespace fastcomp::frontend {

struct AttentionMeta {
  ComputedMeta output;                  // attn_output: (L, N, E), or (L, E) unbatched
  std::optional<ComputedMeta> weights;  // with need_weights: (N, L, S) averaged over heads, else (N, H, L, S)
};

/** The outputs of `target(*args, **kwargs)` when target is multi_head_attention_forward on plain tensors of one
 * floating dtype with packed projection weights and no masks, extra key/value biases or zero attention; nullopt
 * otherwise and wherever torch would raise. `args` is a tuple, `kwargs` a dict or null (borrowed). */
std::optional<AttentionMeta> attention_meta(PyObject* target, PyObject* args, PyObject* kwargs, bool grad_enabled);

/** The output of F.scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
 * scale=None, enable_gqa=False) when `target` is that function, on query, key and value of one floating dtype and 3
 * or 4 dimensions with equal batch and head counts (or, with enable_gqa, query heads a multiple of the key's), a mask
 * of bool or the query's dtype that broadcasts to the scores, and Python scalars; nullopt otherwise and wherever
 * torch would raise. Contiguous, as torch's meta function (the math path's) lays it out: the layout the kernel of
 * the tensors' device gives is kernel_layout.h's to find. */
std::optional<ComputedMeta> scaled_dot_product_attention_meta(PyObject* target, PyObject* args, PyObject* kwargs,
                                                              bool grad_enabled);

/** Whether `target` is F.scaled_dot_product_attention. */
bool is_scaled_dot_product_attention(PyObject* target);

/** F.scaled_dot_product_attention's parameters, in order, and their names. */
namespace sdpa_param {
enum : int { kQuery, kKey, kValue, kMask, kDropout, kCausal, kScale, kGqa, kCount };
inline constexpr const char* kNames[kCount] = {"query",     "key",       "value", "attn_mask",
                                               "dropout_p", "is_causal", "scale", "enable_gqa"};
}  // namespace sdpa_param

/** F.scaled_dot_product_attention's arguments indexed by sdpa_param, null where not given; false when they do not
 * bind. Borrowed. */
bool bind_attention_args(PyObject* args, PyObject* kwargs, std::vector<PyObject*>* out);

}  // namespace fastcomp::frontend
