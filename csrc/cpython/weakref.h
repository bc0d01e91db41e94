// A weak reference's referent. CPython 3.13 deprecates PyWeakref_GetObject (borrowed) for PyWeakref_GetRef (a new
// reference): this is the one place that reads a referent, to change with it.
#pragma once
#include <Python.h>

namespace fastcomp::cpython {

// Borrowed; Py_None once the referent is gone. `ref` is a weakref.ref.
inline PyObject* weakref_referent(PyObject* ref) { return PyWeakref_GetObject(ref); }

}  // namespace fastcomp::cpython
