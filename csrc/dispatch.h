// Per-call dispatch of intercepted frames: guard check and run on a hit, compile on a miss, the recompile
// limit, and the reporting that goes with each (logs, warnings, explain observers).
#pragma once
#include <Python.h>

#include "compile.h"
#include "cpython/eval_hook.h"

namespace fastcomp {

// What the innermost fastcomp-compiled call on this thread asked for.
struct DispatchContext {
  const CompileOptions* options = nullptr;
  PyCodeObject* target = nullptr;  // the code object whose frames are compiled
  bool explain = false;            // compile every call afresh and report it (fastcomp.explain)
  DispatchContext* previous = nullptr;
};

// Installs `ctx` for the current thread until the returned scope ends.
class ActiveDispatch {
 public:
  explicit ActiveDispatch(DispatchContext* ctx);
  ~ActiveDispatch();

 private:
  DispatchContext* ctx_;
};

bool is_dispatching();  // true while this thread is inside a fastcomp-compiled call

// The handler installed on the eval-frame hook.
cpython::FrameOutcome handle_frame(const cpython::FrameView& frame);

// Receives one dict per compile (for explain); borrowed callable or None.
void set_compile_observer(PyObject* observer);

}  // namespace fastcomp
