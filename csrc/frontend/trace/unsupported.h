// Why a trace stopped. Unsupported = fastcomp cannot capture this code (later: a graph break with a stable
// code); UserCodeError = the user's code raised (or would raise) while tracing, so eager will raise the
// same error itself.
#pragma once
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
};

// The user's code raised during tracing; a Python exception may be set. Eager execution reproduces it.
struct UserCodeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace fastcomp::frontend
