// The callables fastcomp.compile and fastcomp.disable return. Plain CPython types with vectorcall, so a
// compiled call costs one C call before the user's frame starts.
#pragma once
#include <Python.h>

#include "compile.h"

namespace fastcomp::api {

// New reference: a callable that runs `fn` with the hook on, compiling frames of `target` under `options`.
PyObject* make_dispatcher(PyObject* fn, PyCodeObject* target, CompileOptions options, bool explain);
// New reference: a callable that runs `fn` with fastcomp's hook suspended (never traced into).
PyObject* make_disabled(PyObject* fn);
PyTypeObject* dispatcher_type();  // fastcomp._C.CompiledFunction
PyTypeObject* disabled_type();
bool ready_types();  // registers both types; false with a Python error set on failure

}  // namespace fastcomp::api
