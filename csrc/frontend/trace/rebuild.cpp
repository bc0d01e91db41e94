#include "frontend/trace/rebuild.h"

#include <iterator>

#include "cpython/pyref.h"

namespace fastcomp::frontend {
namespace {

// The first class in `cls`'s MRO that is implemented in C (object, dict, OrderedDict, list...): its __new__ makes
// the instance and its own __setitem__ fills it, whatever the Python subclasses override.
PyTypeObject* solid_base(PyTypeObject* cls) {
  PyObject* mro = cls->tp_mro;
  for (Py_ssize_t i = 0; mro && i < PyTuple_GET_SIZE(mro); ++i) {
    auto* t = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i));
    if (!(t->tp_flags & Py_TPFLAGS_HEAPTYPE)) return t;
  }
  return &PyBaseObject_Type;
}

PyObject* rebuild_object(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3 || !PyType_Check(args[0]) || !PyDict_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "fastcomp._rebuild_object(cls, attrs, items)");
    return nullptr;
  }
  auto* cls = reinterpret_cast<PyTypeObject*>(args[0]);
  PyTypeObject* base = solid_base(cls);
  PyRef new_args = PyRef::steal(PyTuple_New(0));
  PyRef obj = PyRef::steal(base->tp_new(cls, new_args.get(), nullptr));
  if (!obj) return nullptr;
  if (args[2] != Py_None) {
    PyObject* setitem = _PyType_Lookup(base, PyRef::steal(PyUnicode_InternFromString("__setitem__")).get());
    if (!setitem) {
      PyErr_Format(PyExc_TypeError, "fastcomp: cannot fill an instance of %s", cls->tp_name);
      return nullptr;
    }
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(args[2], &pos, &k, &v)) {
      PyObject* call_args[] = {obj.get(), k, v};
      PyRef r = PyRef::steal(PyObject_Vectorcall(setitem, call_args, 3, nullptr));
      if (!r) return nullptr;
    }
  }
  if (PyDict_GET_SIZE(args[1]) > 0) {
    PyObject** dictptr = _PyObject_GetDictPtr(obj.get());
    if (!dictptr) {
      PyErr_Format(PyExc_TypeError, "fastcomp: instances of %s have no __dict__", cls->tp_name);
      return nullptr;
    }
    if (!*dictptr) *dictptr = PyDict_New();
    if (!*dictptr || PyDict_Update(*dictptr, args[1]) < 0) return nullptr;
  }
  return obj.release();
}

PyObject* rebuild_function(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 6) {
    PyErr_SetString(PyExc_TypeError, "fastcomp._rebuild_function(code, globals, defaults, kwdefaults, closure, attrs)");
    return nullptr;
  }
  PyRef fn = PyRef::steal(PyFunction_New(args[0], args[1]));
  if (!fn) return nullptr;
  if (args[2] != Py_None && PyFunction_SetDefaults(fn.get(), args[2]) < 0) return nullptr;
  if (args[3] != Py_None && PyFunction_SetKwDefaults(fn.get(), args[3]) < 0) return nullptr;
  if (args[4] != Py_None && PyFunction_SetClosure(fn.get(), args[4]) < 0) return nullptr;
  PyObject *k, *v;
  Py_ssize_t pos = 0;
  while (PyDict_Next(args[5], &pos, &k, &v))
    if (PyObject_SetAttr(fn.get(), k, v) < 0) return nullptr;
  return fn.release();
}

PyObject* rebuild_cell(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return PyCell_New(nargs > 0 ? args[0] : nullptr);
}

PyObject* rebuild_list(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  PyObject* list = PyList_New(nargs);
  if (!list) return nullptr;
  for (Py_ssize_t i = 0; i < nargs; ++i) PyList_SET_ITEM(list, i, Py_NewRef(args[i]));
  return list;
}

PyObject* rebuild_dict(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 1 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != nargs - 1) {
    PyErr_SetString(PyExc_TypeError, "fastcomp._rebuild_dict(keys, *values)");
    return nullptr;
  }
  PyRef d = PyRef::steal(PyDict_New());
  for (Py_ssize_t i = 1; d && i < nargs; ++i)
    if (PyDict_SetItem(d.get(), PyTuple_GET_ITEM(args[0], i - 1), args[i]) < 0) return nullptr;
  return d.release();
}

PyObject* rebuild_set(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 1) {
    PyErr_SetString(PyExc_TypeError, "fastcomp._rebuild_set(frozen, *items)");
    return nullptr;
  }
  PyRef items = PyRef::steal(PyTuple_New(nargs - 1));
  for (Py_ssize_t i = 1; i < nargs; ++i) PyTuple_SET_ITEM(items.get(), i - 1, Py_NewRef(args[i]));
  return args[0] == Py_True ? PyFrozenSet_New(items.get()) : PySet_New(items.get());
}

PyObject* rebuild_iter_at(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "fastcomp._rebuild_iter_at(iterable, n)");
    return nullptr;
  }
  PyRef it = PyRef::steal(PyObject_GetIter(args[0]));
  if (!it) return nullptr;
  Py_ssize_t n = PyLong_AsSsize_t(args[1]);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyRef item = PyRef::steal(PyIter_Next(it.get()));
    if (!item) {
      if (PyErr_Occurred()) return nullptr;
      break;
    }
  }
  return it.release();
}

PyMethodDef kDefs[] = {
    {"_rebuild_object", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(rebuild_object)), METH_FASTCALL,
     nullptr},
    {"_rebuild_function", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(rebuild_function)),
     METH_FASTCALL, nullptr},
    {"_rebuild_cell", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(rebuild_cell)), METH_FASTCALL,
     nullptr},
    {"_rebuild_list", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(rebuild_list)), METH_FASTCALL,
     nullptr},
    {"_rebuild_dict", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(rebuild_dict)), METH_FASTCALL,
     nullptr},
    {"_rebuild_set", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(rebuild_set)), METH_FASTCALL, nullptr},
    {"_rebuild_iter_at", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(rebuild_iter_at)), METH_FASTCALL,
     nullptr},
};

}  // namespace

const RebuildFunctions& rebuild_functions() {
  static RebuildFunctions* fns = [] {
    auto* f = new RebuildFunctions();
    PyObject** slots[] = {&f->object, &f->function, &f->cell, &f->list, &f->dict, &f->set, &f->iter_at};
    for (size_t i = 0; i < std::size(slots); ++i) *slots[i] = PyCFunction_New(&kDefs[i], nullptr);
    return f;
  }();
  return *fns;
}

}  // namespace fastcomp::frontend
