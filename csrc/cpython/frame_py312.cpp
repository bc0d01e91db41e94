// FrameView's struct access and the frame lifecycle rules for CPython 3.12, checked against
// Include/internal/pycore_frame.h, Python/ceval.c, Python/frame.c and Python/pystate.c at v3.12.3.
#include "cpython/version.h"

#if FC_PY_MINOR == 12
#include <cassert>

#include "cpython/frame.h"
#include "cpython/frame_lifecycle.h"
#include "cpython/internal.h"

namespace fastcomp::cpython {

PyCodeObject* FrameView::code() const { return frame_->f_code; }

PyObject* FrameView::function() const { return frame_->f_funcobj; }

PyObject* FrameView::globals() const { return frame_->f_globals; }

PyObject* FrameView::builtins() const { return frame_->f_builtins; }

PyObject* FrameView::raw_slot(int i) const { return frame_->localsplus[i]; }

SlotKind FrameView::slot_kind(int i) const {
  _PyLocals_Kind kind = _PyLocals_GetKind(frame_->f_code->co_localspluskinds, i);
  // PEP 709 inlined comprehensions add hidden slots (with LOCAL or CELL also set); user code never sees them.
  if (kind & CO_FAST_HIDDEN) return SlotKind::Hidden;
  if (kind & CO_FAST_FREE) return SlotKind::Free;
  // The compiler (compute_localsplus_info) marks a cell that is also a parameter CO_FAST_LOCAL|CO_FAST_CELL;
  // other cells are CO_FAST_CELL only.
  if (kind & CO_FAST_CELL) return (kind & CO_FAST_LOCAL) ? SlotKind::CellArg : SlotKind::Cell;
  return SlotKind::Local;
}

bool frame_is_unstarted_call(_PyInterpreterFrame* frame) {
  // _PyFrame_Initialize sets prev_instr one code unit before the first instruction; the first executed
  // instruction moves it.
  return frame->owner == FRAME_OWNED_BY_THREAD && frame->prev_instr == _PyCode_CODE(frame->f_code) - 1;
}

namespace {

// Drops the frame's references: our version of _PyFrame_ClearExceptCode (Python/frame.c) plus the
// Py_DECREF(f_code) of clear_thread_frame (Python/ceval.c), for the one case that reaches it here.
void clear_unstarted_frame(PyThreadState* tstate, _PyInterpreterFrame* frame) {
  // CPython moves a frame's data into its PyFrameObject when that object outlives the frame
  // (take_ownership). A frame object can only be made for a complete frame (past RESUME) that the evaluator
  // has linked into the thread's frame chain, which it does when it starts the frame, so an unstarted frame
  // never has one. Carrying on with one would leave it pointing at freed stack memory.
  if (frame->frame_obj != nullptr) Py_FatalError("fastcomp: an unevaluated frame has a frame object");
  assert(frame->stacktop >= 0);
  // Deallocations may run finalizers; clear_thread_frame counts them against the C recursion limit.
  tstate->c_recursion_remaining--;
  for (int i = 0; i < frame->stacktop; i++) Py_CLEAR(frame->localsplus[i]);
  Py_CLEAR(frame->f_locals);
  Py_CLEAR(frame->f_funcobj);
  Py_CLEAR(frame->f_code);
  tstate->c_recursion_remaining++;
}

// Our version of _PyThreadState_PopFrame (Python/pystate.c), which 3.12 does not export.
void pop_frame(PyThreadState* tstate, _PyInterpreterFrame* frame) {
  PyObject** base = reinterpret_cast<PyObject**>(frame);
  _PyStackChunk* chunk = tstate->datastack_chunk;
  if (base != &chunk->data[0]) {
    tstate->datastack_top = base;
    return;
  }
  // The frame opened this chunk (push_chunk puts a frame that did not fit at data[0]): go back to the
  // previous chunk and free this one. push_chunk puts the root chunk's first frame at data[1], so
  // `previous` is never null here.
  _PyStackChunk* previous = chunk->previous;
  assert(previous != nullptr);
  tstate->datastack_chunk = previous;
  tstate->datastack_top = previous->data + previous->top;
  tstate->datastack_limit = reinterpret_cast<PyObject**>(reinterpret_cast<char*>(previous) + previous->size);
  // _PyObject_VirtualFree is not exported either; it is the object arena allocator's free.
  PyObjectArenaAllocator arena;
  PyObject_GetArenaAllocator(&arena);
  arena.free(arena.ctx, chunk, chunk->size);
}

}  // namespace

void release_unevaluated_frame(PyThreadState* tstate, _PyInterpreterFrame* frame) {
  // On 3.12 the eval function owns the frame: _PyEval_Vector returns whatever it returns without touching the
  // frame, and the default evaluator clears and pops it on the way out (clear_thread_frame via
  // _PyEvalFrameClearAndPop). So the hook must do the same for a frame it does not evaluate.
  assert(frame->owner == FRAME_OWNED_BY_THREAD);
  // It must be the top frame of the data stack, as clear_thread_frame asserts.
  assert(reinterpret_cast<PyObject**>(frame) + frame->f_code->co_framesize == tstate->datastack_top);
  clear_unstarted_frame(tstate, frame);
  pop_frame(tstate, frame);
}

}  // namespace fastcomp::cpython
#endif
