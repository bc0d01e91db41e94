// fastcomp's per-code-object storage in co_extra (PEP 523). The stored object is owned by the code object
// and destroyed with it through the destructor registered at start-up.
#pragma once
#include <Python.h>

namespace fastcomp::cpython {

using CodeExtraDestructor = void (*)(void*);

// Requests the co_extra index once per process. Must be called before code_extra_get/set.
void code_extra_init(CodeExtraDestructor destroy);
void* code_extra_get(PyCodeObject* code);  // nullptr when none is stored
// Stores `value`, destroying whatever was stored before.
void code_extra_set(PyCodeObject* code, void* value);

}  // namespace fastcomp::cpython
