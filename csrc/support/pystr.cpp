#include "support/pystr.h"

#include "cpython/pyref.h"

namespace fastcomp {
namespace {

std::string text_of(PyObject* o, PyObject* (*convert)(PyObject*)) {
  if (!o) return "?";
  PyRef s = PyRef::steal(convert(o));
  return s ? utf8(s.get()) : (PyErr_Clear(), "?");
}

}  // namespace

std::string utf8(PyObject* s) {
  const char* c = s && PyUnicode_Check(s) ? PyUnicode_AsUTF8(s) : nullptr;
  if (!c) PyErr_Clear();
  return c ? c : "?";
}

std::string py_str(PyObject* o) { return text_of(o, PyObject_Str); }
std::string py_repr(PyObject* o) { return text_of(o, PyObject_Repr); }

std::string take_error_message() {
  if (!PyErr_Occurred()) return "";
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  std::string msg = type ? reinterpret_cast<PyTypeObject*>(type)->tp_name : "error";
  if (value) msg += ": " + py_str(value);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  return msg;
}

}  // namespace fastcomp
