// The interpreter loop: frame set-up, instruction dispatch, and the trace entry point. Handlers with more
// than a few lines live in ops_*.cpp, grouped by family.
#include "frontend/trace/tracer.h"

#include "cpython/gil_once.h"
#include "support/config.h"
#include "support/log.h"
#include "support/pystr.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <set>
#include <tuple>
#include <unordered_map>

#include "frontend/bytecode/decode.h"
#include "frontend/code_info.h"
#include "frontend/resume/continuation.h"
#include "frontend/trace/dynamic_memory.h"
#include "frontend/trace/torch_refs.h"

namespace fastcomp::frontend {
namespace {

constexpr int kMaxInlineDepth = 48;

PyObject* code_attr(PyObject* code, const char* name) {  // new reference
  return PyObject_GetAttrString(code, name);
}

// Never destroyed: its references must not be released after the interpreter has shut down.
std::unordered_map<std::string, PyRef>& specials() {
  static auto* table = new std::unordered_map<std::string, PyRef>();
  return *table;
}

}  // namespace

void register_special_object(const std::string& role, PyObject* obj) { specials()[role] = PyRef::borrow(obj); }

PyObject* special_object(const char* role) {
  auto it = specials().find(role);
  return it == specials().end() ? nullptr : it->second.get();
}

std::shared_ptr<const InstrStream> decoded(PyCodeObject* code) {
  CodeInfo& info = code_info(code);
  if (!info.decoded) {
    InstrStream stream = decode(code);
    stream.code = PyRef();  // the code owns the stream (see CodeInfo::decoded)
    info.decoded = std::make_shared<const InstrStream>(std::move(stream));
  }
  return info.decoded;
}

namespace {
// fastcomp._autograd_state.saved_tensor_hooks_active (borrowed; null where it is missing).
PyObject* saved_tensor_hooks_probe() {
  static cpython::GilOnce<PyObject> probe;
  return probe.get([] { return cpython::import_attr("fastcomp._autograd_state", "saved_tensor_hooks_active"); });
}

bool saved_tensor_hooks_active() {
  PyObject* probe = saved_tensor_hooks_probe();
  PyRef active = probe ? PyRef::steal(PyObject_CallNoArgs(probe)) : PyRef();
  if (!active) PyErr_Clear();
  return active.get() == Py_True;
}

// Thrown when the root frame reaches TraceStop; caught in Tracer::run, which still has the root frame.
struct StopAtBreak {};
}  // namespace

Tracer::Tracer(const cpython::FrameView& frame, const TraceStop* stop, DynamicMode dynamic,
               const std::string* keep_autocast_because)
    : root_(frame),
      shapes_(dynamic,
              dynamic == DynamicMode::Automatic ? code_identity(reinterpret_cast<PyObject*>(frame.code())) : std::string(),
              dynamic == DynamicMode::Automatic ? &code_info(frame.code()).dynamic : nullptr) {
  if (stop) stop_ = *stop;
  keep_autocast_ = keep_autocast_because != nullptr;
  if (keep_autocast_) graph_.autocast_kept_because = *keep_autocast_because;
}

ValueRef Tracer::pop() {
  auto& s = frame().stack;
  if (s.empty()) throw Unsupported(BreakCode::Other, "fastcomp internal error: value stack underflow");
  ValueRef v = std::move(s.back());
  s.pop_back();
  return v;
}

std::vector<ValueRef> Tracer::pop_n(size_t n) {
  auto& s = frame().stack;
  if (s.size() < n) throw Unsupported(BreakCode::Other, "fastcomp internal error: value stack underflow");
  std::vector<ValueRef> out(s.end() - n, s.end());
  s.resize(s.size() - n);
  return out;
}

void Tracer::push(ValueRef v) { frame().stack.push_back(std::move(v)); }

ValueRef& Tracer::top(size_t depth) {
  auto& s = frame().stack;
  if (s.size() < depth) throw Unsupported(BreakCode::Other, "fastcomp internal error: value stack underflow");
  return s[s.size() - depth];
}

std::string Tracer::user_loc() const {
  if (frames_.empty()) return "";
  const TraceFrame& f = *frames_.back();
  PyRef filename = PyRef::steal(code_attr(f.code.get(), "co_filename"));
  return fmt::format("{}:{}", utf8(filename.get()), f.line);
}

void Tracer::realize_local(TraceFrame& f, int slot) {
  if (f.lazy_sources.empty() || f.lazy_sources[slot] < 0) return;
  int source = f.lazy_sources[slot];
  f.lazy_sources[slot] = -1;
  PyObject* value = root_.local(slot);
  if (!value) return;  // unbound
  if (PyCell_Check(value) && root_.slot_kind(slot) == cpython::SlotKind::Local && generated_code(root_.code())) {
    // A cell variable of the original function, handed over at a graph break as the cell itself (closures made
    // before the break share it): the code reads it with LOAD_DEREF, and a store is written back into it.
    PyObject* content = PyCell_GET(value);
    int content_source = guards_.sources.cell_contents(source);
    ValueRef cell = make_cell(content ? wrap(content, content_source) : nullptr);
    cell->source = source;
    f.locals[slot] = cell;
    object_by_identity_.emplace(value, cell);  // functions made before the break close over this same cell
    return;
  }
  ValueRef v = wrap(value, source);
  if (root_.slot_kind(slot) == cpython::SlotKind::Free) {
    v = make_cell(v);
    // A cell owned outside the trace: storing into it is a side effect, written back into the cell itself.
    v->source = guards_.sources.closure_cell(slot, utf8(cpython::slot_name(root_.code(), slot)));
    if (PyObject* cell = root_.free_cell(slot)) object_by_identity_.emplace(cell, v);  // shared with inlined closures
  }
  f.locals[slot] = v;
}

TraceResult Tracer::run() {
  PyCodeObject* code = root_.code();
  TraceFrame f;
  f.code = PyRef::borrow(reinterpret_cast<PyObject*>(code));
  f.instrs = decoded(code);
  f.globals = root_.globals();
  f.builtins = root_.builtins();
  int n = root_.nlocalsplus();
  f.locals.assign(n, nullptr);
  f.lazy_sources.assign(n, -1);
  for (int i = 0; i < n; ++i) {
    std::string name = utf8(cpython::slot_name(code, i));
    switch (root_.slot_kind(i)) {
      case cpython::SlotKind::Free: f.lazy_sources[i] = guards_.sources.closure(i, name); break;
      case cpython::SlotKind::Local:
      case cpython::SlotKind::CellArg:
        if (root_.local(i)) f.lazy_sources[i] = guards_.sources.local(i, name);
        break;
      default: break;
    }
  }

  grad_enabled_at_start_ = grad_enabled_ = torch_refs().grad_enabled();
  graph_.grad_enabled_at_start = grad_enabled_at_start_;
  start_autocast();
  started_under_saved_tensor_hooks_ = grad_enabled_at_start_ && saved_tensor_hooks_active();
  if (started_under_saved_tensor_hooks_)
    throw Unsupported(BreakCode::UnsupportedValue,
                      "saved-tensor hooks are active (torch.utils.checkpoint without reentrant, save_on_cpu): the frame "
                      "runs in CPython, as checkpoint's recomputation in backward will, so that both save the same tensors");
  root_visits_.assign(f.instrs->instrs.size(), 0);
  ValueRef result;
  bool stopped = false;
  try {
    result = run_frame(f);
  } catch (StopAtBreak&) {
    stopped = true;
  } catch (...) {
    if (grad_enabled_ != grad_enabled_at_start_) set_grad_mode(grad_enabled_at_start_);
    unwind_autocast();
    throw;
  }
  if (stopped) {
    try {
      return capture_break(f);
    } catch (...) {
      if (grad_enabled_ != grad_enabled_at_start_) set_grad_mode(grad_enabled_at_start_);
      unwind_autocast();
      throw;
    }
  }
  if (!autocast_open_.empty()) {  // the frame returned inside a block it entered by hand (ctx.__enter__())
    unwind_autocast();
    throw Unsupported(BreakCode::UnsupportedValue, "the frame returns inside a torch.autocast block");
  }
  std::vector<ValueRef> roots{result};
  for (const ValueRef& m : mutated_) roots.push_back(m);
  for (const DeferredCall& c : deferred_calls_) {
    roots.insert(roots.end(), c.args.begin(), c.args.end());
    for (const auto& kv : c.kwargs) roots.push_back(kv.second);
  }
  begin_outputs(roots);
  graph::Arg output = to_output_arg(result);
  graph::Arg with_effects;
  with_effects.kind = graph::Arg::Kind::Tuple;
  with_effects.items.push_back(std::move(output));
  std::vector<SideEffect> effects = plan_side_effects(&with_effects);
  graph_.output = effects.empty() ? std::move(with_effects.items[0]) : std::move(with_effects);
  add_global_state_guards(grad_mode_read_ || grad_enabled_ != grad_enabled_at_start_);
  TraceResult r = finish(TraceResult{std::move(graph_), std::move(guards_)});
  r.side_effects = std::move(effects);
  return r;
}

TraceResult Tracer::finish(TraceResult r) {
  shapes_.finalize(r.graph, r.guards);
  // The same check reached along several paths (an attribute looked up on every call of a method, a state query
  // in every layer) is made once; global state by the function that reads it (the first read's value holds at entry).
  std::vector<Guard>& guards = r.guards.guards;
  std::set<std::tuple<int, int, const PyObject*, int64_t>> seen;
  guards.erase(std::remove_if(guards.begin(), guards.end(),
                              [&](const Guard& g) {
                                if (g.kind == GuardKind::TensorMatch || g.kind == GuardKind::SizeRelation) return false;
                                const PyObject* key = g.kind == GuardKind::GlobalState ? g.call.get() : g.expected.get();
                                return !seen.emplace(static_cast<int>(g.kind), g.source, key, g.length).second;
                              }),
               guards.end());
  return r;
}

// Global state that changes what torch computes. Grad mode only matters when gradients can flow (a tensor
// requires grad) or the code looked at it; the others are always checked.
void Tracer::add_global_state_guards(bool grad_mode_matters) {
  const auto& T = torch_refs();
  auto add = [&](PyObject* fn, const char* what, StateProbe probe) {
    Guard g;
    if (make_global_state_guard(fn, what, probe, &g)) guards_.guards.push_back(std::move(g));
  };
  if (grad_mode_matters) add(T.is_grad_enabled.get(), "torch.is_grad_enabled()", StateProbe::GradMode);
  // Saved-tensor hooks matter where the graph records gradients (a tensor requires grad), or they sent the frame to
  // CPython.
  if ((started_under_saved_tensor_hooks_ || (grad_enabled_at_start_ && grad_mode_read_)) && saved_tensor_hooks_probe())
    add(saved_tensor_hooks_probe(), "fastcomp._autograd_state.saved_tensor_hooks_active()", StateProbe::None);
  add(T.get_default_dtype.get(), "torch.get_default_dtype()", StateProbe::DefaultDtype);
  add(T.is_any_autocast_enabled.get(), "torch._C._is_any_autocast_enabled()", StateProbe::LocalDispatchKeys);
  // Under autocast, or with a block of it, the dtypes of the trace depend on the devices' autocast dtypes too.
  if (autocast_guard_ && (autocast_at_start_ || autocast_read_)) guards_.guards.push_back(*autocast_guard_);
}

void Tracer::note_requires_grad(bool requires_grad) { grad_mode_read_ |= requires_grad; }

ValueRef Tracer::run_frame(TraceFrame& f) {
  if (static_cast<int>(frames_.size()) >= kMaxInlineDepth)
    throw Unsupported(BreakCode::UnsupportedCall, "call depth exceeds fastcomp's inlining limit (recursion?)");
  f.depth = static_cast<int>(frames_.size());
  frames_.push_back(&f);
  struct Pop {
    std::vector<TraceFrame*>& frames;
    ~Pop() { frames.pop_back(); }
  } pop_guard{frames_};
  const auto& instrs = f.instrs->instrs;
  bool returned = false;
  ValueRef result;
  while (!returned) {
    if (f.pc < 0 || f.pc >= static_cast<int>(instrs.size()))
      throw Unsupported(BreakCode::Other, "fastcomp internal error: instruction pointer out of range");
    if (f.depth == 0) {
      int& visits = root_visits_[f.pc];
      if (f.pc == stop_.instr && visits + 1 == stop_.visit) throw StopAtBreak{};
      ++visits;
    }
    const Instr& in = instrs[f.pc++];
    if (in.line >= 0) f.line = in.line;
    try {
      try {
        step(f, in, &returned, &result);
      } catch (UserCodeError& e) {
        if (!handle_exception(f, e)) throw;
      }
    } catch (Unsupported& u) {
      if (u.user_loc.empty()) {  // the innermost user frame, while it is still on the stack
        u.user_loc = user_loc();
        u.depth = f.depth;
        for (const TraceFrame* t : frames_) {
          PyRef filename = PyRef::steal(code_attr(t->code.get(), "co_filename"));
          u.user_stack.push_back(fmt::format("{}:{}", utf8(filename.get()), t->line));
        }
      }
      if (f.depth == 0) {
        u.root_instr = f.pc - 1;
        u.root_visit = root_visits_[f.pc - 1];
      }
      throw;
    }
  }
  return result;
}

void Tracer::step(TraceFrame& f, const Instr& in, bool* returned, ValueRef* result) {
  PyCodeObject* code = reinterpret_cast<PyCodeObject*>(f.code.get());
  auto name_at = [&](int i) { return PyTuple_GET_ITEM(code->co_names, i); };
  switch (in.op) {
    case Op::NOP:
    case Op::RESUME:
    case Op::COPY_FREE_VARS:  // free-variable slots are filled when the frame is created
      return;
    case Op::POP_TOP: pop(); return;
    case Op::END_FOR: pop_n(2); return;
    case Op::PUSH_NULL: push(make_null()); return;
    case Op::COPY: push(top(in.arg)); return;
    case Op::SWAP: std::swap(top(1), top(in.arg)); return;
    case Op::LOAD_CONST: {
      PyObject* c = PyTuple_GET_ITEM(code->co_consts, in.arg);
      // Classes appear as constants only in code fastcomp generated (resume functions re-entering `with`).
      push(PyType_Check(c) ? make_object(PyRef::borrow(c), -1) : make_const_borrowed(c));
      return;
    }
    case Op::RETURN_CONST:
      *returned = true;
      *result = make_const_borrowed(PyTuple_GET_ITEM(code->co_consts, in.arg));
      return;
    case Op::RETURN_VALUE:
      *returned = true;
      *result = pop();
      return;
    case Op::LOAD_FAST:
    case Op::LOAD_FAST_AND_CLEAR: {
      realize_local(f, in.arg);
      ValueRef v = f.locals[in.arg];
      if (in.op == Op::LOAD_FAST_AND_CLEAR) {
        f.locals[in.arg] = nullptr;
        push(v ? v : make_null());
        return;
      }
      if (!v)
        throw UserCodeError(fmt::format("local variable '{}' referenced before assignment",
                                        utf8(cpython::slot_name(code, in.arg))));
      push(v);
      return;
    }
    case Op::STORE_FAST: {
      ValueRef v = pop();
      if (!f.lazy_sources.empty()) f.lazy_sources[in.arg] = -1;
      f.locals[in.arg] = v->is(VKind::Null) ? nullptr : v;
      return;
    }
    case Op::DELETE_FAST:
      if (!f.lazy_sources.empty()) f.lazy_sources[in.arg] = -1;
      f.locals[in.arg] = nullptr;
      return;
    case Op::MAKE_CELL:
      realize_local(f, in.arg);
      f.locals[in.arg] = make_cell(f.locals[in.arg]);
      return;
    case Op::LOAD_CLOSURE:
      realize_local(f, in.arg);
      push(f.locals[in.arg]);
      return;
    case Op::LOAD_DEREF: {
      realize_local(f, in.arg);
      ValueRef cell = f.locals[in.arg];
      if (!cell || !cell->is(VKind::Cell) || !cell->items[0])
        throw UserCodeError(fmt::format("free variable '{}' referenced before assignment",
                                        utf8(cpython::slot_name(code, in.arg))));
      push(cell->items[0]);
      return;
    }
    case Op::STORE_DEREF: {
      realize_local(f, in.arg);
      ValueRef cell = f.locals[in.arg];
      ValueRef v = pop();
      if (!cell || !cell->is(VKind::Cell)) {
        f.locals[in.arg] = make_cell(v);
        return;
      }
      cell->items[0] = v;
      note_mutation(cell);  // a cell of the frame's closure: written back after the graph
      return;
    }
    case Op::LOAD_GLOBAL:
      if (in.flags & Instr::kPushNull) push(make_null());
      push(load_global(name_at(in.arg)));
      return;
    case Op::LOAD_ATTR: {
      ValueRef obj = pop();
      ValueRef v = get_attr(obj, name_at(in.arg));
      if (in.flags & Instr::kMethod) push(make_null());
      push(v);
      return;
    }
    case Op::LOAD_SUPER_ATTR: {
      ValueRef self = pop();
      ValueRef cls = pop();
      ValueRef global_super = pop();
      ValueRef sup = call(global_super, {cls, self}, {});
      ValueRef v = get_attr(sup, name_at(in.arg));
      if (in.flags & Instr::kMethod) push(make_null());
      push(v);
      return;
    }
    case Op::STORE_ATTR: {
      ValueRef obj = pop();
      ValueRef value = pop();
      store_attr(obj, name_at(in.arg), value);
      return;
    }
    case Op::DELETE_ATTR: store_attr(pop(), name_at(in.arg), nullptr); return;
    case Op::BINARY_OP: {
      ValueRef b = pop();
      ValueRef a = pop();
      push(binary_op(in.arg, a, b));
      return;
    }
    case Op::UNARY_NEGATIVE:
    case Op::UNARY_POSITIVE:
    case Op::UNARY_NOT:
    case Op::UNARY_INVERT: push(unary(in.op, pop())); return;
    case Op::COMPARE_OP: {
      ValueRef b = pop();
      ValueRef a = pop();
      push(compare(in.arg, a, b));
      return;
    }
    case Op::IS_OP:
    case Op::CONTAINS_OP: {
      ValueRef b = pop();
      ValueRef a = pop();
      push(compare(in.op == Op::IS_OP ? (in.arg ? -2 : -1) : (in.arg ? -4 : -3), a, b));
      return;
    }
    case Op::BINARY_SUBSCR: {
      ValueRef key = pop();
      ValueRef obj = pop();
      push(subscript(obj, key));
      return;
    }
    case Op::BINARY_SLICE: {
      ValueRef stop = pop();
      ValueRef start = pop();
      ValueRef obj = pop();
      ValueRef s = std::make_shared<Value>();
      s->kind = VKind::Slice;
      s->items = {start, stop, make_const_borrowed(Py_None)};
      push(subscript(obj, s));
      return;
    }
    case Op::JUMP: f.pc = in.target; return;
    case Op::POP_JUMP_IF_FALSE:
    case Op::POP_JUMP_IF_TRUE: {
      bool t = truthiness(pop());
      if (t == (in.op == Op::POP_JUMP_IF_TRUE)) f.pc = in.target;
      return;
    }
    case Op::POP_JUMP_IF_NONE:
    case Op::POP_JUMP_IF_NOT_NONE: {
      ValueRef v = pop();
      bool is_none = v->is(VKind::Const) && v->obj.get() == Py_None;
      if (is_none == (in.op == Op::POP_JUMP_IF_NONE)) f.pc = in.target;
      return;
    }
    case Op::JUMP_IF_FALSE_OR_POP:
    case Op::JUMP_IF_TRUE_OR_POP: {
      bool t = truthiness(top());
      if (t == (in.op == Op::JUMP_IF_TRUE_OR_POP)) f.pc = in.target;
      else pop();
      return;
    }
    case Op::GET_ITER: push(make_iter(pop(), "iterate over")); return;
    case Op::FOR_ITER: {
      if (ValueRef v = iter_next(top())) {
        push(std::move(v));
      } else {
        pop();
        f.pc = in.target;
      }
      return;
    }
    case Op::GET_LEN: {
      std::vector<ValueRef> items = top()->is(VKind::Set) ? top()->items : unpack(top(), "take len() of");
      push(make_const(PyRef::steal(PyLong_FromSsize_t(items.size()))));
      return;
    }
    case Op::BEFORE_WITH: {
      ValueRef ctx = pop();
      // An existing torch.no_grad() or enable_grad() object (what the @torch.no_grad() decorator enters on each
      // call): stateless until entered, so it is the grad-mode context it makes, not calls of its methods.
      // (The decorator's clone() runs while tracing, so the object is a constant.)
      if ((ctx->is(VKind::Object) || ctx->is(VKind::Const)) && ctx->obj) {
        PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(ctx->obj.get()));
        if (torch_refs().is_grad_mode_class(type)) ctx = make_grad_ctx(type == torch_refs().enable_grad.get());
      }
      if ((ctx->is(VKind::Object) || ctx->is(VKind::Const)) && ctx->obj && is_autocast_class(Py_TYPE(ctx->obj.get()))) {
        push(enter_autocast(ctx));
        push(ctx);  // autocast's __enter__ returns the object itself
        return;
      }
      if (!ctx->is(VKind::GradCtx)) {
        // Any other context manager: its class's __exit__, bound, stays on the stack; __enter__ runs now.
        PyTypeObject* type = python_type(*ctx);
        if (!type) throw Unsupported(BreakCode::UnsupportedValue, "`with` on " + describe(*ctx));
        note_class_read(type);
        PyRef enter_name = PyRef::steal(PyUnicode_InternFromString("__enter__"));
        PyRef exit_name = PyRef::steal(PyUnicode_InternFromString("__exit__"));
        PyObject* enter = _PyType_Lookup(type, enter_name.get());
        PyObject* exit = _PyType_Lookup(type, exit_name.get());
        if (!enter || !exit) throw type_error(fmt::format("'{}' object does not support the context manager protocol", type->tp_name));
        push(bind_descriptor(exit, ctx, type, type, exit_name.get()));
        push(call(bind_descriptor(enter, ctx, type, type, enter_name.get()), {}, {}));
        return;
      }
      ValueRef exit = std::make_shared<Value>();
      exit->kind = VKind::CtxExit;
      exit->flag = grad_enabled_;
      push(exit);
      set_grad_mode(ctx->flag);
      push(make_const_borrowed(Py_None));
      return;
    }
    case Op::RAISE_VARARGS:
    case Op::RERAISE:
    case Op::PUSH_EXC_INFO:
    case Op::POP_EXCEPT:
    case Op::CHECK_EXC_MATCH:
    case Op::WITH_EXCEPT_START: step_exception(f, in); return;
    case Op::LOAD_ASSERTION_ERROR: push(make_object(PyRef::borrow(PyExc_AssertionError), -1)); return;
    case Op::RETURN_GENERATOR: push(make_const_borrowed(Py_None)); return;
    case Op::GET_YIELD_FROM_ITER: push(make_iter(pop(), "yield from")); return;
    case Op::SEND: {
      // `yield from it`: the receiver's next item is yielded; once it is exhausted the loop ends with its return
      // value (None: the tracer's generators return nothing it keeps). Where an END_SEND follows (3.12) it pops
      // the receiver; otherwise SEND does.
      if (!(top()->is(VKind::Const) && top()->obj.get() == Py_None))
        throw Unsupported(BreakCode::UnsupportedOpcode, "a value sent into a generator");
      pop();
      if (ValueRef v = iter_next(top())) {
        push(std::move(v));
        return;
      }
      if (f.instrs->instrs.at(in.target).op != Op::END_SEND) pop();
      push(make_const_borrowed(Py_None));
      f.pc = in.target;
      return;
    }
    case Op::END_SEND: {
      ValueRef v = pop();
      pop();
      push(std::move(v));
      return;
    }
    case Op::YIELD_VALUE:
      // The generator pauses here; iter_next resumes it with the value `yield` evaluates to on the stack.
      if (!f.generator) throw Unsupported(BreakCode::UnsupportedOpcode, "yield outside a generator being traced");
      *result = pop();
      f.suspended = true;
      *returned = true;
      return;
    case Op::IMPORT_NAME: {
      ValueRef fromlist = pop();
      ValueRef level = pop();
      PyRef module = PyRef::steal(PyImport_ImportModuleLevelObject(
          name_at(in.arg), f.globals, nullptr, fromlist->obj.get(), PyLong_AsLong(level->obj.get())));
      if (!module) throw UserCodeError("import failed");
      push(wrap_untracked(module.get()));
      return;
    }
    case Op::IMPORT_FROM: push(get_attr(top(), name_at(in.arg))); return;
    default: break;
  }
  // Builders, calls and function creation: ops_build.cpp / ops_call.cpp.
  extern void step_build_or_call(Tracer & t, TraceFrame & f, const Instr& in);
  step_build_or_call(*this, f, in);
}

TraceResult Tracer::take_partial() {
  // The decisions made so far depended on the global state too.
  add_global_state_guards(true);
  return finish(TraceResult{std::move(graph_), std::move(guards_), {}, {}});
}

namespace {

// `keep_autocast_because` null: ops under autocast become explicit casts; else the graph keeps autocast, for that reason.
TraceResult trace_frame_as(const cpython::FrameView& frame, const TraceStop* stop, DynamicMode dynamic,
                           const std::string* keep_autocast_because) {
  Tracer tracer(frame, stop, dynamic, keep_autocast_because);
  try {
    return tracer.run();
  } catch (NotResumable& e) {
    PyErr_Clear();
    TraceResult r = tracer.take_partial();
    r.failure = Unsupported(BreakCode::Other, e.what());
    return r;
  } catch (Unsupported& u) {
    PyErr_Clear();
    TraceResult r = tracer.take_partial();
    r.failure = u;
    return r;
  } catch (UserCodeError& e) {
    PyErr_Clear();
    TraceResult r = tracer.take_partial();
    r.user_error = e.what();
    return r;
  }
}

}  // namespace

TraceResult trace_frame(const cpython::FrameView& frame, const TraceStop* stop, DynamicMode dynamic) {
  if (config().explicit_autocast == "off") {
    static const std::string off = "fastcomp.config.explicit_autocast is 'off'";
    return trace_frame_as(frame, stop, dynamic, &off);
  }
  try {
    return trace_frame_as(frame, stop, dynamic, nullptr);
  } catch (const KeepAutocast& keep) {
    PyErr_Clear();
    FC_LOG(compile, info, "fastcomp: the graph keeps autocast, its ops run as torch calls under it: {}", keep.reason);
    return trace_frame_as(frame, stop, dynamic, &keep.reason);
  }
}

}  // namespace fastcomp::frontend
