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
#include <unordered_set>
#include <vector>

#include "cpython/frame.h"
#include "frontend/bytecode/instr.h"
#include "frontend/guards/guards.h"
#include "frontend/resume/break_state.h"
#include "frontend/trace/shape_env.h"
#include "frontend/trace/side_effects.h"
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
  // Changes to objects from outside the trace, applied after the graph runs. When there are any and the trace ran
  // to the end, the graph outputs (result, new values...) and the result is item 0; at a break the new values
  // follow the live values in the output tuple.
  std::vector<SideEffect> side_effects;
  bool ok() const { return !failure && user_error.empty(); }
};

/** Traces the frame's function from its first instruction to its return, or (with `stop`) up to just before
    that instruction, returning the live state there. Never throws for user code. Ops under autocast become explicit
    casts where that is exactly what autocast does, else the whole trace is made again keeping autocast. */
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
  bool generator = false;  // a generator's frame: YIELD_VALUE suspends it (run_frame returns the value)
  bool suspended = false;  // set while a generator's frame waits at a yield
  std::vector<ValueRef> handling;  // exceptions being handled (the innermost last), for bare `raise`
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
                  DynamicMode dynamic = DynamicMode::Static, const std::string* keep_autocast_because = nullptr);
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
  ValueRef wrap_call_result(PyObject* obj);  // what a call the trace made for real returned (new containers stay new)
  ValueRef dict_key(PyObject* key);          // a key of a dict read from the frame
  void guard(GuardKind kind, int source, PyObject* expected);
  void guard_length(int source, int64_t n);
  void guard_same_object(int source, int other_source, bool same);
  ValueRef tensor_input(PyObject* tensor, int source);

  // tensor_ops.cpp: records `target(*args, **kwargs)` as a graph node using meta tensors for shapes.
  ValueRef call_torch(PyObject* target, const std::string& name, const std::vector<ValueRef>& args,
                      const std::vector<std::pair<std::string, ValueRef>>& kwargs);
  ValueRef tensor_grad(const ValueRef& tensor, PyObject* name);  // t.grad
  ValueRef tensor_attr(const ValueRef& tensor, PyObject* name);
  ValueRef set_grad_mode(bool enabled);  // records and applies a grad-mode switch
  // autocast.cpp: `with torch.autocast(...)` blocks and ops traced under autocast.
  ValueRef construct_autocast(PyTypeObject* cls, const std::vector<ValueRef>& args,
                              const std::vector<std::pair<std::string, ValueRef>>& kwargs);
  ValueRef enter_autocast(const ValueRef& ctx);  // BEFORE_WITH on an autocast object: returns its __exit__
  ValueRef leave_autocast(const Value& exit);    // that __exit__ called
  // An op traced under autocast as its explicit casts and the op on the cast tensors (see fastcomp/_autocast.py):
  // its result, or nothing where autocast changes nothing and the op is traced as it is. Throws KeepAutocast where
  // autocast cannot be made explicit for it; a trace that keeps autocast answers null.
  std::optional<ValueRef> call_with_explicit_casts(PyObject* target, const std::string& name,
                                                   const std::vector<ValueRef>& args,
                                                   const std::vector<std::pair<std::string, ValueRef>>& kwargs,
                                                   PyObject* meta_args, PyObject* meta_kwargs, PyObject* device);
  // `meta_out` (the meta call's result, None where it raised) as the op gives it on `device` under the autocast state
  // now; null where autocast does not change its dtypes, no autocast is on, or the trace makes its casts explicit;
  // null with the Python error set where the op raises under autocast.
  PyRef autocast_meta(PyObject* target, PyObject* meta_args, PyObject* meta_kwargs, PyObject* device,
                      PyObject* meta_out);
  // The trace asked torch about autocast: whether it is on (covered, while it is off for every device, by the guard
  // on torch._C._is_any_autocast_enabled()) or, `dtypes`, its dtypes or cache (which need the state guard).
  void note_autocast_read(bool dtypes) { autocast_read_ |= dtypes; }
  bool grad_enabled() const { return grad_enabled_; }
  void note_requires_grad(bool requires_grad);  // a tensor that requires grad makes grad mode matter
  // module_call.cpp: an nn.Module called, with its forward hooks and pre-hooks.
  ValueRef call_module(const ValueRef& module, std::vector<ValueRef> args,
                       std::vector<std::pair<std::string, ValueRef>> kwargs);
  struct ModuleHook {
    ValueRef fn;
    bool takes_kwargs;  // registered with with_kwargs=True
  };
  // The hooks of a module in `dict_name` (e.g. "_forward_hooks"), in calling order, with guards that they stay.
  std::vector<ModuleHook> module_hooks(const ValueRef& module, const char* dict_name, const char* with_kwargs_name);

  // ops_load_store.cpp
  ValueRef load_global(PyObject* name);
  ValueRef module_attr(const ValueRef& module, PyObject* name);  // an attribute of a Python module
  ValueRef module_member(const ValueRef& module, PyObject* name);  // nn.Module parameters, buffers, submodules
  static bool module_getattr_is_default(PyTypeObject* type, PyObject* getattr_fn);

  // objects.cpp: Python's attribute protocol
  ValueRef get_attr(const ValueRef& obj, PyObject* name);
  void store_attr(const ValueRef& obj, PyObject* name, const ValueRef& value);  // null value: delete
  ValueRef getattribute(const ValueRef& obj, PyObject* name);         // type(obj).__getattribute__(obj, name)
  ValueRef object_getattribute(const ValueRef& obj, PyObject* name);  // object.__getattribute__
  void object_setattr(const ValueRef& obj, PyObject* name, const ValueRef& value);  // object.__setattr__
  ValueRef type_getattribute(const ValueRef& cls, PyObject* name);    // type.__getattribute__
  ValueRef super_attr(const ValueRef& super, PyObject* name);
  ValueRef instance_dict(const ValueRef& obj);  // obj.__dict__, live
  ValueRef bind_descriptor(PyObject* descr, const ValueRef& instance, PyTypeObject* owner, PyTypeObject* found_in,
                           PyObject* name);
  void note_class_read(PyTypeObject* type);  // the trace depends on the class's namespace: guard its version

  // side_effects.cpp: changes to objects from outside the trace, replayed after the graph
  void note_mutation(const ValueRef& v);
  // A warnings.warn or Logger method call: recorded to run after the graph; true (and *result None) when deferred.
  bool defer_if_logging(PyObject* fn, const ValueRef& self, const std::string& name, const std::vector<ValueRef>& args,
                        const std::vector<std::pair<std::string, ValueRef>>& kwargs, ValueRef* result);

  // ops_call.cpp
  ValueRef call(const ValueRef& fn, std::vector<ValueRef> args, std::vector<std::pair<std::string, ValueRef>> kwargs);
  ValueRef inline_function(PyObject* func_or_code, const Value* fn_value, std::vector<ValueRef> args,
                           std::vector<std::pair<std::string, ValueRef>> kwargs);
  ValueRef call_builtin(PyObject* fn, std::vector<ValueRef>& args, std::vector<std::pair<std::string, ValueRef>>& kwargs);
  ValueRef call_operator(PyObject* fn, std::vector<ValueRef>& args);  // operator.add(a, b)...; null if not one
  ValueRef make_super(const std::vector<ValueRef>& args);
  ValueRef identity_of(const ValueRef& v);  // id(v)

  // frozen.cpp
  ValueRef wrap_frozen(PyObject* o);  // a value computed for real from constants (Object with flag set)
  ValueRef call_pure(PyObject* fn, const std::string& name, const std::vector<ValueRef>& args,
                     const std::vector<std::pair<std::string, ValueRef>>& kwargs);
  ValueRef frozen_op(const char* what, const ValueRef& v, const std::function<PyObject*(PyObject*)>& op);
  ValueRef seed_rng(PyObject* fn, const std::string& name, const std::vector<ValueRef>& args,
                    const std::vector<std::pair<std::string, ValueRef>>& kwargs);  // null: not an RNG seeding call  // super() / super(cls, obj) in the current frame
  ValueRef call_method(const ValueRef& method, std::vector<ValueRef> args, std::vector<std::pair<std::string, ValueRef>> kwargs);
  ValueRef call_object(const ValueRef& fn, std::vector<ValueRef> args, std::vector<std::pair<std::string, ValueRef>> kwargs);
  // A method implemented in C (method or slot descriptor `descr`) called on `self`: modelled where its meaning is
  // known (object's, containers', constants'), else Unsupported.
  ValueRef call_c_method(PyObject* descr, const ValueRef& self, std::vector<ValueRef> args,
                         std::vector<std::pair<std::string, ValueRef>> kwargs);

  // containers.cpp
  ValueRef container_method(const ValueRef& self, const std::string& name, std::vector<ValueRef>& args,
                            std::vector<std::pair<std::string, ValueRef>>& kwargs);

  // construct.cpp: calling a class
  ValueRef construct(const ValueRef& cls, std::vector<ValueRef> args, std::vector<std::pair<std::string, ValueRef>> kwargs,
                     bool metaclass_call_done = false);
  ValueRef new_instance(PyTypeObject* cls);  // object.__new__(cls)
  // object.__reduce_ex__ / __reduce__ / __getstate__ of a plain instance (how copy.deepcopy and pickle take it apart).
  ValueRef object_reduce(const ValueRef& self, const std::string& name, const std::vector<ValueRef>& args);
  ValueRef construct_stateless_module(PyTypeObject* cls, const std::vector<ValueRef>& args,
                                      const std::vector<std::pair<std::string, ValueRef>>& kwargs);
  ValueRef make_namedtuple(PyTypeObject* cls, const std::vector<ValueRef>& args,
                           const std::vector<std::pair<std::string, ValueRef>>& kwargs);
  // A builtin class's method called on the class (object.__new__(cls), tuple.__new__(cls, it)); null if not modelled.
  ValueRef call_type_method(PyObject* type, PyObject* fn, std::vector<ValueRef>& args,
                            std::vector<std::pair<std::string, ValueRef>>& kwargs);

  // ops_build.cpp
  ValueRef subscript(const ValueRef& obj, const ValueRef& key);
  void store_subscript(const ValueRef& obj, const ValueRef& key, const ValueRef& value);  // null value: delete
  bool module_container_items(const ValueRef& module, std::vector<ValueRef>* out);  // ModuleList/Sequential/Dict
  ValueRef raw_getitem(const ValueRef& obj, const ValueRef& key);  // dict.__getitem__/list's, no Python override
  void raw_setitem(const ValueRef& obj, const ValueRef& key, const ValueRef& value);  // null value: delete
  ValueRef dict_contents(const ValueRef& obj);  // a dict subclass instance from the frame, as a Dict Value
  void set_add(const ValueRef& set, const ValueRef& item);  // set.add (mutation-tracked)
  ValueRef new_set(bool frozen = false);                     // an empty set made in the trace
  void set_update(const ValueRef& set, const ValueRef& items);  // set.update(items), as CPython orders it
  std::vector<ValueRef> set_in_order(const Value& set);      // the items in CPython's iteration order
  std::vector<ValueRef> members(const ValueRef& v);          // a set's items in any order; other iterables' in order

  // iterators.cpp: the iterator protocol, lazily and in program order
  ValueRef make_iter(const ValueRef& v, const char* what);  // iter(v)
  void check_strict_zip_ended(const Value& zip, size_t ended);  // raises zip(strict=True)'s ValueError
  ValueRef iter_next(const ValueRef& it);                   // next(it); null when exhausted
  std::vector<ValueRef> unpack(const ValueRef& seq, const char* what);  // iterate a value to its elements
  ValueRef start_generator(std::shared_ptr<TraceFrame> frame);  // a generator function's call: not run yet

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

  // exceptions.cpp
  bool handle_exception(TraceFrame& f, const UserCodeError& e);  // jumps to f's handler for it; false if none
  // Whether an error of the instruction being traced would be caught by a `try` of a traced frame (so an op that
  // raises at some sizes only must not be in a graph that other sizes reuse).
  bool inside_catching_try() const;
  [[noreturn]] void raise_value(const ValueRef& exc);            // `raise exc`
  void step_exception(TraceFrame& f, const Instr& in);

  // ops_arith.cpp
  ValueRef binary_op(int nb_kind, const ValueRef& a, const ValueRef& b);
  ValueRef compare(int cmp, const ValueRef& a, const ValueRef& b);
  bool contains(const ValueRef& container, const ValueRef& needle);  // `needle in container`
  ValueRef unary(Op op, const ValueRef& a);
  bool truthiness(const ValueRef& v);  // a condition's value; throws Unsupported for tensors

  // Converts a Value to the real Python object it stands for when it is fully known at trace time.
  // Returns null if it is not (tensors, or containers of them).
  PyRef as_python_constant(const ValueRef& v);

  ValueRef run_frame(TraceFrame& f);  // runs until RETURN_VALUE; returns the value

 private:
  void step(TraceFrame& f, const Instr& in, bool* returned, ValueRef* result);
 public:
  void realize_local(TraceFrame& f, int slot);
 private:
  void add_global_state_guards(bool grad_mode_matters);
  void start_autocast();   // autocast.cpp: the state at the trace's start, and its guard
  void unwind_autocast();  // leaves the blocks still open (the trace failed inside them), for real only
  TraceResult capture_break(TraceFrame& root);  // at the stop: live values become graph outputs / sources

 public:
  // outputs.cpp: Values as graph outputs. begin_outputs() first, with every Value about to be converted.
  void begin_outputs(const std::vector<ValueRef>& roots);
  graph::Arg to_output_arg(const ValueRef& v);
  graph::NodeId object_input(int source);  // an object from the frame, passed through the graph unchanged

 private:
  graph::Arg convert_output(const ValueRef& v);
  graph::Arg dict_output(const Value& d);
  graph::Arg iterator_output(const ValueRef& it);
  graph::Arg rebuild_node(PyObject* target, const char* name, std::vector<graph::Arg> args);
  std::vector<SideEffect> plan_side_effects(graph::Arg* outputs);  // appends the new values to `outputs`

  TraceResult finish(TraceResult r);  // resolves symbols into the graph and guards
  ValueRef class_value(PyObject* value, PyTypeObject* owner, PyObject* name);
  ValueRef real_attr(const ValueRef& obj, PyObject* name);
  ValueRef instance_attr(const ValueRef& obj, PyObject* name);
  ValueRef function_attr(const ValueRef& fn, PyObject* name);

  cpython::FrameView root_;
  graph::Graph graph_;
  GuardSet guards_;
  ShapeEnv shapes_;
  std::vector<TraceFrame*> frames_;
  bool grad_enabled_at_start_ = true;
  bool grad_enabled_ = true;
  std::unordered_map<int, ValueRef> by_source_;       // each source is wrapped once
  std::unordered_map<PyObject*, ValueRef> tensor_by_object_;  // aliasing between sources
  std::unordered_map<PyObject*, ValueRef> object_by_identity_;  // mutable objects from the frame, one Value each
  std::unordered_set<PyTypeObject*> classes_read_;   // classes whose version is guarded
  std::vector<ValueRef> mutated_;                    // objects from the frame the trace changed, in that order
  struct DeferredCall {
    PyRef fn;
    std::vector<ValueRef> args;
    std::vector<std::pair<std::string, ValueRef>> kwargs;
  };
  std::vector<DeferredCall> deferred_calls_;         // see defer_if_logging
  std::unordered_map<int, graph::NodeId> object_inputs_;       // source -> Input node of an object passed through
  std::unordered_map<const Value*, int> output_refs_;          // how often each mutable Value is output
  std::unordered_map<const Value*, graph::Arg> output_memo_;   // Values already converted
  std::unordered_set<const Value*> building_;                  // Values being converted (cycle check)
  std::unordered_map<const Value*, ValueRef> dict_contents_;   // see dict_contents()
  std::unordered_map<const Value*, long> made_up_ids_;         // see identity_of()
  std::vector<ValueRef> made_up_id_values_;
  bool module_hook_guards_added_ = false;
  bool grad_mode_read_ = false;  // grad mode influenced the trace (see add_global_state_guards)
  bool started_under_saved_tensor_hooks_ = false;  // the frame runs in CPython (torch.utils.checkpoint)
  bool autocast_at_start_ = false;  // autocast is on for a device when the frame starts
  bool autocast_read_ = false;      // the trace entered an autocast block or asked autocast's dtypes
  std::optional<Guard> autocast_guard_;  // fastcomp._autocast.state() as at the start
  std::vector<PyRef> autocast_open_;     // the state outside each open autocast block, innermost last
  bool keep_autocast_ = false;           // the graph runs under autocast (else with explicit casts, without it)
  int explicit_cast_depth_ = 0;          // > 0 while tracing an op's explicit casts and the op on them
  TraceStop stop_;                 // instr -1: trace to the end
  std::vector<int> root_visits_;   // executions started of each root instruction
  friend struct TracerAccess;
};

// Decoded instructions of a code object, decoded once and kept while the code object lives (code_info.h).
// The stream's `code` is empty.
std::shared_ptr<const InstrStream> decoded(PyCodeObject* code);

PyObject* partial_type();  // functools.partial (borrowed)

// Library functions computed for real at trace time on constant arguments (see frozen.cpp).
bool is_pure_library_call(const std::string& qualified_name);
// A Python int as a constant expression; null for anything else or an int past int64 (sym_ops.cpp).
graph::Sym int_sym(PyObject* o);
// How CPython's errors name a callable: module.qualname for functions (those the trace made too); "" when unknown.
std::string callable_name(const Value& fn);
// torch.autocast or another of torch's autocast classes (torch.cuda.amp.autocast); not a subclass from elsewhere,
// which may enter and leave otherwise (autocast.cpp).
bool is_autocast_class(PyTypeObject* type);
inline bool is_frozen(const Value& v) { return v.is(VKind::Object) && v.flag; }

// torch's "is this being compiled?" functions (torch.compiler.is_compiling and its aliases): True while tracing.
bool is_compiling_flag(const std::string& qualified_name);

// Immutable values that the trace may bake in as constants (guarded by value): numbers, strings, None, dtypes,
// devices, torch.Size, slices and tuples/frozensets of such.
bool is_constant(PyObject* o);

// The Python type of what `v` stands for (borrowed), null for NULL and iterators.
PyTypeObject* python_type(const Value& v);

// Objects whose identity, not their contents, is what a trace depends on (modules, classes, functions): wrap()
// guards these by identity and everything else it cannot model by type only.
bool guard_by_identity(PyObject* o);

// Special objects (see register_special_object); borrowed, null when not registered.
PyObject* special_object(const char* role);

}  // namespace fastcomp::frontend
