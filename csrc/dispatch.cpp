#include "dispatch.h"

#include <fmt/format.h>

#include "frontend/trace/tracer.h"
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

std::string failure_text(const frontend::Unsupported& u) {
  std::string line = source_line(u.user_loc);
  return fmt::format("{} {}: {}\n  at {}{}\n  hint: {}", frontend::break_code_id(u.code),
                     frontend::break_code_headline(u.code), u.what(), u.user_loc,
                     line.empty() ? "" : "\n    " + line, frontend::break_code_hint(u.code));
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
  set("status", PyUnicode_FromString(c.executable ? "compiled" : c.failure ? "unsupported" : "user_error"));
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

cpython::FrameOutcome run_entry(runtime::CacheEntry& entry, const frontend::GuardScratch& scratch) {
  if (!entry.compiled.executable) return cpython::FrameOutcome::run_default();
  PyObject* out = entry.compiled.executable->run(scratch.inputs.data(), scratch.inputs.size());
  return out ? cpython::FrameOutcome::result(out) : cpython::FrameOutcome::error();
}

cpython::FrameOutcome dispatch(const cpython::FrameView& frame, DispatchContext& ctx) {
  PyCodeObject* code = frame.code();
  runtime::CodeCache& cache = runtime::code_cache(code);
  thread_local frontend::GuardScratch scratch;

  if (!ctx.explain) {
    for (size_t i = 0; i < cache.entries.size(); ++i) {
      runtime::CacheEntry& e = *cache.entries[i];
      if (e.options_key != ctx.options->key) continue;
      if (!frontend::check_guards(e.compiled.guards, frame, scratch, nullptr)) continue;
      if (i) std::rotate(cache.entries.begin(), cache.entries.begin() + i, cache.entries.begin() + i + 1);
      return run_entry(*cache.entries.front(), scratch);
    }
  }

  // A miss: say why each existing entry was rejected, then compile (or give up at the limit).
  std::vector<std::string> reasons;
  int same_options = 0;
  for (auto& e : cache.entries) {
    if (e->options_key != ctx.options->key) continue;
    ++same_options;
    std::string reason;
    frontend::check_guards(e->compiled.guards, frame, scratch, &reason);
    reasons.push_back(fmt::format("{}/{}: {}", cache.frame_id, e->compile_id, reason));
  }
  if (!ctx.explain && same_options >= config().recompile_limit) {
    std::string msg = fmt::format(
        "fastcomp: {} hit the recompile limit ({}); it runs eagerly for inputs that match none of its {} compiled "
        "versions.\n  last failing guard: {}\n  To see every recompile, set FASTCOMP_LOGS=recompiles; to allow more, "
        "raise fastcomp.config.recompile_limit.",
        where(code), config().recompile_limit, same_options, reasons.empty() ? "?" : reasons.front());
    if (config().error_on_recompile) {
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
    std::string text = fmt::format("Recompiling function {} in {}:{}\n    triggered by the following guard failure(s):",
                                   utf8(code->co_name), utf8(code->co_filename), code->co_firstlineno);
    for (auto& r : reasons) text += "\n    - " + r;
    log::emit(log::Topic::recompiles, log::Level::info, text);
  }

  auto entry = std::make_unique<runtime::CacheEntry>();
  entry->options_key = ctx.options->key;
  entry->compile_id = cache.compiles++;
  entry->compiled = compile_frame(frame, *ctx.options);
  CompiledFrame& c = entry->compiled;
  notify_observer(code, c, reasons);

  if (c.failure) {
    std::string text = failure_text(*c.failure);
    FC_LOG(graph_breaks, info, "Graph break in {}:\n{}", where(code), text);
    if (ctx.options->fullgraph) {
      raise("Unsupported", fmt::format("fastcomp.compile(fullgraph=True) cannot capture {} in one graph:\n{}", where(code), text));
      return cpython::FrameOutcome::error();
    }
    if (!cache.warned_failure && !ctx.explain) {
      cache.warned_failure = true;
      warn(fmt::format("fastcomp: running {} eagerly: {}", where(code), text));
    }
  } else if (!c.user_error.empty()) {
    FC_LOG(compile, debug, "{} raised while tracing ({}); running it eagerly", where(code), c.user_error);
  } else {
    FC_LOG(compile, info, "compiled {} in {:.2f} ms: {} ops", where(code), c.seconds * 1e3, c.ops.size());
    FC_LOG(graph, info, "TRACED GRAPH {}/{} {}\n{}runs on {}", cache.frame_id, entry->compile_id, where(code),
           c.graph_text, c.backend);
    if (log::enabled(log::Topic::guards))
      log::emit(log::Topic::guards, log::Level::info,
                fmt::format("GUARDS {}/{} {}:\n{}", cache.frame_id, entry->compile_id, where(code), c.guards.to_string()));
  }
  if (ctx.explain || !c.user_error.empty()) {
    // explain() reports without caching; a user error is re-raised by the eager run below.
    if (!c.executable) return cpython::FrameOutcome::run_default();
    if (!frontend::check_guards(c.guards, frame, scratch, nullptr)) return cpython::FrameOutcome::run_default();
    PyObject* out = c.executable->run(scratch.inputs.data(), scratch.inputs.size());
    return out ? cpython::FrameOutcome::result(out) : cpython::FrameOutcome::error();
  }
  cache.entries.insert(cache.entries.begin(), std::move(entry));
  runtime::CacheEntry& e = *cache.entries.front();
  if (!e.compiled.executable) return cpython::FrameOutcome::run_default();
  if (!frontend::check_guards(e.compiled.guards, frame, scratch, nullptr)) {
    // The guards of a fresh trace must accept the frame they came from.
    warn(fmt::format("fastcomp: internal error: the guards of {} reject the inputs they were built from; running it eagerly",
                     where(code)));
    return cpython::FrameOutcome::run_default();
  }
  return run_entry(e, scratch);
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
  if (!ctx || frame.code() != ctx->target) return cpython::FrameOutcome::run_default();
  // This frame belongs to the compiled call; nested calls of the same code (recursion) run normally.
  DispatchContext inner = *ctx;
  inner.target = nullptr;
  ActiveDispatch scope(&inner);
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
