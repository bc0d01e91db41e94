// The per-version frame rules the eval hook needs besides reading a frame: which frames it may take over,
// and how to dispose of one it does not evaluate. Implemented next to the FrameView accessors in
// frame_py311.cpp / frame_py312.cpp.
#pragma once
#include <Python.h>

struct _PyInterpreterFrame;

namespace fastcomp::cpython {

// True when `frame` was pushed on this thread's data stack by a call and has not executed an instruction
// yet (so it is not a resumed, generator-owned or frame-object-owned frame).
bool frame_is_unstarted_call(_PyInterpreterFrame* frame);

// Given an unstarted call frame that the hook answers without evaluating it, releases what the default
// evaluator would have released had it run the frame, so that the caller of the eval function finds the
// thread state exactly as after a normal return. `frame` must not be used afterwards.
void release_unevaluated_frame(PyThreadState* tstate, _PyInterpreterFrame* frame);

}  // namespace fastcomp::cpython
