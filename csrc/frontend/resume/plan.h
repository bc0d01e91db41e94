// A graph break turned into something to run: the prefix graph (traced up to the break), the code that runs
// the break in CPython and continues in resume functions, and how to build that code's arguments.
#pragma once
#include <Python.h>

#include <optional>
#include <string>
#include <vector>

#include "cpython/frame.h"
#include "cpython/pyref.h"
#include "frontend/resume/break_state.h"
#include "frontend/trace/tracer.h"

namespace fastcomp::frontend {

struct ResumePlan {
  PyRef break_code;              // see continuation.h; called with `args` then one function per exit code
  std::vector<PyRef> exit_codes; // the resume functions' code objects, one per exit of the break's region
  std::vector<LiveValue> args;   // Output / Source values, in argument order
  int instr = -1;                // the break's instruction index in the original code
  std::string runs_rest_in_cpython;  // set when CPython runs the rest of the frame after the break: why

  // The function objects last made for these codes (same globals and closure: reused on the next call).
  struct Functions {
    PyRef globals, closure;  // closure may be null
    PyRef break_fn;
    std::vector<PyRef> exit_fns;
  };
  mutable Functions functions;  // guarded by the GIL
};

/** Given the failure of a full trace of `frame`, traces again up to the failing instruction of the frame's own
    code and plans how to continue there. On success replaces `trace` with the prefix trace (its graph outputs
    the live values) and returns the plan; otherwise returns nullopt with the reason in `why`. Never throws for
    user code. */
std::optional<ResumePlan> plan_graph_break(const cpython::FrameView& frame, const Unsupported& failure,
                                           TraceResult& trace, std::string* why,
                                           DynamicMode dynamic = DynamicMode::Static);

}  // namespace fastcomp::frontend
