// Test entry points for the CPython layer, in fastcomp._C._testing: run a call under the eval hook with a
// handler that answers chosen frames from Python, open hook scopes, and use a co_extra slot of its own.
#include <Python.h>

#include <utility>

#include "bindings/bind.h"
#include "cpython/code_extra.h"
#include "cpython/eval_hook.h"
#include "cpython/pyref.h"

namespace fastcomp::bindings {
namespace {

using cpython::FrameOutcome;
using cpython::FrameView;
using cpython::SlotKind;

// Module attributes that live as long as the interpreter; borrowed here.
PyObject* unbound_sentinel = nullptr;      // _testing.UNBOUND: a slot with no value
PyObject* run_default_sentinel = nullptr;  // _testing.RUN_DEFAULT: a replacement's "evaluate it normally"

// What the test handler answers on this thread during one intercept_codes call (all borrowed; the call's
// arguments keep them alive). Thread-local because the handler runs on the thread whose frame it sees.
struct Interception {
  PyObject* codes;        // list of the code objects to answer
  PyObject* replacement;  // called with a description of each such frame
};
thread_local Interception* active_interception = nullptr;

const char* slot_kind_name(SlotKind kind) {
  switch (kind) {
    case SlotKind::Local: return "local";
    case SlotKind::Cell: return "cell";
    case SlotKind::Free: return "free";
    case SlotKind::CellArg: return "cell_arg";
    case SlotKind::Hidden: return "hidden";
  }
  return "?";
}

// `code` is borrowed.
bool is_intercepted(const Interception& interception, PyCodeObject* code) {
  PyObject* codes = interception.codes;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(codes); i++) {
    if (PyList_GET_ITEM(codes, i) == reinterpret_cast<PyObject*>(code)) return true;
  }
  return false;
}

// Returns a new reference to {"slots": [(name, kind, value, cell)], "code", "function", "globals",
// "builtins"} for the replacement, or nullptr with an exception set. An unbound value is UNBOUND; `cell` is
// the closure cell of a free variable and None otherwise.
PyObject* describe_frame(const FrameView& frame) {
  PyCodeObject* code = frame.code();
  int n = frame.nlocalsplus();
  PyRef slots = PyRef::steal(PyList_New(n));
  if (!slots) return nullptr;
  for (int i = 0; i < n; i++) {
    PyObject* value = frame.local(i);
    PyObject* cell = frame.free_cell(i);
    PyObject* slot = Py_BuildValue("(OsOO)", cpython::slot_name(code, i), slot_kind_name(frame.slot_kind(i)),
                                   value != nullptr ? value : unbound_sentinel, cell != nullptr ? cell : Py_None);
    if (slot == nullptr) return nullptr;
    PyList_SET_ITEM(slots.get(), i, slot);  // steals `slot`
  }
  return Py_BuildValue("{sOsOsOsOsO}", "slots", slots.get(), "code", code, "function", frame.function(),
                       "globals", frame.globals(), "builtins", frame.builtins());
}

FrameOutcome test_handler(const FrameView& frame) {
  Interception* interception = active_interception;
  if (interception == nullptr || !is_intercepted(*interception, frame.code())) return FrameOutcome::run_default();
  PyRef info = PyRef::steal(describe_frame(frame));
  if (!info) return FrameOutcome::error();
  PyRef result = PyRef::steal(PyObject_CallOneArg(interception->replacement, info.get()));
  if (!result) return FrameOutcome::error();
  if (result.get() == run_default_sentinel) return FrameOutcome::run_default();
  return FrameOutcome::result(result.release());
}

// Interceptions alive on all threads, and the frame handler before the first of them (GIL held). The handler
// is swapped once for all of them: swapped per interception, threads that end out of order would restore one
// another's handlers and leave test_handler installed for good (fastcomp then never compiles again).
int interceptions_alive = 0;
cpython::FrameHandler handler_before_interceptions = nullptr;

// Makes `interception` the active one on this thread, with test_handler installed, for its lifetime.
class ActiveInterception {
 public:
  explicit ActiveInterception(Interception* interception)
      : previous_(std::exchange(active_interception, interception)) {
    if (interceptions_alive++ == 0) handler_before_interceptions = cpython::set_frame_handler(&test_handler);
  }
  ~ActiveInterception() {
    if (--interceptions_alive == 0) cpython::set_frame_handler(handler_before_interceptions);
    active_interception = previous_;
  }
  ActiveInterception(const ActiveInterception&) = delete;
  ActiveInterception& operator=(const ActiveInterception&) = delete;

 private:
  Interception* previous_;
};

// Calls fn(*args, **kwargs); returns a new reference or throws error_already_set.
py::object call(const py::object& fn, const py::args& args, const py::kwargs& kwargs) {
  PyObject* result = PyObject_Call(fn.ptr(), args.ptr(), kwargs.ptr());
  if (result == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(result);
}

py::object intercept_codes(const py::list& codes, const py::object& replacement, const py::object& fn,
                           const py::args& args, const py::kwargs& kwargs) {
  Interception interception{codes.ptr(), replacement.ptr()};
  ActiveInterception active(&interception);
  cpython::HookScope scope;
  return call(fn, args, kwargs);
}

// The test slot's destructor: releases the reference code_extra_store handed to the slot (nullptr when the
// slot is empty).
void release_stored_object(void* stored) { Py_XDECREF(static_cast<PyObject*>(stored)); }

// The tests' own co_extra slot, requested on first use (fastcomp's slot belongs to its cache).
const cpython::CodeExtraSlot& test_slot() {
  static cpython::CodeExtraSlot slot;
  if (!slot.valid()) {
    slot = cpython::CodeExtraSlot::request(&release_stored_object);
    if (!slot.valid()) throw py::error_already_set();
  }
  return slot;
}

// Returns `code` (borrowed) as a code object, or throws TypeError.
PyCodeObject* as_code(const py::handle& code) {
  if (!PyCode_Check(code.ptr())) throw py::type_error("expected a code object");
  return reinterpret_cast<PyCodeObject*>(code.ptr());
}

}  // namespace

void bind_hook(py::module_& m) {
  m.attr("UNBOUND") = py::module_::import("builtins").attr("object")();
  m.attr("RUN_DEFAULT") = py::module_::import("builtins").attr("object")();
  unbound_sentinel = m.attr("UNBOUND").ptr();
  run_default_sentinel = m.attr("RUN_DEFAULT").ptr();

  m.def("intercept_codes", &intercept_codes,
        "intercept_codes(codes, replacement, fn, *args, **kwargs): calls fn(*args, **kwargs) inside a HookScope. "
        "Each frame whose code is in `codes` is offered to replacement(info) before it runs, where info is "
        "{'slots': [(name, kind, value, cell)], 'code', 'function', 'globals', 'builtins'}; its result "
        "replaces the frame's, an exception it raises is raised from the frame, and RUN_DEFAULT runs the frame.");
  m.def(
      "intercept_call",
      [](const py::object& fn, const py::object& replacement, const py::args& args, const py::kwargs& kwargs) {
        py::list codes;
        codes.append(fn.attr("__code__"));
        return intercept_codes(codes, replacement, fn, args, kwargs);
      },
      "intercept_call(fn, replacement, *args, **kwargs): intercept_codes([fn.__code__], replacement, fn, ...).");
  m.def(
      "in_hook_scope",
      [](const py::object& fn, const py::args& args, const py::kwargs& kwargs) {
        cpython::HookScope scope;
        return call(fn, args, kwargs);
      },
      "in_hook_scope(fn, *args, **kwargs): calls fn inside a HookScope, with whatever handler is set.");
  m.def(
      "call_suspended",
      [](const py::object& fn, const py::args& args, const py::kwargs& kwargs) {
        cpython::SuspendHook suspend;
        return call(fn, args, kwargs);
      },
      "call_suspended(fn, *args, **kwargs): calls fn with the hook suspended on this thread.");
  m.def("hook_installed", &cpython::hook_installed, "Whether fastcomp's eval-frame function is installed now.");
  m.def(
      "code_extra_store",
      [](const py::handle& code, const py::handle& obj) {
        PyCodeObject* target = as_code(code);
        const cpython::CodeExtraSlot& slot = test_slot();
        if (slot.get(target) == obj.ptr()) return;  // the slot already owns a reference to it
        // The slot takes over a new reference; None clears it.
        void* value = obj.is_none() ? nullptr : obj.inc_ref().ptr();
        if (!slot.set(target, value)) throw py::error_already_set();
      },
      "code_extra_store(code, obj): keeps obj alive on code's co_extra (a test slot); None clears it.");
  m.def(
      "code_extra_load",
      [](const py::handle& code) -> py::object {
        void* value = test_slot().get(as_code(code));
        if (value == nullptr) return py::none();
        return py::reinterpret_borrow<py::object>(static_cast<PyObject*>(value));
      },
      "code_extra_load(code): the object stored by code_extra_store, or None.");
}

}  // namespace fastcomp::bindings
