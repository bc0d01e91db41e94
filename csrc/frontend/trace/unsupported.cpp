#include "frontend/trace/unsupported.h"

namespace fastcomp::frontend {
namespace {

struct BreakInfo {
  const char* id;
  const char* headline;
  const char* explanation;  // why a graph cannot hold it
  const char* hint;         // what to change in user code
};

const BreakInfo& info(BreakCode c) {
  static const BreakInfo kTable[] = {
      {"GB001", "data-dependent branch",
       "the condition depends on a tensor's values, which are only known when the graph runs; the graph ends "
       "before the branch, CPython evaluates the condition, and capture resumes in the branch taken",
       "use torch.where / masking to keep both branches in the graph, or move the branch outside the compiled "
       "function"},
      {"GB002", "data-dependent Python value",
       "Tensor.item(), .tolist(), bool(tensor), int(tensor) and float(tensor) turn a tensor's values into Python "
       "objects, which a graph cannot produce in the middle; the graph ends there and the value is computed for real",
       "`Tensor.item()` needs the tensor's value: return the tensor and call `.item()` outside, or use `torch.where` "
       "(the same holds for .tolist(), bool(), int() and float() of a tensor)"},
      {"GB003", "call to an untraceable function",
       "fastcomp traces Python functions and torch ops; other callables (C extensions, unsupported builtins and "
       "methods) run in CPython between two graphs",
       "wrap other calls in a function decorated with @fastcomp.disable, or move them out of the compiled region"},
      {"GB004", "side effect fastcomp cannot replay",
       "printing, logging and changes to objects that live outside the function must happen in program order, so "
       "they run in CPython between two graphs",
       "move printing, logging and mutation of objects from outside the function out of the compiled region"},
      {"GB005", "unsupported bytecode",
       "the symbolic interpreter has no handler for this instruction, so CPython runs it",
       "rewrite the construct in plain Python (no async, match or class bodies)"},
      {"GB006", "call to a function marked fastcomp.disable",
       "fastcomp.disable'd functions always run eagerly; the graph ends before the call and resumes after it",
       "the function runs eagerly by request; remove fastcomp.disable to capture it"},
      {"GB007", "unsupported value",
       "the code uses an object of a kind the tracer does not model, so CPython handles it",
       "pass tensors, numbers, containers of them, or modules"},
      {"GB008", "torch could not compute output metadata",
       "fastcomp computes output shapes on meta tensors and torch had no meta implementation for this call",
       "this op has no meta implementation for these inputs; please report it"},
      {"GB009", "numpy call",
       "numpy computes on real arrays outside torch, so the call runs in CPython between two graphs",
       "use the torch equivalent of the numpy function"},
      {"GB999", "unsupported", "fastcomp cannot capture this code",
       "please report this to the fastcomp developers"},
  };
  return kTable[static_cast<int>(c)];
}

}  // namespace

const char* break_code_id(BreakCode c) { return info(c).id; }
const char* break_code_headline(BreakCode c) { return info(c).headline; }
const char* break_code_hint(BreakCode c) { return info(c).hint; }
const char* break_code_explanation(BreakCode c) { return info(c).explanation; }

}  // namespace fastcomp::frontend
