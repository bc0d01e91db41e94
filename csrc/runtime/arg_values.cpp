#include "runtime/arg_values.h"

#include <fmt/format.h>

#include "runtime/torch_shim.h"

namespace fastcomp::runtime {
namespace {

PyObject* node_value(const graph::Arg& a, PyObject* const* values) {  // borrowed
  PyObject* v = values[a.node];
  if (!v) PyErr_SetString(PyExc_RuntimeError, fmt::format("fastcomp internal: %{} has no value", a.node).c_str());
  return v;
}

}  // namespace

PyObject* new_arg(const graph::Arg& a, PyObject* const* values, const std::vector<int64_t>* symbols) {
  switch (a.kind) {
    case graph::Arg::Kind::Node: return Py_XNewRef(node_value(a, values));
    case graph::Arg::Kind::Const: return a.value.new_ref();
    case graph::Arg::Kind::Sym:
      if (!symbols) {
        PyErr_SetString(PyExc_RuntimeError, "fastcomp internal: a size expression without symbol values");
        return nullptr;
      }
      return PyLong_FromLongLong(graph::sym_eval(a.sym, *symbols));
    case graph::Arg::Kind::Slice: {
      PyRef parts[3];
      for (int i = 0; i < 3; ++i)
        if (!(parts[i] = PyRef::steal(new_arg(a.items[i], values, symbols)))) return nullptr;
      return PySlice_New(parts[0].get(), parts[1].get(), parts[2].get());
    }
    case graph::Arg::Kind::Tuple:
    case graph::Arg::Kind::List: {
      const bool tuple = a.kind == graph::Arg::Kind::Tuple;
      PyObject* out = tuple ? PyTuple_New(a.items.size()) : PyList_New(a.items.size());
      for (size_t i = 0; out && i < a.items.size(); ++i) {
        PyObject* item = new_arg(a.items[i], values, symbols);
        if (!item) {
          Py_DECREF(out);
          return nullptr;
        }
        if (tuple) PyTuple_SET_ITEM(out, i, item);
        else PyList_SET_ITEM(out, i, item);
      }
      return out;
    }
    case graph::Arg::Kind::Dict: {
      PyObject* out = PyDict_New();
      for (size_t i = 0; out && i < a.items.size(); ++i) {
        PyRef item = PyRef::steal(new_arg(a.items[i], values, symbols));
        if (!item || PyDict_SetItem(out, a.keys[i].get(), item.get()) < 0) {
          Py_DECREF(out);
          return nullptr;
        }
      }
      return out;
    }
  }
  return nullptr;
}

PyObject* borrow_arg(const graph::Arg& a, PyObject* const* values, std::vector<PyRef>& temps,
                     const std::vector<int64_t>* symbols) {
  if (a.kind == graph::Arg::Kind::Node) return node_value(a, values);
  if (a.kind == graph::Arg::Kind::Const) return a.value.get();
  temps.push_back(PyRef::steal(new_arg(a, values, symbols)));
  return temps.back().get();
}

bool read_symbols(const std::vector<graph::SymBinding>& symbols, PyObject* const* inputs, std::vector<int64_t>* out) {
  out->resize(symbols.size());
  const TorchShim* shim = TorchShim::get();
  for (size_t i = 0; i < symbols.size(); ++i) {
    const graph::SymBinding& b = symbols[i];
    ShimTensorMeta meta;
    if (shim && shim->read(inputs[b.input], &meta) && b.dim < meta.ndim) {
      (*out)[i] = meta.sizes[b.dim];
      continue;
    }
    PyRef shape = PyRef::steal(PyObject_GetAttrString(inputs[b.input], "shape"));
    if (!shape) return false;
    if (!PyTuple_Check(shape.get()) || b.dim >= PyTuple_GET_SIZE(shape.get())) {
      PyErr_SetString(PyExc_RuntimeError, "fastcomp internal: a dynamic input lost a dimension");
      return false;
    }
    (*out)[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape.get(), b.dim));
  }
  return true;
}

}  // namespace fastcomp::runtime
