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
    to 2) lays a dense result out otherwise; null when the meta result stands. F.scaled_dot_product_attention, whose
    kernel (flash or math) torch picks by the arguments, takes the layout of the kernel torch._fused_sdp_choice picks
    for them. Leaves no Python error set and the random number generator as it was. */
PyRef kernel_layout(const std::string& name, PyObject* target, PyObject* meta_args, PyObject* meta_kwargs,
                    PyObject* meta_out);

/** The same for a CUDA op whose kernel library picks the result's layout by a rule of its own that the meta
    function does not follow: cuDNN's convolutions give a channels-last result when the input or the weight is
    channels-last, where the meta function says contiguous; the flash and memory-efficient attention kernels lay
    their result out as [B, L, H, E] in memory, where the meta function (the math path) says contiguous. Without it the graph would plan (and user code see) a
    layout the op does not produce, and every call would copy its result into the planned one. The op runs on
    uninitialised tensors of the arguments' exact sizes and strides on `device` (which library kernel runs, and so
    the layout, can depend on the sizes: a depthwise convolution). Null when the meta result stands: not such an
    op, stand-ins over kCudaProbeBytes in all, an attention with dropout (a probe would draw from the CUDA
    generator), or the call failed. Leaves no Python error set. */
PyRef cuda_kernel_layout(const std::string& name, PyObject* target, PyObject* meta_args, PyObject* meta_kwargs,
                         PyObject* meta_out, PyObject* device);

/** The most memory cuda_kernel_layout's stand-ins may take; larger calls keep the meta layout (the runtime then
    copies a result laid out otherwise into the planned layout, see CudaExecutable::run_extern). */
constexpr int64_t kCudaProbeBytes = int64_t(1) << 30;

}  // namespace fastcomp::frontend
