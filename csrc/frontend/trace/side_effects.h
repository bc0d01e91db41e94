// Changes a trace makes to objects that exist outside it: items of lists and dicts from the frame, attributes of
// its objects, closure cells. While tracing they change the Values only; the graph then outputs the new contents,
// and after it runs these effects write them into the real objects, so the code after the call sees what eager
// would have left there. Effects apply in the order the trace first changed each object; all of them read the
// graph's outputs, never each other, so the order cannot change what is written.
#pragma once
#include <Python.h>

#include <string>
#include <vector>

#include "cpython/pyref.h"

namespace fastcomp::frontend {

struct SideEffect {
  enum class Kind : uint8_t {
    ReplaceList,  // target[:] = value
    ReplaceDict,  // target.clear(); target.update(value)  (keeps the object and the new order)
    SetAttr,      // object.__setattr__(target, name, value), bypassing overrides the trace already ran
    DelAttr,      // object.__delattr__(target, name)
    SetCell,      // target.cell_contents = value
    Call,         // fn(*args, **dict(zip(kwnames, kwargs))): a warning or log call, deferred until after the graph
  };
  Kind kind = Kind::SetAttr;
  int target = -1;  // guard source of the object changed
  PyRef name;       // SetAttr / DelAttr
  int value = -1;   // index of the new value in the graph's output tuple; -1 for DelAttr
  PyRef fn;                // Call
  std::vector<int> args;   // Call: output indices of the positional then the keyword arguments
  PyRef kwnames;           // Call: tuple of keyword names, or null
};

std::string describe(const SideEffect& e, const std::string& target_name);

// Writes the effects. `outs`: the graph's output tuple; `sources`: the guard program's source values of this call.
// Returns false with a Python error set when one fails (as it would have failed in eager).
bool apply_side_effects(const std::vector<SideEffect>& effects, PyObject* outs, const std::vector<PyObject*>& sources);

}  // namespace fastcomp::frontend
