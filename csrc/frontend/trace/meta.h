// Meta tensors stand in for real tensors while tracing: torch computes output shapes, dtypes and strides on
// them without touching data. TensorMeta is read from either kind.
#pragma once
#include <Python.h>

#include "cpython/pyref.h"
#include "graph/ir.h"

namespace fastcomp::frontend {

// An op's output metadata computed without a meta call (elementwise_meta.h, nn_meta.h).
struct ComputedMeta {
  graph::TensorMeta meta;     // dtype, sizes, strides, storage_offset, requires_grad; device left null
  PyObject* alias = nullptr;  // borrowed: the argument the op returns itself (in-place ops, no-op casts)
};

// Reads dtype, sizes, strides, offset and requires_grad of a (real or meta) tensor. `device` (borrowed,
// nullable) overrides the tensor's own device, for meta tensors standing in for real ones.
graph::TensorMeta meta_of_tensor(PyObject* tensor, PyObject* device);
// A meta tensor with `meta`'s dtype, sizes, strides and requires_grad. New reference.
PyRef make_meta_tensor(const graph::TensorMeta& meta);
// The same, standing for an op's result: one that requires grad is made a non-leaf (as an op's result is), so
// later in-place ops on it trace as they run eagerly. Call with torch's grad mode on when it requires grad.
// New reference.
PyRef make_meta_result(const graph::TensorMeta& meta);

}  // namespace fastcomp::frontend
