#include "frontend/trace/meta_args.h"

#include <algorithm>
#include <string_view>

#include "cpython/gil_once.h"
#include "frontend/trace/torch_refs.h"

namespace fastcomp::frontend::meta_args {
namespace {

constexpr const char* kDtNames[kNumDt] = {"bool",  "uint8",   "int8",     "int16",   "int32",
                                          "int64", "float16", "bfloat16", "float32", "float64"};

struct Names {  // interned attribute names
  PyObject* dtype = PyUnicode_InternFromString("dtype");
  PyObject* shape = PyUnicode_InternFromString("shape");
  PyObject* stride = PyUnicode_InternFromString("stride");
  PyObject* requires_grad = PyUnicode_InternFromString("requires_grad");
  PyObject* storage_offset = PyUnicode_InternFromString("storage_offset");
};

const Names& names() {
  static const Names* n = new Names();
  return *n;
}

bool read_int_tuple(PyObject* t, std::vector<int64_t>* out) {
  if (!t || !PyTuple_Check(t)) return false;
  Py_ssize_t n = PyTuple_GET_SIZE(t);
  out->resize(n);
  for (Py_ssize_t i = 0; i < n; ++i) {
    (*out)[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(t, i));
    if ((*out)[i] == -1 && PyErr_Occurred()) return false;
  }
  return true;
}

}  // namespace

int8_t Dtypes::index(PyObject* dtype) const {
  for (int8_t i = 0; i < kNumDt; ++i)
    if (objs[i] == dtype) return i;
  return kNone;
}

int8_t Dtypes::default_dtype() const {
  PyRef d = PyRef::steal(PyObject_CallNoArgs(torch_refs().get_default_dtype.get()));
  if (!d) PyErr_Clear();
  return d ? index(d.get()) : kNone;
}

const Dtypes& dtypes() {
  static cpython::GilOnce<const Dtypes> dt;
  return *dt.get([] {
    auto* d = new Dtypes();
    PyObject* torch = torch_refs().torch.get();
    for (int i = 0; i < kNumDt; ++i) d->objs[i] = lookup(torch, kDtNames[i]);
    PyRef promote_types = PyRef::steal(lookup(torch, "promote_types"));
    for (int i = 0; i < kNumDt; ++i)
      for (int j = 0; j < kNumDt; ++j) {
        PyRef r = PyRef::steal(
            promote_types ? PyObject_CallFunctionObjArgs(promote_types.get(), d->objs[i], d->objs[j], nullptr) : nullptr);
        d->promote_table[i][j] = r ? d->index(r.get()) : kNone;
      }
    PyErr_Clear();
    return d;
  });
}

bool bind_args(PyObject* args, PyObject* kwargs, std::initializer_list<const char*> names, size_t required,
               std::vector<PyObject*>* out) {
  size_t n = PyTuple_GET_SIZE(args);
  if (n > names.size()) return false;
  out->assign(names.size(), nullptr);
  for (size_t i = 0; i < n; ++i) (*out)[i] = PyTuple_GET_ITEM(args, i);
  Py_ssize_t pos = 0;
  PyObject *key, *value;
  while (kwargs && PyDict_Next(kwargs, &pos, &key, &value)) {
    const char* k = PyUnicode_AsUTF8(key);
    if (!k) {
      PyErr_Clear();
      return false;
    }
    auto it = std::find_if(names.begin(), names.end(), [&](const char* name) { return std::string_view(name) == k; });
    size_t i = it - names.begin();
    if (it == names.end() || (*out)[i]) return false;
    (*out)[i] = value;
  }
  for (size_t i = 0; i < required; ++i)
    if (!(*out)[i]) return false;
  return true;
}

PyObject* lookup(PyObject* owner, const char* name) {
  PyObject* o = owner ? PyObject_GetAttrString(owner, name) : nullptr;
  if (!o) PyErr_Clear();
  return o;
}

bool row_major(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  int64_t span = 1;  // stride * size of the dimension to the right
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 0) return false;
    if (sizes[i] == 1 ? strides[i] != span : strides[i] < span) return false;
    span = strides[i] * sizes[i];
  }
  return true;
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> s(sizes.size());
  int64_t acc = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    s[i] = acc;
    acc *= sizes[i];
  }
  return s;
}

bool read_tensor(PyObject* o, Arg* out, bool any_layout) {
  const auto& T = torch_refs();
  PyTypeObject* type = Py_TYPE(o);
  if (type != reinterpret_cast<PyTypeObject*>(T.tensor_type.get()) &&
      type != reinterpret_cast<PyTypeObject*>(T.parameter_type.get()))
    return false;
  const Names& n = names();
  PyRef dtype = PyRef::steal(PyObject_GetAttr(o, n.dtype));
  PyRef shape = PyRef::steal(PyObject_GetAttr(o, n.shape));
  PyRef strides = PyRef::steal(PyObject_CallMethodNoArgs(o, n.stride));
  PyRef requires_grad = PyRef::steal(PyObject_GetAttr(o, n.requires_grad));
  bool ok = dtype && requires_grad && read_int_tuple(shape.get(), &out->sizes) &&
            read_int_tuple(strides.get(), &out->strides) && out->sizes.size() == out->strides.size();
  if (!ok) {
    PyErr_Clear();
    return false;
  }
  out->obj = o;
  out->tensor = true;
  out->dt = dtypes().index(dtype.get());
  out->requires_grad = requires_grad.get() == Py_True;
  if (out->dt == kNone) return false;
  for (int64_t d : out->sizes)
    if (d == 0) return false;
  return any_layout || row_major(out->sizes, out->strides);
}

bool read_arg(PyObject* o, Arg* out, bool any_layout) {
  if (PyBool_Check(o)) {
    out->dt = kBool;
  } else if (PyLong_CheckExact(o)) {
    int overflow = 0;
    out->int_value = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow) return false;
    out->dt = kI64;
  } else if (PyFloat_CheckExact(o)) {
    out->dt = dtypes().default_dtype();
  } else {
    return read_tensor(o, out, any_layout);
  }
  out->obj = o;
  return out->dt != kNone;
}

ComputedMeta fresh_result(int8_t dt, std::vector<int64_t> sizes, bool requires_grad) {
  ComputedMeta out;
  out.meta.dtype = PyRef::borrow(dtypes().objs[dt]);
  out.meta.strides = contiguous_strides(sizes);
  out.meta.sizes = std::move(sizes);
  out.meta.requires_grad = requires_grad;
  return out;
}

std::optional<ComputedMeta> same_object(const Arg& self) {
  PyRef offset = PyRef::steal(PyObject_CallMethodNoArgs(self.obj, names().storage_offset));
  if (!offset) {
    PyErr_Clear();
    return std::nullopt;
  }
  ComputedMeta out;
  out.alias = self.obj;
  out.meta.dtype = PyRef::borrow(dtypes().objs[self.dt]);
  out.meta.sizes = self.sizes;
  out.meta.strides = self.strides;
  out.meta.storage_offset = PyLong_AsLongLong(offset.get());
  out.meta.requires_grad = self.requires_grad;
  return out;
}

}  // namespace fastcomp::frontend::meta_args
