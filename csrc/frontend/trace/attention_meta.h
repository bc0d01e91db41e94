// Output metadata of torch.nn.functional.multi_head_attention_forward (what nn.MultiheadAttention calls), computed
// in C++. The tracer records that call as one node; its meta call would run the function's Python body on meta
// tensors, whose linear projections go through a Python decomposition that imports torch._dynamo.
#pragma once
#include <Python.h>

#include <optional>

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

}  // namespace fastcomp::frontend
