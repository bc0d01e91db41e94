// The Python objects of a node's arguments at run time, built from the values computed so far (an array with one
// per graph node, null where none exists). Shared by the executables that call torch for graph nodes.
#pragma once
#include <Python.h>

#include <vector>

#include "cpython/pyref.h"
#include "graph/ir.h"

namespace fastcomp::runtime {

// A new reference to the object `a` describes (tuples, lists and dicts built afresh). Null with a Python
// error set when a node it names has no value.
PyObject* new_arg(const graph::Arg& a, PyObject* const* values);

// The same, borrowed for flat arguments (a node's value, a constant); composite ones are built into `temps`,
// which keeps them alive.
PyObject* borrow_arg(const graph::Arg& a, PyObject* const* values, std::vector<PyRef>& temps);

inline PyObject* new_arg(const graph::Arg& a, const std::vector<PyObject*>& values) { return new_arg(a, values.data()); }
inline PyObject* borrow_arg(const graph::Arg& a, const std::vector<PyObject*>& values, std::vector<PyRef>& temps) {
  return borrow_arg(a, values.data(), temps);
}

}  // namespace fastcomp::runtime
