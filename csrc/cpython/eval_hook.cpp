// The PEP 523 eval-frame function and its installation. Version-neutral: the frame rules that differ between
// CPython versions live in frame_py3XX.cpp behind frame_lifecycle.h.
#include "cpython/eval_hook.h"

#include <utility>

#include "cpython/frame_lifecycle.h"

namespace fastcomp::cpython {
namespace {

struct ThreadHookState {
  int scope_depth = 0;     // HookScopes alive on this thread
  bool suspended = false;  // a SuspendHook is alive on this thread
};

// Constant-initialised, so reading it costs no initialisation guard on the per-frame path.
thread_local ThreadHookState this_thread;

// All of these are read and written with the GIL held.
FrameHandler frame_handler = nullptr;
int threads_in_scope = 0;  // threads with scope_depth > 0
// Whether the interpreter can reach eval_frame_shim: set on installation, cleared only when we restore the
// previous function. A hook installed after ours keeps ours reachable (it chains to it), so uninstalling
// leaves it in place and re-installing must not stack us on top of it again (that would loop).
bool shim_in_chain = false;
// The eval function that was installed before ours (at least _PyEval_EvalFrameDefault); every frame we do
// not answer goes to it, so hooks installed earlier (debuggers, profilers) keep working.
_PyFrameEvalFunction previous_eval_frame = nullptr;

bool is_generator_like(PyCodeObject* code) {
  return (code->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR)) != 0;
}

// Returns a new reference, or nullptr with an exception set (the eval-function contract).
PyObject* eval_frame_shim(PyThreadState* tstate, _PyInterpreterFrame* frame, int throw_flag) {
  FrameHandler handler = frame_handler;
  // throw_flag: a generator being resumed with an exception must unwind in the evaluator so its handlers
  // and __exit__ methods run. tracing > 0: we are inside a trace/profile/monitoring callback (CPython
  // raises it around those calls on 3.11 and 3.12); the tool's own code is not ours to take over. Frames
  // that already started, or belong to a generator or frame object, cannot be answered without running.
  if (throw_flag != 0 || handler == nullptr || this_thread.scope_depth == 0 || this_thread.suspended ||
      tstate->tracing > 0 || !frame_is_unstarted_call(frame)) {
    return previous_eval_frame(tstate, frame, throw_flag);
  }
  FrameView view(frame);
  // Calling a generator function evaluates its frame only up to RETURN_GENERATOR; answering it would
  // return something other than a generator.
  if (is_generator_like(view.code())) return previous_eval_frame(tstate, frame, throw_flag);

  FrameOutcome outcome;
  {
    SuspendHook suspend;  // the handler's own Python calls run normally
    outcome = handler(view);
  }
  if (outcome.kind == FrameOutcome::RunDefault) {
    // The evaluator must not start with an exception pending (it could clear or chain it); a handler that
    // leaves one behind has a bug, which we report rather than hide.
    if (PyErr_Occurred()) PyErr_WriteUnraisable(reinterpret_cast<PyObject*>(view.code()));
    if (!outcome.after_default) return previous_eval_frame(tstate, frame, throw_flag);
    PyObject* result = previous_eval_frame(tstate, frame, throw_flag);
    PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
    if (!result) PyErr_Fetch(&type, &value, &tb);  // the frame's own exception, kept across the callback
    bool keep;
    {
      SuspendHook suspend;
      keep = outcome.after_default(result == nullptr);
    }
    if (keep) {
      if (!result) PyErr_Restore(type, value, tb);
      return result;
    }
    Py_XDECREF(result);  // the callback's exception replaces the frame's outcome
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_SystemError, "fastcomp: a frame callback failed without an exception");
    return nullptr;
  }
  PyObject* result = outcome.kind == FrameOutcome::Result ? outcome.value : nullptr;
  if (result == nullptr && !PyErr_Occurred()) {
    PyErr_SetString(PyExc_SystemError, "fastcomp: the frame handler failed without setting an exception");
  }
  release_unevaluated_frame(tstate, frame);
  return result;
}

void install_hook() {
  if (shim_in_chain) return;
  PyInterpreterState* interp = PyInterpreterState_Get();
  previous_eval_frame = _PyInterpreterState_GetEvalFrameFunc(interp);
  _PyInterpreterState_SetEvalFrameFunc(interp, &eval_frame_shim);
  shim_in_chain = true;
}

void uninstall_hook() {
  PyInterpreterState* interp = PyInterpreterState_Get();
  // Restoring _PyEval_EvalFrameDefault stores NULL, which gives CPython back its inlined Python-to-Python
  // calls and CALL specialisations.
  if (_PyInterpreterState_GetEvalFrameFunc(interp) != &eval_frame_shim) return;
  _PyInterpreterState_SetEvalFrameFunc(interp, previous_eval_frame);
  shim_in_chain = false;
}

}  // namespace

FrameHandler set_frame_handler(FrameHandler handler) { return std::exchange(frame_handler, handler); }

HookScope::HookScope() {
  if (this_thread.scope_depth++ == 0 && threads_in_scope++ == 0) install_hook();
}

HookScope::~HookScope() {
  if (--this_thread.scope_depth == 0 && --threads_in_scope == 0) uninstall_hook();
}

SuspendHook::SuspendHook() : previous_(std::exchange(this_thread.suspended, true)) {}

SuspendHook::~SuspendHook() { this_thread.suspended = previous_; }

UnsuspendHook::UnsuspendHook() : previous_(std::exchange(this_thread.suspended, false)) {}

UnsuspendHook::~UnsuspendHook() { this_thread.suspended = previous_; }

bool hook_installed() {
  return _PyInterpreterState_GetEvalFrameFunc(PyInterpreterState_Get()) == &eval_frame_shim;
}

}  // namespace fastcomp::cpython
