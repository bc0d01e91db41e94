// FrameView's struct access and the frame lifecycle rules for CPython 3.11, checked against
// Include/internal/pycore_frame.h, Python/ceval.c and Python/genobject.c at v3.11.7.
#include "cpython/version.h"

#if FC_PY_MINOR == 11
#include "cpython/frame.h"
#include "cpython/frame_lifecycle.h"
#include "cpython/internal.h"

namespace fastcomp::cpython {

PyCodeObject* FrameView::code() const { return frame_->f_code; }

PyObject* FrameView::function() const { return reinterpret_cast<PyObject*>(frame_->f_func); }

PyObject* FrameView::globals() const { return frame_->f_globals; }

PyObject* FrameView::builtins() const { return frame_->f_builtins; }

PyObject* FrameView::raw_slot(int i) const { return frame_->localsplus[i]; }

SlotKind FrameView::slot_kind(int i) const {
  _PyLocals_Kind kind = _PyLocals_GetKind(frame_->f_code->co_localspluskinds, i);
  if (kind & CO_FAST_FREE) return SlotKind::Free;
  // The compiler (compute_localsplus_info) marks a cell that is also a parameter CO_FAST_LOCAL|CO_FAST_CELL;
  // other cells are CO_FAST_CELL only.
  if (kind & CO_FAST_CELL) return (kind & CO_FAST_LOCAL) ? SlotKind::CellArg : SlotKind::Cell;
  return SlotKind::Local;
}

bool frame_is_unstarted_call(_PyInterpreterFrame* frame) {
  // _PyFrame_InitializeSpecials sets prev_instr one code unit before the first instruction; the first
  // executed instruction moves it.
  return frame->owner == FRAME_OWNED_BY_THREAD && frame->prev_instr == _PyCode_CODE(frame->f_code) - 1;
}

void release_unevaluated_frame(PyThreadState*, _PyInterpreterFrame*) {
  // Nothing to do: on 3.11 the caller owns clearing. _PyEval_Vector (Python/ceval.c) calls
  // _PyEvalFrameClearAndPop after the eval function returns, whether or not the frame ran. The other callers
  // of the eval function (gen_send_ex2, PyEval_EvalFrameEx) pass frames owned by a generator or a frame
  // object, which frame_is_unstarted_call rejects, so the hook never answers for them.
}

}  // namespace fastcomp::cpython
#endif
