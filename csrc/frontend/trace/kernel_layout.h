// Strides of an op's result as torch's CPU and CUDA kernels lay it out, where its meta function may not: a
// pointwise op follows the layout TensorIterator picks, and some meta functions pick another: the reference
// implementations behind xlogy, copysign or floor_divide on tensors of two layouts, add on a transposed
// tensor with a size-1 dimension. The trace
// must see the strides the graph will produce at run time: they decide stride(), is_contiguous() and whether
// a later view() is possible.
#pragma once
#include <Python.h>

#include <string>

#include "cpython/pyref.h"

namespace fastcomp::frontend {

/** `target(*args, **kwargs)` run for real while tracing (on CPU tensors, or on no tensors at all), with torch's
    CPU random number generator given back as it was: a random op run at trace time must not change what the
    program draws at run time. Null with the Python error set when the call raised. */
PyRef call_keeping_rng(PyObject* target, PyObject* args, PyObject* kwargs);

/** `meta_out`, the meta result of `target(*meta_args, **meta_kwargs)` (borrowed; `name` as in the graph,
    "torch.xlogy"), re-strided to the layout the kernel gives, when a tensor argument is not laid out row-major
    and a run of the kernel on CPU tensors of the same layouts (the same sizes when small, else sizes above 1 cut
    to 2) lays a dense result out otherwise; null when the meta result stands (and always for an op that picks
    its kernel by size: SDPA). Leaves no Python error set and the random number generator as it was. */
PyRef kernel_layout(const std::string& name, PyObject* target, PyObject* meta_args, PyObject* meta_kwargs,
                    PyObject* meta_out);

}  // namespace fastcomp::frontend
