// Continuation code objects, made from a user's original code object with the bytecode encoder:
//  - a *break* code runs the region of a graph break in CPython (B): it receives the live stack values, the
//    locals and one resume function per exit of the region as arguments, rebuilds the stack (re-entering
//    `with torch.no_grad()` blocks), jumps to the region, and at each exit calls that exit's resume function
//    and returns its result;
//  - a *resume function* (`<qualname>.__resume_at_<offset>`) receives the stack and locals at an exit, rebuilds
//    the stack and jumps into the original code there; it is an ordinary frame, so the hook compiles it.
// Both keep the original code's free variables (in order; the caller passes its closure), its line table and
// its exception table, so tracebacks point at the user's lines and `with`/`try` handlers still run.
#pragma once
#include <Python.h>

#include <string>
#include <vector>

#include "cpython/pyref.h"
#include "frontend/resume/region.h"

namespace fastcomp::frontend {

struct ContinuationSpec {
  PyCodeObject* original = nullptr;  // borrowed; never itself generated code
  int entry = -1;                    // instruction index in `original` where execution continues
  std::vector<Slot> stack;           // the stack at `entry`, bottom first
  std::vector<bool> grad_inside;     // for each GradCtx slot of `stack`: grad mode inside that block
  std::vector<std::string> locals;   // names of the locals passed after the stack's Value slots
  const BreakRegion* region = nullptr;  // set: make a break code running this region (entry == region->first)
};

struct Continuation {
  PyRef code;
  std::vector<PyRef> exits;  // break code: the resume function code of each region exit, in argument order
};

/** The code object for `spec`, made once per distinct spec and reused while the original code lives (it keeps
    them, see code_info.h) or until fastcomp.reset(). Throws std::runtime_error (or BytecodeError) when it
    cannot be built. Needs the GIL. */
Continuation make_continuation(const ContinuationSpec& spec);

// What fastcomp knows about a code object it generated.
struct GeneratedCode {
  // The user's code it continues. Borrowed; null once that code died or fastcomp.reset() dropped this code:
  // such an orphan is never compiled and only runs in CPython.
  PyCodeObject* original = nullptr;
  int prefix = 0;                    // instructions before the original code's first one
  bool is_break_code = false;        // runs in CPython: never compiled
};

// Null for code fastcomp did not generate.
const GeneratedCode* generated_code(PyCodeObject* code);

}  // namespace fastcomp::frontend
