#include "cpython/code_extra.h"

#include <cassert>

#include "cpython/version.h"

// 3.12 renamed the co_extra functions to PyUnstable_* and kept the old names as inline aliases; use each
// version's own spelling so the 3.12 build does not depend on the aliases.
#if FC_PY_MINOR == 11
#define FC_REQUEST_CODE_EXTRA_INDEX _PyEval_RequestCodeExtraIndex
#define FC_CODE_GET_EXTRA _PyCode_GetExtra
#define FC_CODE_SET_EXTRA _PyCode_SetExtra
#elif FC_PY_MINOR == 12
#define FC_REQUEST_CODE_EXTRA_INDEX PyUnstable_Eval_RequestCodeExtraIndex
#define FC_CODE_GET_EXTRA PyUnstable_Code_GetExtra
#define FC_CODE_SET_EXTRA PyUnstable_Code_SetExtra
#else
#error "fastcomp: co_extra API not audited for this CPython version; see csrc/cpython/README.md"
#endif

namespace fastcomp::cpython {

CodeExtraSlot CodeExtraSlot::request(CodeExtraDestructor destroy) {
  CodeExtraSlot slot;
  // The request fails (returns -1) only when the interpreter's table is full, and sets no exception.
  slot.index_ = FC_REQUEST_CODE_EXTRA_INDEX(destroy);
  if (slot.index_ < 0) {
    PyErr_SetString(PyExc_RuntimeError, "fastcomp: no co_extra index left in this interpreter");
    return slot;
  }
  slot.destroy_ = destroy;
  return slot;
}

void* CodeExtraSlot::get(PyCodeObject* code) const {
  assert(valid());
  void* extra = nullptr;
  // Fails only for a non-code object or an index this interpreter never handed out, both caller bugs.
  [[maybe_unused]] int rc = FC_CODE_GET_EXTRA(reinterpret_cast<PyObject*>(code), index_, &extra);
  assert(rc == 0);
  return extra;
}

bool CodeExtraSlot::set(PyCodeObject* code, void* value) const {
  assert(valid());
  // CPython frees the previous value itself (codeobject.c _PyCode_SetExtra / PyUnstable_Code_SetExtra), so
  // storing the same pointer again would free it and keep a dangling pointer.
  if (value == get(code)) return true;
  if (FC_CODE_SET_EXTRA(reinterpret_cast<PyObject*>(code), index_, value) < 0) {
    if (value != nullptr) destroy_(value);
    return false;
  }
  return true;
}

namespace {
// Trivially destructible, so nothing runs at process exit after the interpreter is gone.
CodeExtraSlot fastcomp_slot;
}  // namespace

bool code_extra_init(CodeExtraDestructor destroy) {
  if (fastcomp_slot.valid()) return true;
  fastcomp_slot = CodeExtraSlot::request(destroy);
  return fastcomp_slot.valid();
}

void* code_extra_get(PyCodeObject* code) { return fastcomp_slot.get(code); }

bool code_extra_set(PyCodeObject* code, void* value) { return fastcomp_slot.set(code, value); }

}  // namespace fastcomp::cpython
