// Output metadata of common elementwise ops computed in C++, exactly as torch computes it: broadcasting, type
// promotion (c10's ResultTypeState), op-specific dtype rules and requires_grad. The meta call it replaces
// runs torch's Python reference implementations, whose first use imports torch._dynamo (seconds) and which
// cost tens of microseconds per op; this path costs a few. Cases it is not sure about are left to the meta
// call: it answers for plain tensors (laid out so that torch's output is contiguous, see contiguous_output in
// the .cpp) and Python bool/int/float scalars.
#pragma once
#include <Python.h>

#include <optional>

#include "frontend/trace/meta.h"

namespace fastcomp::frontend {

/** The output of `target(*args, **kwargs)` when target is a covered elementwise op and every argument is a
 * (meta or real) tensor or a Python scalar it handles; nullopt otherwise, and whenever torch would raise.
 * `args` is a tuple and `kwargs` a dict or null (both borrowed); `grad_enabled` is the trace's grad mode.
 * Never leaves a Python error set. */
std::optional<ComputedMeta> elementwise_meta(PyObject* target, PyObject* args, PyObject* kwargs, bool grad_enabled);

/** False, with torch's error set, when `target(*args, **kwargs)` is a covered elementwise op whose operand dtypes
 * torch refuses (bool subtraction, relu of bools, ...). torch's meta functions skip some of these checks, so for the
 * operand dtypes the C++ rules do not accept, a CPU kernel runs on one-element stand-ins of the same dtypes and
 * ranks. True otherwise (also when it cannot tell: the meta call decides then). */
bool elementwise_dtypes_accepted(PyObject* target, PyObject* args, PyObject* kwargs);

}  // namespace fastcomp::frontend
