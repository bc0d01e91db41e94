#include "frontend/trace/unsupported.h"

namespace fastcomp::frontend {
namespace {

struct BreakInfo {
  const char* id;
  const char* headline;
  const char* hint;
};

const BreakInfo& info(BreakCode c) {
  static const BreakInfo kTable[] = {
      {"GB001", "data-dependent branch",
       "the condition depends on a tensor's values; use torch.where / masking, or move the branch outside the "
       "compiled function"},
      {"GB002", "data-dependent Python value",
       "Tensor.item(), .tolist(), bool(tensor) and int(tensor) need the tensor's values; keep the value a tensor "
       "(e.g. torch.where) or call it outside the compiled function"},
      {"GB003", "call to an untraceable function",
       "fastcomp traces Python functions and torch ops; wrap other calls in a function decorated with "
       "@fastcomp.disable, or move them out of the compiled region"},
      {"GB004", "side effect fastcomp cannot replay",
       "move printing, logging and mutation of objects from outside the function out of the compiled region"},
      {"GB005", "unsupported bytecode", "rewrite the construct in plain Python (no async, match or class bodies)"},
      {"GB006", "call to a function marked fastcomp.disable",
       "the function runs eagerly by request; this ends the graph"},
      {"GB007", "unsupported value", "pass tensors, numbers, containers of them, or modules"},
      {"GB008", "torch could not compute output metadata",
       "this op has no meta implementation for these inputs; please report it"},
      {"GB009", "numpy call", "use the torch equivalent of the numpy function"},
      {"GB999", "unsupported", "please report this to the fastcomp developers"},
  };
  return kTable[static_cast<int>(c)];
}

}  // namespace

const char* break_code_id(BreakCode c) { return info(c).id; }
const char* break_code_headline(BreakCode c) { return info(c).headline; }
const char* break_code_hint(BreakCode c) { return info(c).hint; }

}  // namespace fastcomp::frontend
