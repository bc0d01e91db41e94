// What the tracer hands over at a graph break: where the frame stopped and how to rebuild every value the rest
// of the frame can see (stack slots and bound locals) from the prefix graph's outputs and the frame's inputs.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cpython/pyref.h"

namespace fastcomp::frontend {

// One value live at a break.
struct LiveValue {
  enum class Kind : uint8_t {
    Null,     // the NULL CPython keeps below a callable
    Output,   // item `index` of the prefix graph's output tuple (tensors, constants, containers made by the trace)
    Source,   // the frame's input at guard source `index` (keeps identity: modules, lists passed in, input tensors)
    GradCtx,  // the __exit__ of a `with torch.no_grad()/enable_grad()` block; `grad_inside` is the mode inside it
  };
  Kind kind = Kind::Null;
  int index = -1;
  bool grad_inside = false;
  PyRef attr;  // Output/Source: when set, the value is getattr(that value, attr) (a bound method on the stack)
};

struct BreakState {
  int instr = -1;                // instruction index (in the traced code) that CPython runs first
  std::vector<LiveValue> stack;  // bottom first, as before that instruction
  std::vector<std::pair<int, LiveValue>> locals;  // bound plain locals: localsplus slot, value
};

// Where the first trace stopped, so a second trace can stop just before the same instruction.
struct TraceStop {
  int instr = -1;  // root-frame instruction index
  int visit = 1;   // stop at its visit-th execution (loops execute an instruction more than once)
};

}  // namespace fastcomp::frontend
