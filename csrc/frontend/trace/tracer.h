// The symbolic interpreter: executes a frame's bytecode over Values, inlining the Python functions and
// nn.Module.forward methods it calls, and records tensor operations into a graph plus the guards under which
// the recording is valid.
#pragma once
#include <Python.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cpython/frame.h"
#include "frontend/bytecode/instr.h"
#include "frontend/guards/guards.h"
#include "frontend/resume/break_state.h"
#include "frontend/trace/shape_env.h"
#include "frontend/trace/unsupported.h"
#include "frontend/trace/value.h"
#include "graph/ir.h"

namespace fastcomp::frontend {

struct TraceResult {
  graph::Graph graph;
  GuardSet guards;  // when the trace failed: the guards of the path taken up to the failure
  std::optional<Unsupported> failure;  // set when fastcomp cannot capture the code
  std::string user_error;              // set when the user's code raised while tracing
  // Set when the trace stopped at `stop`: the graph outputs a tuple of the values `break_state` names.
  std::optional<BreakState> break_state;
  bool ok() const { return !failure && user_error.empty(); }
};

/** Traces the frame's function from its first instruction to its return, or (with `stop`) up to just before
    that instruction, returning the live state there. Never throws for user code. */
TraceResult trace_frame(const cpython::FrameView& frame, const TraceStop* stop = nullptr,
                        DynamicMode dynamic = DynamicMode::Static);

// Objects the tracer treats specially, registered by the Python package at import
// (fastcomp.is_compiling, the fastcomp.disable wrapper type, ...).
void register_special_object(const std::string& role, PyObject* obj);

// One activation of a (root or inlined) function during the trace.
struct TraceFrame {
  PyRef code;
  std::shared_ptr<const InstrStream> instrs;
  std::vector<ValueRef> locals;      // localsplus slots; Cells for cell/free variables
  std::vector<int> lazy_sources;     // root frame: source of a slot not read yet, -1 otherwise
  std::vector<ValueRef> stack;
  PyObject* globals = nullptr;       // borrowed, kept alive by the function/code
  PyObject* builtins = nullptr;      // borrowed
  int globals_source = -1;           // -1: the root frame's G[...] sources; else a ConstObject source
  int pc = 0;
  int depth = 0;
  int line = -1;
  std::vector<ValueRef>* yields = nullptr;  // generator frames: where YIELD_VALUE collects values
};

// A torch call whose inputs have dynamic sizes, as sym_infer.cpp probes it: the same meta function at other sizes.
struct ProbeCall {
  const std::string& name;
  const std::vector<ValueRef>& args;
  const std::vector<std::pair<std::string, ValueRef>>& kwargs;
  PyObject* meta_args;    // borrowed: what the meta call got while tracing
  PyObject* meta_kwargs;  // borrowed
  std::function<PyRef(PyObject* args, PyObject* kwargs)> run;  // null with a Python error when it raises
  bool writes = false;  // an in-place op: each probe gets tensors of its own, as it may change their metadata
  // fastcomp's C++ meta functions computed the result (elementwise_meta.h, nn_meta.h, attention_meta.h): their
  // sizes follow the inputs' without clamping, so only size 1 needs checking.
  bool unclamped = false;
};

class Tracer {
 public:
  explicit Tracer(const cpython::FrameView& frame, const TraceStop* stop = nullptr,
                  DynamicMode dynamic = DynamicMode::Static);
  TraceResult run();
  TraceResult take_partial();  // after run() threw: what was recorded so far

  // ---- used by the handler families (ops_*.cpp) ----
  graph::Graph& graph() { return graph_; }
  GuardSet& guards() { return guards_; }
  TraceFrame& frame() { return *frames_.back(); }
  std::string user_loc() const;  // "file.py:12" of the innermost user frame

  ValueRef pop();
  std::vector<ValueRef> pop_n(size_t n);  // in push order
  void push(ValueRef v);
  ValueRef& top(size_t depth = 1);

  // wrap.cpp: a real object read from `source` becomes a Value, with guards.
  ValueRef wrap(PyObject* obj, int source);
  ValueRef wrap_untracked(PyObject* obj);  // an object with no source (e.g. a torch module attribute)
  void guard(GuardKind kind, int source, PyObject* expected);
  void guard_length(int source, int64_t n);
  void guard_same_object(int source, int other_source, bool same);
  ValueRef tensor_input(PyObject* tensor, int source);

  // tensor_ops.cpp: records `target(*args, **kwargs)` as a graph node using meta tensors for shapes.
  ValueRef call_torch(PyObject* target, const std::string& name, const std::vector<ValueRef>& args,
                      const std::vector<std::pair<std::string, ValueRef>>& kwargs);
  ValueRef tensor_attr(const ValueRef& tensor, PyObject* name);
  ValueRef set_grad_mode(bool enabled);  // records and applies a grad-mode switch
  bool grad_enabled() const { return grad_enabled_; }
  void note_requires_grad(bool requires_grad);  // a tensor that requires grad makes grad mode matter
  ValueRef call_module(const ValueRef& module, std::vector<ValueRef> args,
                       std::vector<std::pair<std::string, ValueRef>> kwargs);

  // ops_load_store.cpp
  ValueRef load_global(PyObject* name);
  ValueRef get_attr(const ValueRef& obj, PyObject* name);
  void store_attr(const ValueRef& obj, PyObject* name, const ValueRef& value);

  // ops_call.cpp
  ValueRef call(const ValueRef& fn, std::vector<ValueRef> args, std::vector<std::pair<std::string, ValueRef>> kwargs);
  ValueRef inline_function(PyObject* func_or_code, const Value* fn_value, std::vector<ValueRef> args,
                           std::vector<std::pair<std::string, ValueRef>> kwargs);
  ValueRef call_builtin(PyObject* fn, std::vector<ValueRef>& args, std::vector<std::pair<std::string, ValueRef>>& kwargs);

  // ops_build.cpp
  ValueRef subscript(const ValueRef& obj, const ValueRef& key);
  std::vector<ValueRef> unpack(const ValueRef& seq, const char* what);  // iterate a value to its elements

  // sym_ops.cpp / sym_infer.cpp: dynamic shapes
  ShapeEnv& shapes() { return shapes_; }
  graph::Sym sym_of(const ValueRef& v) const;  // SymInt or int constant as an expression; null otherwise
  ValueRef symint(const graph::Sym& e);         // a SymInt (or Const) Value for `e`
  ValueRef sym_size(const ValueRef& tensor, int64_t dim);
  ValueRef sym_shape(const ValueRef& tensor);   // tuple of sizes
  std::optional<ValueRef> size_query(const std::string& name, const std::vector<ValueRef>& args,
                                     const std::vector<std::pair<std::string, ValueRef>>& kwargs);
  std::optional<ValueRef> sym_binary(int kind, const ValueRef& a, const ValueRef& b);
  std::optional<ValueRef> sym_compare(int cmp, const ValueRef& a, const ValueRef& b);
  bool sym_truthiness(const ValueRef& v);
  PyRef specialize_symint(const ValueRef& v);  // its value, with the sizes it depends on specialised
  std::vector<SymShape> infer_shapes(const ProbeCall& call, PyObject* meta_out);  // per tensor output
  PyRef probe_meta(const ValueRef& v, PyObject* at_hint, const std::vector<int64_t>& point, bool fresh = false);

  // ops_arith.cpp
  ValueRef binary_op(int nb_kind, const ValueRef& a, const ValueRef& b);
  ValueRef compare(int cmp, const ValueRef& a, const ValueRef& b);
  ValueRef unary(Op op, const ValueRef& a);
  bool truthiness(const ValueRef& v);  // a condition's value; throws Unsupported for tensors

  // Converts a Value to the real Python object it stands for when it is fully known at trace time.
  // Returns null if it is not (tensors, or containers of them).
  PyRef as_python_constant(const ValueRef& v);

  ValueRef run_frame(TraceFrame& f);  // runs until RETURN_VALUE; returns the value

 private:
  void step(TraceFrame& f, const Instr& in, bool* returned, ValueRef* result);
  void realize_local(TraceFrame& f, int slot);
  void add_global_state_guards(bool grad_mode_matters);
  TraceResult capture_break(TraceFrame& root);  // at the stop: live values become graph outputs / sources

 public:
  graph::Arg to_output_arg(const ValueRef& v);

 private:

  TraceResult finish(TraceResult r);  // resolves symbols into the graph and guards

  cpython::FrameView root_;
  graph::Graph graph_;
  GuardSet guards_;
  ShapeEnv shapes_;
  std::vector<TraceFrame*> frames_;
  bool grad_enabled_at_start_ = true;
  bool grad_enabled_ = true;
  std::unordered_map<int, ValueRef> by_source_;       // each source is wrapped once
  std::unordered_map<PyObject*, ValueRef> tensor_by_object_;  // aliasing between sources
  bool module_hook_guards_added_ = false;
  bool grad_mode_read_ = false;  // grad mode influenced the trace (see add_global_state_guards)
  TraceStop stop_;                 // instr -1: trace to the end
  std::vector<int> root_visits_;   // executions started of each root instruction
  friend struct TracerAccess;
};

// Decoded instructions of a code object, decoded once and kept while the code object lives (code_info.h).
// The stream's `code` is empty.
std::shared_ptr<const InstrStream> decoded(PyCodeObject* code);

// Objects whose identity, not their contents, is what a trace depends on (modules, classes, functions): wrap()
// guards these by identity and everything else it cannot model by type only.
bool guard_by_identity(PyObject* o);

// Special objects (see register_special_object); borrowed, null when not registered.
PyObject* special_object(const char* role);

}  // namespace fastcomp::frontend
