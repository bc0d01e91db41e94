// The PEP 523 frame-evaluation hook. It is installed on the interpreter only while at least one thread is
// inside a fastcomp-compiled call (HookScope), so the rest of the program keeps CPython's fast call paths.
#pragma once
#include <Python.h>

#include <functional>

#include "cpython/frame.h"

namespace fastcomp::cpython {

// What the frame handler decided for one intercepted frame.
struct FrameOutcome {
  enum Kind { RunDefault, Result, Error } kind = RunDefault;
  PyObject* value = nullptr;  // new reference when kind == Result
  static FrameOutcome run_default() { return {}; }
  static FrameOutcome result(PyObject* v) { return {Result, v}; }
  static FrameOutcome error() { return {Error, nullptr}; }  // a Python exception is set
  // RunDefault, then `after(raised)` once the evaluator is done with the frame (whether it raised), with the hook
  // suspended and the frame's result or exception kept aside. Returning false (with an exception set) turns the
  // frame's outcome into that exception.
  static FrameOutcome run_default_then(std::function<bool(bool raised)> after) {
    FrameOutcome o;
    o.after_default = std::move(after);
    return o;
  }
  std::function<bool(bool raised)> after_default;
};

// Called for each frame the hook intercepts: a handler is set, this thread holds a HookScope and no
// SuspendHook (so never re-entered from inside a handler), the frame is not a generator.throw() resumption,
// no trace/profile/monitoring callback is running on this thread, the frame was pushed by a call (function,
// or exec'd module/class body) and has not started, and its code is not a generator, coroutine or async
// generator. The handler runs with the hook suspended. On Result/Error the hook disposes of the frame
// without evaluating it, as the CPython version requires; RunDefault must come with no exception set.
using FrameHandler = FrameOutcome (*)(const FrameView& frame);

// Sets the handler (nullptr: none; every frame then runs under the default evaluator) and returns the
// previous one, so a caller can restore it. Call with the GIL held.
FrameHandler set_frame_handler(FrameHandler handler);

// While one HookScope is alive on a thread, frames evaluated on that thread are offered to the handler.
// Scopes nest; the interpreter-wide hook is installed while any thread holds one. Create and destroy with
// the GIL held (the thread count is protected by it).
class HookScope {
 public:
  HookScope();
  ~HookScope();
  HookScope(const HookScope&) = delete;
  HookScope& operator=(const HookScope&) = delete;
};

// While alive, the current thread's frames run under CPython's default evaluator even inside a HookScope
// (also one opened while the SuspendHook is alive). fastcomp holds one while it traces, compiles, checks
// guards and runs graphs (torch's own Python code); the hook holds one while the handler runs.
class SuspendHook {
 public:
  SuspendHook();
  ~SuspendHook();
  SuspendHook(const SuspendHook&) = delete;
  SuspendHook& operator=(const SuspendHook&) = delete;

 private:
  bool previous_;
};

// While alive, frames on this thread are offered to the handler again although a SuspendHook is alive (a
// handler uses it to run the CPython part of a frame it compiled, whose calls must be intercepted).
class UnsuspendHook {
 public:
  UnsuspendHook();
  ~UnsuspendHook();
  UnsuspendHook(const UnsuspendHook&) = delete;
  UnsuspendHook& operator=(const UnsuspendHook&) = delete;

 private:
  bool previous_;
};

bool hook_installed();  // for tests: whether the interpreter-wide hook is set right now

}  // namespace fastcomp::cpython
