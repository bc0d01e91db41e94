// The tracer's dynamic-shape state: which input dimensions are symbols, what each symbol was specialised to or
// unified with, the relations between sizes the trace relied on, and the decisions' log lines. At the end of a
// trace `finalize` writes the symbols into the graph (how to read them on a call) and into the guards (ranges,
// equalities, relations).
#pragma once
#include <Python.h>

#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "frontend/guards/guards.h"
#include "frontend/trace/dynamic_memory.h"
#include "graph/ir.h"
#include "graph/sym.h"

namespace fastcomp::frontend {

// fastcomp.compile(dynamic=...): None traces static first and makes a dimension symbolic once its size changes;
// True makes every input dimension symbolic from the start; False never does (mark_dynamic still applies).
enum class DynamicMode : int8_t { Automatic = -1, Static = 0, Dynamic = 1 };

using graph::SymShape;

struct SymbolInfo {
  std::string where;   // the size that defines it: "L['x'].size()[0]"
  int64_t hint = 0;    // its size while tracing
  int64_t min = 1, max = INT64_MAX;
  bool marked = false;     // by mark_dynamic: specialising it is worth a warning
  graph::Sym replacement;  // once specialised (a constant) or unified with another symbol
  graph::SymBinding binding;
};

// Strides of a dense tensor as products of its sizes, in the dimension order its strides imply; empty when the
// strides do not describe a dense layout (then they stay constants and are guarded as such).
std::vector<graph::Sym> dense_strides(const std::vector<graph::Sym>& sizes, const std::vector<int64_t>& size_hints,
                                      const std::vector<int64_t>& strides);

// While one lives (compile_frame holds one per frame), each dynamic-shape decision is logged once: a graph break
// traces the frame a second time, up to the break, and makes the same decisions again.
class DecisionLogScope {
 public:
  DecisionLogScope();
  ~DecisionLogScope();
  DecisionLogScope(const DecisionLogScope&) = delete;
  DecisionLogScope& operator=(const DecisionLogScope&) = delete;

 private:
  std::unordered_set<std::string> lines_;
  std::unordered_set<std::string>* previous_;
};

class ShapeEnv {
 public:
  // `memory`: what the traced code's compiles have seen (CodeInfo::dynamic), for automatic mode.
  ShapeEnv(DynamicMode mode, std::string code_key, DynamicMemory* memory = nullptr)
      : mode_(mode), code_key_(std::move(code_key)), memory_(memory) {}

  // Symbols (or -1 for static) of the dimensions of the tensor input `tensor` read from `source`, graph input
  // number `input`. Parameters are static unless marked (as in Dynamo).
  std::vector<int> input_dims(PyObject* tensor, const std::string& source, bool parameter,
                              const std::vector<int64_t>& sizes, int input);
  // Sizes and strides of an input whose dimensions are `dims`; empty when all are static.
  SymShape input_shape(const std::vector<int>& dims, const graph::TensorMeta& meta) const;

  bool active() const { return !symbols_.empty(); }
  int size() const { return static_cast<int>(symbols_.size()); }
  const SymbolInfo& symbol(int s) const { return symbols_[s]; }
  std::string describe(int s) const;  // "s0 = L['x'].size()[0]"

  // `e` with specialised and unified symbols replaced; what every use of an expression should see.
  graph::Sym resolve(const graph::Sym& e) const;
  SymShape resolve(const SymShape& shape) const;
  int64_t hint(const graph::Sym& e) const { return graph::sym_eval(resolve(e), hints()); }
  std::vector<int64_t> hints() const;
  // Symbols of `e` that are still free (neither specialised nor unified away).
  std::vector<int> free_symbols(const graph::Sym& e) const { return graph::sym_symbols(resolve(e)); }

  void specialize(int s, const std::string& why);  // s becomes its hint
  void specialize_all(const graph::Sym& e, const std::string& why);
  void unify(int keep, int drop, const std::string& why);  // `drop` is `keep` from now on
  // The trace holds for sizes of `s` in [n, ...] / [..., n] only: its range is narrowed (and guarded).
  void require_at_least(int s, int64_t n, const std::string& why);
  void require_at_most(int s, int64_t n, const std::string& why);
  // The trace took a branch on `a <cmp> b` being `holds`.
  void add_relation(const graph::Sym& a, SizeCmp cmp, const graph::Sym& b, bool holds, const std::string& why);

  // Writes symbol bindings into `graph` and symbol ranges, dynamic tensor guards and relations into `guards`,
  // resolving every expression; a trace whose symbols were all specialised ends fully static.
  void finalize(graph::Graph& graph, GuardSet& guards) const;

 private:
  int new_symbol(const std::string& source, int dim, int64_t hint, int input);

  DynamicMode mode_;
  std::string code_key_;
  DynamicMemory* memory_;
  std::vector<SymbolInfo> symbols_;
  std::vector<Guard> relations_;
  int replaced_ = 0;  // how many symbols have a replacement (resolve is the identity while 0)
};

}  // namespace fastcomp::frontend
