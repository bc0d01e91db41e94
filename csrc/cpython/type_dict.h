// Reading a class's own namespace without the attribute protocol.
#pragma once
#include <Python.h>

namespace fastcomp::cpython {

// The dict of `type`'s own attributes (its __dict__ without the mappingproxy); borrowed, null on failure.
PyObject* type_dict(PyTypeObject* type);

}  // namespace fastcomp::cpython
