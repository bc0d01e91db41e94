// The version-neutral part of FrameView: what user code would see in each slot, derived from the raw slot
// and its kind (both per version) for a frame whose prologue (MAKE_CELL, COPY_FREE_VARS) has not run.
#include "cpython/frame.h"

namespace fastcomp::cpython {

int FrameView::nlocalsplus() const { return code()->co_nlocalsplus; }

PyObject* FrameView::local(int i) const {
  switch (slot_kind(i)) {
    case SlotKind::Local:
    case SlotKind::CellArg:  // MAKE_CELL has not wrapped the argument yet
      return raw_slot(i);
    case SlotKind::Cell:    // MAKE_CELL has not created the cell, so the variable is unbound
    case SlotKind::Hidden:  // comprehension temporaries, invisible to user code
      return nullptr;
    case SlotKind::Free: {
      PyObject* cell = free_cell(i);
      return cell != nullptr ? PyCell_GET(cell) : nullptr;
    }
  }
  return nullptr;
}

PyObject* FrameView::free_cell(int i) const {
  if (slot_kind(i) != SlotKind::Free) return nullptr;
  // COPY_FREE_VARS has not run, so the slot is still empty; it would copy the closure tuple into the last
  // co_nfreevars slots, in order.
  PyCodeObject* co = code();
  PyObject* closure = PyFunction_GET_CLOSURE(function());
  if (closure == nullptr) return nullptr;
  return PyTuple_GET_ITEM(closure, i - (co->co_nlocalsplus - co->co_nfreevars));
}

PyObject* slot_name(PyCodeObject* code, int i) { return PyTuple_GET_ITEM(code->co_localsplusnames, i); }

}  // namespace fastcomp::cpython
