// Why a trace stopped. Unsupported = fastcomp cannot capture this code (later: a graph break with a stable
// code); UserCodeError = the user's code raised (or would raise) while tracing, so eager will raise the
// same error itself.
#pragma once
#include <Python.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace fastcomp::frontend {

// Stable reasons, one per kind of unsupported code. Codes never change once published.
enum class BreakCode {
  DataDependentBranch,  // GB001
  DataDependentValue,   // GB002: .item(), .tolist(), bool(tensor) ...
  UnsupportedCall,      // GB003: a Python/C function fastcomp cannot trace
  SideEffect,           // GB004: print, setattr on an input object, mutating a global ...
  UnsupportedOpcode,    // GB005
  DisabledFunction,     // GB006: a fastcomp.disable'd function
  UnsupportedValue,     // GB007: an object of a kind the tracer does not model
  MetaPropagation,      // GB008: torch could not compute output metadata on meta tensors
  NumpyCall,            // GB009
  Other,                // GB999
};
const char* break_code_id(BreakCode c);
const char* break_code_headline(BreakCode c);
const char* break_code_hint(BreakCode c);
const char* break_code_explanation(BreakCode c);

struct Unsupported : std::runtime_error {
  Unsupported(BreakCode c, const std::string& reason) : std::runtime_error(reason), code(c) {}
  BreakCode code;
  std::string user_loc;     // "file.py:12", filled by the interpreter
  std::string source_line;  // the user's source line, stripped
  std::vector<std::string> user_stack;  // "file.py:12" of each traced frame, outermost first
  int depth = 0;          // 0: raised by the traced frame's own code; n: inside a function it inlined, n deep
  int root_instr = -1;    // the traced frame's instruction that was executing (a call, for depth > 0)
  int root_visit = 0;     // how many times that instruction had started executing, this one included
  // The trace ran code for real that may have changed what it had read (the first call of a memoised function):
  // tracing again, with that code's effects done, gives a consistent trace.
  bool trace_again = false;
};

struct Value;

// The state at a graph break cannot be handed to CPython (a value the rest of the frame sees has no Python form):
// the frame runs in CPython.
struct NotResumable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An op under autocast whose casts cannot be made explicit: the trace starts again, keeping autocast in the graph.
// Not an Unsupported (nothing may catch it as a graph break on the way out).
struct KeepAutocast : std::exception {
  explicit KeepAutocast(std::string why) : reason(std::move(why)) {}
  const char* what() const noexcept override { return reason.c_str(); }
  std::string reason;  // "torch.einsum at model.py:12: autocast does more than cast its arguments before it (...)"
};

// The user's code raised during tracing; a Python exception may be set. Eager execution reproduces it.
// `type` is the exception class eager raises (borrowed: a builtin exception class or one the traced code holds),
// null when the tracer does not know it exactly: then no `except` clause of traced code may catch it, and the
// frame runs in CPython instead. `value` is the exception instance when traced code made it (`raise E(...)`).
struct UserCodeError : std::runtime_error {
  explicit UserCodeError(const std::string& what, PyObject* exc_type = nullptr)
      : std::runtime_error(what), type(exc_type) {}
  PyObject* type;
  std::shared_ptr<Value> value;
};

// Shorthands for the errors whose type the tracer knows.
inline UserCodeError attribute_error(const std::string& what) { return UserCodeError(what, PyExc_AttributeError); }
inline UserCodeError type_error(const std::string& what) { return UserCodeError(what, PyExc_TypeError); }
inline UserCodeError key_error(const std::string& what) { return UserCodeError(what, PyExc_KeyError); }
inline UserCodeError index_error(const std::string& what) { return UserCodeError(what, PyExc_IndexError); }
inline UserCodeError value_error(const std::string& what) { return UserCodeError(what, PyExc_ValueError); }
inline UserCodeError stop_iteration() { return UserCodeError("StopIteration", PyExc_StopIteration); }

// The class of the pending Python exception when it is one the trace can match in an `except` clause, or null.
inline PyObject* known_exception() {
  PyObject* type = PyErr_Occurred();
  for (PyObject* t : {PyExc_ValueError, PyExc_TypeError, PyExc_IndexError, PyExc_KeyError, PyExc_AttributeError,
                      PyExc_ZeroDivisionError, PyExc_OverflowError})
    if (type && PyErr_GivenExceptionMatches(type, t)) return t;
  return nullptr;
}

}  // namespace fastcomp::frontend
