#include "dispatch.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <unordered_set>
#include <vector>

#include "frontend/resume/continuation.h"
#include "frontend/trace/tracer.h"
#include "frontend/trace/torch_refs.h"
#include "runtime/cache.h"
#include "support/config.h"
#include "support/log.h"
#include "support/pystr.h"

namespace fastcomp {
namespace {

thread_local DispatchContext* tl_active = nullptr;
PyRef* g_observer = new PyRef();  // never destroyed: released references must not outlive Python

std::string where(PyCodeObject* code) {
  return fmt::format("{} ({}:{})", utf8(code->co_qualname), utf8(code->co_filename), code->co_firstlineno);
}

std::string source_line(const std::string& loc) {
  auto colon = loc.rfind(':');
  if (colon == std::string::npos) return "";
  PyRef linecache = PyRef::steal(PyImport_ImportModule("linecache"));
  PyRef line = PyRef::steal(PyObject_CallMethod(linecache.get(), "getline", "si", loc.substr(0, colon).c_str(),
                                                std::atoi(loc.c_str() + colon + 1)));
  if (!line) {
    PyErr_Clear();
    return "";
  }
  std::string s = utf8(line.get());
  size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t\r\n");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// Raises the Python exception class registered under `role` (fastcomp.errors), or RuntimeError.
void raise(const char* role, const std::string& message) {
  PyObject* cls = frontend::special_object(role);
  PyErr_SetString(cls ? cls : PyExc_RuntimeError, message.c_str());
}

void warn(const std::string& message) {
  if (PyErr_WarnEx(PyExc_UserWarning, message.c_str(), 1) < 0) PyErr_Clear();
}

// "  File "a.py", line 12\n    <source line>" for each "a.py:12" of `stack`, as Python's tracebacks print them.
std::string traceback_lines(const std::vector<std::string>& stack) {
  std::string text;
  for (const std::string& loc : stack) {
    auto colon = loc.rfind(':');
    if (loc.empty() || colon == std::string::npos) continue;
    text += fmt::format("\n  File \"{}\", line {}", loc.substr(0, colon), loc.substr(colon + 1));
    std::string line = source_line(loc);
    if (!line.empty()) text += "\n    " + line;
  }
  // A value that cannot leave the compiled code is found where it hands values back, at no one instruction.
  return text.empty() ? "\n  (where the compiled code hands its values back: its return, a store, or a graph break)" : text;
}

// The break's code, headline and reason, the user's stack from the compiled function down to it, and the hint.
std::string failure_text(const frontend::Unsupported& u) {
  const std::vector<std::string> stack = u.user_stack.empty() ? std::vector<std::string>{u.user_loc} : u.user_stack;
  return fmt::format("{} {}: {}\nUser code traceback (outermost first):{}\n  hint: {}", frontend::break_code_id(u.code),
                     frontend::break_code_headline(u.code), u.what(), traceback_lines(stack),
                     frontend::break_code_hint(u.code));
}

// The tracer reports its own inconsistencies (a bug in fastcomp, not in the user's code) as breaks whose reason
// starts so; with fastcomp.config.suppress_errors off they raise fastcomp.InternalError.
bool is_internal(const frontend::Unsupported& u) {
  return std::string_view(u.what()).rfind("fastcomp internal error", 0) == 0;
}

// Whether code in `filename` is fastcomp's, torch's or the standard library's (never compiled on its own).
bool in_skipped_dir(const std::string& filename) {
  if (filename.empty() || filename.rfind("<frozen ", 0) == 0) return true;  // importlib's frozen modules
  for (const std::string& dir : config().skip_dirs)
    if (filename.compare(0, dir.size(), dir) == 0) {
      // The standard library's directory also holds site-packages; only torch and fastcomp are skipped there.
      std::string_view rest(filename.c_str() + dir.size());
      if (rest.find("-packages/") == std::string_view::npos) return true;
    }
  return false;
}

// A break is counted by the frame whose own code holds it; a caller that inlined that code breaks too (before
// the call), but the callee's frame is compiled on its own and counts it, unless its code is never compiled
// on its own.
bool counts_break(const frontend::Unsupported& u) {
  if (u.depth == 0 || u.user_stack.empty()) return true;
  const std::string& inner = u.user_stack.back();
  return in_skipped_dir(inner.substr(0, inner.rfind(':')));
}

// "file:line" of the user frames running between the compiled function and this frame (when this frame is
// called from a compiled function's CPython part), outermost first; empty for the compiled function itself.
std::vector<std::string> calling_user_frames(const DispatchContext& ctx, PyCodeObject* code) {
  // A resume function continues its original code's frame: the frames calling it are that frame's callers.
  const frontend::GeneratedCode* self = frontend::generated_code(code);
  PyCodeObject* frame_code = self ? self->original : code;
  if (frame_code == ctx.target) return {};
  std::vector<std::string> out;
  PyFrameObject* f = PyEval_GetFrame();  // borrowed: the caller of the frame being compiled
  for (int n = 0; f && n < 64; ++n) {
    PyRef c = PyRef::steal(reinterpret_cast<PyObject*>(PyFrame_GetCode(f)));
    auto* co = reinterpret_cast<PyCodeObject*>(c.get());
    const frontend::GeneratedCode* g = frontend::generated_code(co);
    PyCodeObject* user = g ? g->original : co;
    // The break code that calls a resume function is the same user frame at its previous break, not a caller.
    const bool calls_this_resume = n == 0 && self && g && g->is_break_code && user == frame_code;
    if (!calls_this_resume && (g || !in_skipped_dir(utf8(co->co_filename))))
      out.push_back(fmt::format("{}:{}", utf8(co->co_filename), PyFrame_GetLineNumber(f)));
    if (user == ctx.target) {
      std::reverse(out.begin(), out.end());
      return out;
    }
    f = PyFrame_GetBack(f);  // new reference on 3.11+, but the chain is kept alive by the running frames
    Py_XDECREF(f);
  }
  return {};  // not called from the compiled function's frames as far as we can tell: no prefix
}

// The graph_breaks log, in Dynamo's shape, once per user location.
void log_break(PyCodeObject* code, const frontend::Unsupported& u, const std::string& not_resumed,
               const std::string& rest_in_cpython) {
  if (!log::enabled(log::Topic::graph_breaks)) return;
  static auto* logged = new std::unordered_set<std::string>();
  if (!logged->insert(u.user_loc + "|" + u.what()).second) return;
  std::string text = fmt::format("Graph break in user code at {}\nGraph Break Reason: {} {}: {}\n  Explanation: {}\n  Hint: {}",
                                 u.user_loc, frontend::break_code_id(u.code), frontend::break_code_headline(u.code),
                                 u.what(), frontend::break_code_explanation(u.code), frontend::break_code_hint(u.code));
  if (!not_resumed.empty()) text += fmt::format("\n  {} runs eagerly: {}", where(code), not_resumed);
  if (!rest_in_cpython.empty())
    text += fmt::format("\n  the graph before the break runs, then CPython runs the rest of {} ({})", where(code), rest_in_cpython);
  text += "\nUser code traceback:" + traceback_lines(u.user_stack);
  log::emit(log::Topic::graph_breaks, log::Level::info, text);
}

void notify_observer(PyCodeObject* code, const CompiledFrame& c, const std::vector<std::string>& recompile_reasons) {
  if (!*g_observer || g_observer->get() == Py_None) return;
  PyRef d = PyRef::steal(PyDict_New());
  auto set = [&](const char* k, PyObject* v) {
    if (v) PyDict_SetItemString(d.get(), k, v);
    Py_XDECREF(v);
  };
  set("name", PyUnicode_FromString(utf8(code->co_qualname).c_str()));
  set("filename", PyUnicode_FromString(utf8(code->co_filename).c_str()));
  set("firstlineno", PyLong_FromLong(code->co_firstlineno));
  const char* status = c.resume ? "break" : c.executable ? "compiled" : c.failure ? "unsupported" : "user_error";
  set("status", PyUnicode_FromString(status));
  set("graphs", PyLong_FromLong(c.executable && !c.ops.empty() ? 1 : 0));
  set("breaks", PyLong_FromLong(c.failure && counts_break(*c.failure) ? 1 : 0));
  set("resumed", PyBool_FromLong(c.resume != nullptr));
  set("graph", PyUnicode_FromString(c.graph_text.c_str()));
  PyObject* ops = PyList_New(0);
  for (auto& op : c.ops) {
    PyRef s = PyRef::steal(PyUnicode_FromString(op.c_str()));
    PyList_Append(ops, s.get());
  }
  set("ops", ops);
  PyObject* guards = PyList_New(0);
  for (auto& g : c.guards.guards) {
    PyRef s = PyRef::steal(PyUnicode_FromString(c.guards.describe(g).c_str()));
    PyList_Append(guards, s.get());
  }
  set("guards", guards);
  set("compile_time_s", PyFloat_FromDouble(c.seconds));
  set("backend", PyUnicode_FromString(c.backend.c_str()));
  set("plan", PyUnicode_FromString(c.plan_text.c_str()));
  set("cuda_source", PyUnicode_FromString(c.cuda_source.c_str()));
  if (c.failure) {
    set("break_code", PyUnicode_FromString(frontend::break_code_id(c.failure->code)));
    set("break_reason", PyUnicode_FromString(c.failure->what()));
    set("break_headline", PyUnicode_FromString(frontend::break_code_headline(c.failure->code)));
    set("break_hint", PyUnicode_FromString(frontend::break_code_hint(c.failure->code)));
    set("user_loc", PyUnicode_FromString(c.failure->user_loc.c_str()));
    set("source_line", PyUnicode_FromString(source_line(c.failure->user_loc).c_str()));
    set("break_explanation", PyUnicode_FromString(frontend::break_code_explanation(c.failure->code)));
    PyObject* stack = PyList_New(0);
    for (const std::string& loc : c.failure->user_stack) {
      PyRef item = PyRef::steal(Py_BuildValue("(ss)", loc.c_str(), source_line(loc).c_str()));
      PyList_Append(stack, item.get());
    }
    set("user_stack", stack);
    if (!c.not_resumed.empty()) set("not_resumed", PyUnicode_FromString(c.not_resumed.c_str()));
    if (c.resume && !c.resume->runs_rest_in_cpython.empty())
      set("rest_in_cpython", PyUnicode_FromString(c.resume->runs_rest_in_cpython.c_str()));
  }
  if (!c.user_error.empty()) set("user_error", PyUnicode_FromString(c.user_error.c_str()));
  PyObject* reasons = PyList_New(0);
  for (auto& r : recompile_reasons) {
    PyRef s = PyRef::steal(PyUnicode_FromString(r.c_str()));
    PyList_Append(reasons, s.get());
  }
  set("recompile_reasons", reasons);
  PyRef r = PyRef::steal(PyObject_CallOneArg(g_observer->get(), d.get()));
  if (!r) PyErr_WriteUnraisable(g_observer->get());
}

// Runs the break code of `plan` with the prefix graph's outputs `outs` and the frame's inputs: CPython executes
// the break, and the resume functions it calls are intercepted (and compiled) like any user frame.
cpython::FrameOutcome run_break(const frontend::ResumePlan& plan, PyObject* outs, const frontend::GuardScratch& scratch,
                                const cpython::FrameView& frame) {
  PyRef hold_outs = PyRef::steal(outs);
  constexpr size_t kInline = 16;
  PyObject* inline_args[kInline];
  std::vector<PyObject*> heap_args;
  const size_t nargs = plan.args.size() + plan.exit_codes.size();
  PyObject** args = nargs <= kInline ? inline_args : (heap_args.resize(nargs), heap_args.data());
  size_t n = 0;
  struct Release {
    PyObject** args;
    size_t& n;
    ~Release() {
      for (size_t i = 0; i < n; ++i) Py_DECREF(args[i]);
    }
  } release{args, n};
  // New references: the break code may drop what it was given, and `scratch` ends with this dispatch.
  for (const frontend::LiveValue& v : plan.args) {
    PyObject* o = v.kind == frontend::LiveValue::Kind::Output ? PyTuple_GET_ITEM(outs, v.index) : scratch.values[v.index];
    if (!o) {
      PyErr_SetString(PyExc_SystemError, "fastcomp: a value live at a graph break is missing");
      return cpython::FrameOutcome::error();
    }
    o = v.attr ? PyObject_GetAttr(o, v.attr.get()) : Py_NewRef(o);
    if (!o) return cpython::FrameOutcome::error();
    args[n++] = o;
  }
  // The break code and its resume functions as function objects of the frame's globals and closure, made
  // once and reused while those stay the same (the common case: one function object per code).
  PyObject* closure = PyFunction_GET_CLOSURE(frame.function());
  frontend::ResumePlan::Functions& fns = plan.functions;
  if (!fns.break_fn || fns.globals.get() != frame.globals() || fns.closure.get() != closure) {
    frontend::ResumePlan::Functions made;
    made.globals = PyRef::borrow(frame.globals());
    made.closure = PyRef::borrow(closure);
    auto make_fn = [&](PyObject* code) {
      PyRef fn = PyRef::steal(PyFunction_New(code, frame.globals()));
      if (fn && closure && PyFunction_SetClosure(fn.get(), closure) < 0) fn = PyRef();
      return fn;
    };
    made.break_fn = make_fn(plan.break_code.get());
    if (!made.break_fn) return cpython::FrameOutcome::error();
    for (const PyRef& code : plan.exit_codes) {
      made.exit_fns.push_back(make_fn(code.get()));
      if (!made.exit_fns.back()) return cpython::FrameOutcome::error();
    }
    fns = std::move(made);
  }
  PyRef fn = fns.break_fn;  // kept while the call runs, even if a nested call replaces the cached ones
  for (const PyRef& exit_fn : fns.exit_fns) args[n++] = exit_fn.new_ref();
  hold_outs = PyRef();
  cpython::UnsuspendHook resume_interception;
  PyObject* result = PyObject_Vectorcall(fn.get(), args, n, nullptr);
  return result ? cpython::FrameOutcome::result(result) : cpython::FrameOutcome::error();
}

// The graph of `entry` (compiled for `code`) raised `error` and wrote nothing: CPython runs the frame instead. If
// that raises too, the user gets eager's exception from their own line; if not, the graph was wrong for these
// inputs, which is fastcomp's bug: it warns once for the code (or, with suppress_errors off, raises InternalError
// in place of the frame's result), and the entry runs its frames in CPython from then on. `entry` is null for
// explain(), which keeps nothing.
cpython::FrameOutcome rerun_in_cpython(std::shared_ptr<runtime::CacheEntry> entry, PyCodeObject* code,
                                       std::string error) {
  PyRef hold_code = PyRef::borrow(reinterpret_cast<PyObject*>(code));
  return cpython::FrameOutcome::run_default_then([entry, hold_code, error](bool raised) {
    if (raised) return true;
    PyCodeObject* code = reinterpret_cast<PyCodeObject*>(hold_code.get());
    if (entry) entry->runs_eagerly = true;
    const std::string msg = fmt::format(
        "fastcomp internal error: the compiled graph of {} raised {}, where running it in CPython does not. {} "
        "This is a bug of fastcomp: please report it, with the files FASTCOMP_DUMP_DIR=<dir> writes for this "
        "function.",
        where(code), error,
        entry ? "Calls of it that its guards accept run in CPython from now on." : "This call ran in CPython.");
    log::emit(log::Topic::compile, log::Level::info, msg);
    if (!config().suppress_errors) {
      raise("InternalError", msg);
      return false;
    }
    runtime::CodeCache& cache = runtime::code_cache(code);
    if (!cache.warned_run_failure) {
      cache.warned_run_failure = true;
      warn(msg);
    }
    return true;
  });
}

cpython::FrameOutcome run_compiled(const CompiledFrame& c, const frontend::GuardScratch& scratch,
                                   const cpython::FrameView& frame,
                                   const std::shared_ptr<runtime::CacheEntry>& entry) {
  if (!c.executable) return cpython::FrameOutcome::run_default();
  std::shared_ptr<const frontend::ResumePlan> plan = c.resume;  // the cache may change while the break runs
  // The objects side effects write to, held across the run: code the graph calls may compile (and reuse `scratch`).
  std::vector<PyObject*> targets;
  std::vector<PyRef> hold;
  if (!c.side_effects.empty()) {
    targets = scratch.values;
    for (PyObject* o : targets) hold.push_back(PyRef::borrow(o));
  }
  PyObject* out = c.executable->run(scratch.inputs.data(), scratch.inputs.size());
  // Only exceptions of programs: a KeyboardInterrupt or SystemExit is not a reason to run the frame again.
  if (!out && c.reruns_when_graph_raises && PyErr_ExceptionMatches(PyExc_Exception))
    return rerun_in_cpython(entry, frame.code(), take_error_message());
  if (!out) return cpython::FrameOutcome::error();
  if (!c.side_effects.empty()) {
    if (!frontend::apply_side_effects(c.side_effects, out, targets)) {
      Py_DECREF(out);
      return cpython::FrameOutcome::error();
    }
    if (!plan) {
      PyObject* result = Py_NewRef(PyTuple_GET_ITEM(out, 0));
      Py_DECREF(out);
      return cpython::FrameOutcome::result(result);
    }
  }
  if (!plan) return cpython::FrameOutcome::result(out);
  return run_break(*plan, out, scratch, frame);
}

cpython::FrameOutcome run_entry(const std::shared_ptr<runtime::CacheEntry>& entry,
                                const frontend::GuardScratch& scratch, const cpython::FrameView& frame) {
  if (entry->runs_eagerly) return cpython::FrameOutcome::run_default();
  return run_compiled(entry->compiled, scratch, frame, entry);
}

// The frame's arguments that are nn.Modules, by slot and address.
std::vector<std::pair<int, const PyObject*>> module_arguments(const cpython::FrameView& frame) {
  std::vector<std::pair<int, const PyObject*>> out;
  PyCodeObject* code = frame.code();
  const int nargs = code->co_argcount + code->co_kwonlyargcount;
  for (int i = 0; i < nargs && i < frame.nlocalsplus(); ++i) {
    PyObject* v = frame.local(i);
    if (v && frontend::torch_refs().is_module(v)) out.emplace_back(i, v);
  }
  return out;
}

// The guard scratch of one dispatch. Dispatches nest (a resume function called by break code is dispatched while
// its caller's dispatch runs), so each level has its own; the references a guard check took (attribute loads)
// are dropped when the dispatch ends, not at thread exit, which runs after the interpreter is gone.
class ScratchLease {
 public:
  ScratchLease() {
    if (depth_ == pool_.size()) pool_.push_back(std::make_unique<frontend::GuardScratch>());
    scratch_ = pool_[depth_++].get();
  }
  ~ScratchLease() {
    scratch_->reset(0, 0);  // releasing a reference can run Python code, and dispatch again: one level up
    --depth_;
  }
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;
  frontend::GuardScratch& get() { return *scratch_; }

 private:
  static thread_local std::vector<std::unique_ptr<frontend::GuardScratch>> pool_;
  static thread_local size_t depth_;
  frontend::GuardScratch* scratch_;
};
thread_local std::vector<std::unique_ptr<frontend::GuardScratch>> ScratchLease::pool_;
thread_local size_t ScratchLease::depth_ = 0;

cpython::FrameOutcome dispatch(const cpython::FrameView& frame, DispatchContext& ctx) {
  PyCodeObject* code = frame.code();
  runtime::CodeCache& cache = runtime::code_cache(code);
  ScratchLease lease;
  frontend::GuardScratch& scratch = lease.get();

  // A guard check may run Python code, which lets another thread change `cache.entries` (compile into it,
  // reset it): entries are walked by index, and the one checked is held until it has run.
  if (!ctx.explain) {
    for (size_t i = 0; i < cache.entries.size(); ++i) {
      std::shared_ptr<runtime::CacheEntry> e = cache.entries[i];
      if (e->options_key != ctx.options->key) continue;
      if (!frontend::check_guards(e->compiled.guards, frame, scratch, nullptr)) continue;
      auto at = std::find(cache.entries.begin(), cache.entries.end(), e);
      if (at != cache.entries.end()) std::rotate(cache.entries.begin(), at, at + 1);
      return run_entry(e, scratch, frame);
    }
  }

  // A miss: say why each existing entry was rejected, then compile (or give up at the limit).
  std::vector<std::string> reasons;
  int same_options = 0, same_objects = 0;
  const std::vector<std::pair<int, const PyObject*>> owners = module_arguments(frame);
  for (size_t i = 0; i < cache.entries.size(); ++i) {
    std::shared_ptr<runtime::CacheEntry> e = cache.entries[i];
    if (e->options_key != ctx.options->key) continue;
    ++same_options;
    same_objects += e->owners == owners && frontend::identity_guards_hold(e->compiled.guards, frame);
    std::string reason;
    frontend::check_guards(e->compiled.guards, frame, scratch, &reason);
    reasons.push_back(fmt::format("{}/{}: {}", cache.frame_id, e->compile_id, reason));
  }
  // The limit counts the versions compiled for the same objects (the same module, the same decorated function):
  // code shared by many modules or functions (a decorator's wrapper, a layer class's forward) gets a version for
  // each, up to kAccumulatedLimit in all.
  constexpr int kAccumulatedLimit = 256;
  if (!ctx.explain && (same_objects >= config().recompile_limit || same_options >= kAccumulatedLimit)) {
    const bool raises = config().error_on_recompile;
    std::string msg = fmt::format(
        "fastcomp: {} hit the recompile limit ({}): these inputs match none of its {} compiled versions{}.\n"
        "  last failing guard: {}\n  To see every recompile, set FASTCOMP_LOGS=recompiles; to allow more, raise "
        "fastcomp.config.recompile_limit{}.",
        where(code), config().recompile_limit, same_objects,
        raises ? ", and fastcomp.config.error_on_recompile is set" : "; it runs eagerly for such inputs",
        reasons.empty() ? "?" : reasons.front(), raises ? "; to run such calls eagerly instead, unset error_on_recompile" : "");
    if (raises) {
      raise("RecompileLimitExceeded", msg);
      return cpython::FrameOutcome::error();
    }
    if (!cache.warned_limit) {
      cache.warned_limit = true;
      warn(msg);
    }
    return cpython::FrameOutcome::run_default();
  }
  if (!reasons.empty() && !ctx.explain) {
    // A resume function by its own name (f.__resume_at_42): its guards are not f's.
    const std::string name = utf8(frontend::generated_code(code) ? code->co_qualname : code->co_name);
    std::string text = fmt::format("Recompiling function {} in {}:{}\n    triggered by the following guard failure(s):",
                                   name, utf8(code->co_filename), code->co_firstlineno);
    for (auto& r : reasons) text += "\n    - " + r;
    log::emit(log::Topic::recompiles, log::Level::info, text);
  }

  runtime::assign_frame_id(cache);
  auto entry = std::make_shared<runtime::CacheEntry>();
  entry->options_key = ctx.options->key;
  entry->compile_id = cache.compiles++;
  entry->owners = owners;
  entry->compiled = compile_frame(frame, *ctx.options);
  CompiledFrame& c = entry->compiled;
  if (c.failure) {
    std::vector<std::string> outer = calling_user_frames(ctx, code);
    c.failure->user_stack.insert(c.failure->user_stack.begin(), outer.begin(), outer.end());
  }
  notify_observer(code, c, reasons);

  if (c.failure) {
    log_break(code, *c.failure, c.not_resumed, c.resume ? c.resume->runs_rest_in_cpython : std::string());
    if (is_internal(*c.failure) && !config().suppress_errors) {
      raise("InternalError", fmt::format("fastcomp internal error while compiling {}:\n{}", where(code),
                                         failure_text(*c.failure)));
      return cpython::FrameOutcome::error();
    }
    if (ctx.options->fullgraph) {
      std::string text = failure_text(*c.failure);
      raise("Unsupported", fmt::format("fastcomp.compile(fullgraph=True) cannot capture {} in one graph:\n{}", where(code), text));
      return cpython::FrameOutcome::error();
    }
    // A break that continues is reported by the logs and explain(); a frame that runs eagerly as a whole is
    // worth a warning, once, when it is the function the user compiled.
    if (!c.resume && code == ctx.target && !cache.warned_failure && !ctx.explain) {
      cache.warned_failure = true;
      warn(fmt::format("fastcomp: running {} eagerly: {}{}", where(code), failure_text(*c.failure),
                       c.not_resumed.empty() ? "" : "\n  (the break cannot be resumed: " + c.not_resumed + ")"));
    }
  }
  if (c.executable)
    FC_LOG(compile, info, "compiled {}{} in {:.2f} ms: {} ops", where(code), c.resume ? " up to a graph break" : "",
           c.seconds * 1e3, c.ops.size());
  if (c.executable) {
    FC_LOG(graph, info, "TRACED GRAPH {}/{} {}\n{}runs on {}", cache.frame_id, entry->compile_id, where(code),
           c.graph_text, c.backend);
    if (log::enabled(log::Topic::guards))
      log::emit(log::Topic::guards, log::Level::info,
                fmt::format("GUARDS {}/{} {}:\n{}", cache.frame_id, entry->compile_id, where(code), c.guards.to_string()));
  } else if (!c.user_error.empty()) {
    FC_LOG(compile, debug, "{} raised while tracing ({}); running it eagerly", where(code), c.user_error);
  }
  // A function called from CPython that computes nothing (no tensor op, no side effect: a config's __getattribute__,
  // a helper that raises) gains nothing from compiling, and would compile again for every new argument: it runs in
  // CPython from now on (the functions it calls are still intercepted).
  if (!ctx.explain && code != ctx.target && !frontend::generated_code(code) && !c.resume &&
      ((c.executable && c.ops.empty() && c.side_effects.empty()) || !c.user_error.empty()))
    cache.role = runtime::CodeCache::Role::Skip;
  if (ctx.explain || !c.user_error.empty()) {
    // explain() reports without caching; a user error is re-raised by the eager run below.
    if (!c.executable) return cpython::FrameOutcome::run_default();
    if (!frontend::check_guards(c.guards, frame, scratch, nullptr)) return cpython::FrameOutcome::run_default();
    // explain() drops the entry when this returns; the break code keeps what it needs.
    return run_compiled(c, scratch, frame, nullptr);
  }
  cache.entries.insert(cache.entries.begin(), entry);
  const runtime::CacheEntry& e = *entry;
  if (!e.compiled.executable) return cpython::FrameOutcome::run_default();
  if (!frontend::check_guards(e.compiled.guards, frame, scratch, nullptr)) {
    // The guards of a fresh trace must accept the frame they came from.
    std::string failing;
    frontend::check_guards(e.compiled.guards, frame, scratch, &failing);
    const std::string msg = fmt::format(
        "fastcomp internal error: the guards of {} reject the inputs they were built from ({})", where(code), failing);
    if (!config().suppress_errors) {
      raise("InternalError", msg);
      return cpython::FrameOutcome::error();
    }
    warn(msg + "; running it eagerly");
    return cpython::FrameOutcome::run_default();
  }
  return run_entry(entry, scratch, frame);
}

// Whether a frame that is not the compiled function's own is compiled as a frame of its own: user code called
// while a compiled function runs in CPython (around a graph break, or in a frame that runs eagerly), and the
// resume functions of graph breaks. Torch, the standard library and fastcomp's break code always run as is.
bool compiles_nested(PyCodeObject* code) {
  if (const frontend::GeneratedCode* g = frontend::generated_code(code)) return !g->is_break_code && g->original;
  if (!(code->co_flags & CO_OPTIMIZED)) return false;  // module and class bodies
  runtime::CodeCache& cache = runtime::code_cache(code);
  if (cache.role == runtime::CodeCache::Role::Unknown)
    cache.role = in_skipped_dir(utf8(code->co_filename)) ? runtime::CodeCache::Role::Skip : runtime::CodeCache::Role::User;
  return cache.role == runtime::CodeCache::Role::User;
}

}  // namespace

ActiveDispatch::ActiveDispatch(DispatchContext* ctx) : ctx_(ctx) {
  ctx->previous = tl_active;
  tl_active = ctx;
}

ActiveDispatch::~ActiveDispatch() { tl_active = ctx_->previous; }

bool is_dispatching() { return tl_active != nullptr; }

void set_compile_observer(PyObject* observer) { *g_observer = PyRef::borrow(observer); }

cpython::FrameOutcome handle_frame(const cpython::FrameView& frame) {
  DispatchContext* ctx = tl_active;
  if (!ctx || (frame.code() != ctx->target && !compiles_nested(frame.code()))) return cpython::FrameOutcome::run_default();
  try {
    return dispatch(frame, *ctx);
  } catch (const std::exception& e) {
    PyErr_Clear();
    if (!config().suppress_errors) {
      raise("InternalError", fmt::format("fastcomp internal error while compiling {}: {}", where(frame.code()), e.what()));
      return cpython::FrameOutcome::error();
    }
    warn(fmt::format("fastcomp: internal error while compiling {}: {}; running it eagerly", where(frame.code()), e.what()));
    return cpython::FrameOutcome::run_default();
  }
}

}  // namespace fastcomp
