// A class's own __dict__, per CPython version: 3.12 keeps the dicts of static builtin types in the interpreter
// state (tp_dict is null there), 3.11 always in tp_dict.
#include "cpython/type_dict.h"

#include "cpython/version.h"

namespace fastcomp::cpython {

PyObject* type_dict(PyTypeObject* type) {
#if FC_PY_MINOR == 11
  return type->tp_dict;
#elif FC_PY_MINOR == 12
  if (type->tp_dict) return type->tp_dict;
  // Static builtin types: PyType_GetDict returns a new reference to a dict that lives as long as the interpreter.
  PyObject* d = PyType_GetDict(type);
  Py_XDECREF(d);
  return d;
#else
#error "fastcomp: type_dict is not audited for this CPython version"
#endif
}

}  // namespace fastcomp::cpython
