// fastcomp's per-code-object storage in co_extra (PEP 523). The stored object is owned by the code object
// and destroyed with it through the destructor registered at start-up.
#pragma once
#include <Python.h>

namespace fastcomp::cpython {

// Must accept nullptr: when a code object with any co_extra storage dies, code_dealloc (Objects/codeobject.c)
// calls every registered destructor on its slot, stored or not.
using CodeExtraDestructor = void (*)(void*);

// One co_extra slot: an index requested from the interpreter once, plus the destructor CPython runs on the
// stored pointer when it is replaced or when the code object is freed. Each interpreter has at most 254
// slots in all (MAX_CO_EXTRA_USERS): fastcomp uses one for its compiled entries (code_extra_init), one for
// what the frontend knows about a code (frontend/code_info.h), and tests use their own.
// All members need the GIL.
class CodeExtraSlot {
 public:
  CodeExtraSlot() = default;  // invalid until requested
  // Requests a new index. The result is invalid (with a Python exception set) when none is left.
  static CodeExtraSlot request(CodeExtraDestructor destroy);

  bool valid() const { return index_ >= 0; }
  void* get(PyCodeObject* code) const;  // nullptr when none is stored
  // Stores `value` (ownership passes to the code object), destroying whatever was stored before; storing
  // the pointer already stored does nothing. On failure destroys `value` and returns false with a Python
  // exception set.
  bool set(PyCodeObject* code, void* value) const;

 private:
  Py_ssize_t index_ = -1;
  CodeExtraDestructor destroy_ = nullptr;
};

// fastcomp's own slot. code_extra_init requests it once per process (later calls return true and keep the
// first destructor); false, with a Python exception set, when the interpreter has no index left. It must
// succeed before code_extra_get/set are called.
bool code_extra_init(CodeExtraDestructor destroy);
void* code_extra_get(PyCodeObject* code);  // nullptr when none is stored
// Stores `value`, destroying whatever was stored before; see CodeExtraSlot::set.
bool code_extra_set(PyCodeObject* code, void* value);

}  // namespace fastcomp::cpython
