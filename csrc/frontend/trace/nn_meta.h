// Output metadata of the non-elementwise ops that common models trace through, computed in C++: linear, matmul,
// layer_norm, sum / mean over dimensions, cat, softmax, log_softmax, masked_fill, triu and tril. Their meta
// implementations are Python decompositions that import torch._dynamo or sympy on first use (matmul's import
// torch's Python meta registrations, a second's work; softmax's sympy, masked_fill's torch._dynamo) and cost
// tens of microseconds to milliseconds per call. As in
// elementwise_meta.h, only plain row-major tensors of known dtypes are answered; everything else is nullopt.
#pragma once
#include <Python.h>

#include <optional>

#include "frontend/trace/meta.h"

namespace fastcomp::frontend {

/** The output of `target(*args, **kwargs)` for a covered op, or nullopt (also wherever torch would raise).
 * `args` is a tuple and `kwargs` a dict or null (both borrowed). Never leaves a Python error set. */
std::optional<ComputedMeta> nn_meta(PyObject* target, PyObject* args, PyObject* kwargs, bool grad_enabled);

}  // namespace fastcomp::frontend
