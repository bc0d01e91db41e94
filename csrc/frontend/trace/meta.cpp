#include "frontend/trace/meta.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>

#include "frontend/trace/torch_refs.h"
#include "frontend/trace/unsupported.h"
#include "support/pystr.h"

namespace fastcomp::frontend {
namespace {

std::vector<int64_t> int_tuple(PyObject* seq) {
  std::vector<int64_t> out;
  PyRef fast = PyRef::steal(PySequence_Fast(seq, "expected a sequence of ints"));
  if (!fast) throw std::runtime_error("fastcomp: tensor shape is not a sequence");
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast.get()); ++i)
    out.push_back(PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast.get(), i)));
  return out;
}

PyRef tuple_of(const std::vector<int64_t>& v) {
  PyRef t = PyRef::steal(PyTuple_New(v.size()));
  for (size_t i = 0; i < v.size(); ++i) PyTuple_SET_ITEM(t.get(), i, PyLong_FromLongLong(v[i]));
  return t;
}

// `t` (sizes and strides of `meta`, at offset 0) moved to meta's storage offset, in a storage long enough for it
// and as a tensor of its own (not a view: in-place ops on it are a base's). The views traced from an input then
// have the offsets its real views have, which the CUDA plan subtracts the input's own offset from.
PyRef with_storage_offset(PyObject* t, const graph::TensorMeta& meta) {
  int64_t elements = meta.storage_offset + 1;
  for (size_t d = 0; d < meta.sizes.size(); ++d) {
    if (meta.sizes[d] == 0) elements = meta.storage_offset;
    if (meta.sizes[d] == 0) break;
    elements += (meta.sizes[d] - 1) * meta.strides[d];
  }
  PyRef storage = PyRef::steal(PyObject_CallMethod(t, "new_empty", "((L))", static_cast<long long>(elements)));
  PyRef moved = storage ? PyRef::steal(PyObject_CallMethod(storage.get(), "as_strided", "OOL", tuple_of(meta.sizes).get(),
                                                           tuple_of(meta.strides).get(),
                                                           static_cast<long long>(meta.storage_offset)))
                        : PyRef();
  PyRef own = moved ? PyRef::steal(PyObject_CallMethod(moved.get(), "detach", nullptr)) : PyRef();
  if (own && meta.requires_grad && !PyRef::steal(PyObject_CallMethod(own.get(), "requires_grad_", nullptr))) own = PyRef();
  return own;
}

}  // namespace

graph::TensorMeta meta_of_tensor(PyObject* tensor, PyObject* device) {
  graph::TensorMeta m;
  m.dtype = PyRef::steal(PyObject_GetAttrString(tensor, "dtype"));
  m.device = device ? PyRef::borrow(device) : PyRef::steal(PyObject_GetAttrString(tensor, "device"));
  PyRef shape = PyRef::steal(PyObject_GetAttrString(tensor, "shape"));
  PyRef strides = PyRef::steal(PyObject_CallMethod(tensor, "stride", nullptr));
  PyRef offset = PyRef::steal(PyObject_CallMethod(tensor, "storage_offset", nullptr));
  PyRef requires_grad = PyRef::steal(PyObject_GetAttrString(tensor, "requires_grad"));
  if (!m.dtype || !m.device || !shape || !strides || !offset || !requires_grad)
    throw std::runtime_error("fastcomp: could not read tensor metadata");
  m.sizes = int_tuple(shape.get());
  m.strides = int_tuple(strides.get());
  m.storage_offset = PyLong_AsLongLong(offset.get());
  m.requires_grad = requires_grad.get() == Py_True;
  return m;
}

PyRef make_meta_tensor(const graph::TensorMeta& meta) {
  const auto& T = torch_refs();
  PyRef args = PyRef::steal(PyTuple_Pack(2, tuple_of(meta.sizes).get(), tuple_of(meta.strides).get()));
  PyRef kwargs = PyRef::steal(PyDict_New());
  PyDict_SetItemString(kwargs.get(), "dtype", meta.dtype.get());
  PyDict_SetItemString(kwargs.get(), "device", T.meta_device.get());
  PyDict_SetItemString(kwargs.get(), "requires_grad", meta.requires_grad ? Py_True : Py_False);
  PyRef t = PyRef::steal(PyObject_Call(T.empty_strided.get(), args.get(), kwargs.get()));
  if (t && meta.storage_offset != 0) t = with_storage_offset(t.get(), meta);
  if (!t && meta.requires_grad) {
    // An integer tensor can require grad after an in-place copy from one that does (`ints[i] = floats`), but
    // no tensor of that kind can be made: the code around it runs in CPython.
    PyErr_Clear();
    throw Unsupported(BreakCode::UnsupportedValue, fmt::format("a tensor of dtype {} that requires grad", py_str(meta.dtype.get())));
  }
  if (!t) {
    PyErr_Clear();
    throw std::runtime_error(fmt::format("fastcomp: could not create a meta tensor of sizes [{}] and strides [{}]",
                                         fmt::join(meta.sizes, ", "), fmt::join(meta.strides, ", ")));
  }
  return t;
}

PyRef make_meta_result(const graph::TensorMeta& meta) {
  PyRef t = make_meta_tensor(meta);
  if (!meta.requires_grad) return t;
  PyRef result = PyRef::steal(PyObject_CallMethod(t.get(), "clone", nullptr));
  if (!result) {
    PyErr_Clear();
    throw std::runtime_error("fastcomp: could not create a meta tensor");
  }
  return result;
}

}  // namespace fastcomp::frontend
