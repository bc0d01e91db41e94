// The Python objects of a node's arguments at run time, built from the values computed so far (an array with one
// per graph node, null where none exists). Shared by the executables that call torch for graph nodes.
#pragma once
#include <Python.h>

#include <vector>

#include "cpython/pyref.h"
#include "graph/ir.h"

namespace fastcomp::runtime {

// A new reference to the object `a` describes (tuples, lists and dicts built afresh; ints computed from sizes
// evaluated with `symbols`, the values of the graph's symbols on this call). Null with a Python error set when
// a node it names has no value.
PyObject* new_arg(const graph::Arg& a, PyObject* const* values, const std::vector<int64_t>* symbols = nullptr);

// The same, borrowed for flat arguments (a node's value, a constant); composite ones are built into `temps`,
// which keeps them alive.
PyObject* borrow_arg(const graph::Arg& a, PyObject* const* values, std::vector<PyRef>& temps,
                     const std::vector<int64_t>* symbols = nullptr);

inline PyObject* new_arg(const graph::Arg& a, const std::vector<PyObject*>& values,
                         const std::vector<int64_t>* symbols = nullptr) {
  return new_arg(a, values.data(), symbols);
}
inline PyObject* borrow_arg(const graph::Arg& a, const std::vector<PyObject*>& values, std::vector<PyRef>& temps,
                            const std::vector<int64_t>* symbols = nullptr) {
  return borrow_arg(a, values.data(), temps, symbols);
}

// Dynamic shapes: the values of a graph's symbols (`Graph::symbols`), read from the sizes of its `inputs` (in
// Graph::inputs order; through torch's C shim when it is available). False with a Python error set when an input
// has no such dimension.
bool read_symbols(const std::vector<graph::SymBinding>& symbols, PyObject* const* inputs, std::vector<int64_t>* out);

}  // namespace fastcomp::runtime
