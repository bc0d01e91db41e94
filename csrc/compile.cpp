#include "compile.h"

#include <fmt/format.h>

#include <chrono>
#include <utility>

#include "backend.h"
#include "frontend/trace/shape_env.h"
#include "frontend/trace/tracer.h"
#include "support/log.h"
#include "support/pystr.h"

namespace fastcomp {
namespace {

using Clock = std::chrono::steady_clock;

std::string g_fail_next_trace;  // fail_next_trace_for_tests; touched under the GIL only

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// A long first compile is most often torch importing modules (the first use of a torch function whose meta
// implementation is Python imports sympy and torch.fx, ~1 s): say so, naming the module whose import pulled in
// the rest: the last new name in sys.modules, since importlib moves a module to its end when its import finishes.
// `before` is a set of sys.modules' names before the trace, taken only while the compile topic is on.
void log_imports(PyCodeObject* code, PyObject* before, double trace_ms) {
  PyRef now = PyRef::steal(PyDict_Keys(PyImport_GetModuleDict()));
  if (!now) {
    PyErr_Clear();
    return;
  }
  Py_ssize_t added = 0;
  std::string outermost;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(now.get()); ++i) {
    PyObject* name = PyList_GET_ITEM(now.get(), i);
    if (PySet_Contains(before, name) != 0) continue;
    ++added;
    outermost = utf8(name);
  }
  PyErr_Clear();
  if (added == 0) return;
  log::emit(log::Topic::compile, log::Level::info,
            fmt::format("tracing {} ({}:{}) imported {} modules ({} and what it imports) in a trace of {:.1f} ms: "
                        "torch imports them on the first use of some of its functions; later compiles do not pay it",
                        utf8(code->co_qualname), utf8(code->co_filename), code->co_firstlineno, added, outermost,
                        trace_ms));
}

}  // namespace

void fail_next_trace_for_tests(std::string reason) { g_fail_next_trace = std::move(reason); }

std::string CompileOptions::to_string() const {
  return fmt::format("mode={} backend={} fullgraph={} dynamic={}", mode, backend, fullgraph,
                     dynamic < 0 ? "None" : dynamic ? "True" : "False");
}

CompiledFrame compile_frame(const cpython::FrameView& frame, const CompileOptions& options) {
  const auto start = Clock::now();
  PyCodeObject* code = frame.code();
  FC_LOG(compile, debug, "compiling {} ({}:{}) with {}", utf8(code->co_qualname), utf8(code->co_filename),
         code->co_firstlineno, options.to_string());
  PyRef modules_before;  // sys.modules' names, for log_imports
  if (log::enabled(log::Topic::compile)) {
    PyRef names = PyRef::steal(PyDict_Keys(PyImport_GetModuleDict()));
    modules_before = PyRef::steal(names ? PySet_New(names.get()) : nullptr);
    if (!modules_before) PyErr_Clear();
  }
  frontend::DecisionLogScope decisions;  // a graph break traces twice; its decisions are logged once
  CompiledFrame out;
  if (!g_fail_next_trace.empty()) {
    out.failure = frontend::Unsupported(frontend::BreakCode::Other, std::exchange(g_fail_next_trace, {}));
    out.failure->user_loc = fmt::format("{}:{}", utf8(code->co_filename), code->co_firstlineno);
    out.failure->user_stack = {out.failure->user_loc};
    out.not_resumed = "injected by a test";
    return out;
  }
  const auto dynamic = static_cast<frontend::DynamicMode>(options.dynamic);
  frontend::TraceResult trace = frontend::trace_frame(frame, nullptr, dynamic);
  for (int again = 0; again < 3 && trace.failure && trace.failure->trace_again; ++again)
    trace = frontend::trace_frame(frame, nullptr, dynamic);  // see Unsupported::trace_again
  const double trace_ms = ms_since(start);
  FC_LOG(compile, debug, "traced {} in {:.2f} ms: {} nodes, {} guards{}", utf8(code->co_qualname), trace_ms,
         trace.graph.nodes.size(), trace.guards.guards.size(),
         trace.failure ? fmt::format(", stopped at {} ({})", trace.failure->user_loc, trace.failure->what()) : "");
  out.failure = std::move(trace.failure);
  out.user_error = std::move(trace.user_error);
  if (out.failure && out.user_error.empty() && !options.fullgraph) {
    // A graph break: trace again up to it; the graph runs that far and CPython continues from there.
    const auto plan_start = Clock::now();
    auto plan = frontend::plan_graph_break(frame, *out.failure, trace, &out.not_resumed, dynamic);
    if (plan) out.resume = std::make_shared<const frontend::ResumePlan>(std::move(*plan));
    FC_LOG(compile, debug, "planned the graph break of {} in {:.2f} ms: {}", utf8(code->co_qualname),
           ms_since(plan_start), out.resume ? "resumes after it" : "runs the frame eagerly: " + out.not_resumed);
  }
  if (modules_before) log_imports(code, modules_before.get(), ms_since(start));
  out.guards = std::move(trace.guards);
  out.side_effects = std::move(trace.side_effects);
  if ((out.failure && !out.resume) || !out.user_error.empty()) {
    out.seconds = ms_since(start) / 1e3;
    return out;
  }
  out.graph_text = trace.graph.to_string();
  bool writes = false;
  for (const auto& node : trace.graph.nodes) {
    if (node.kind == graph::NodeKind::Call && !node.rebuilds) out.ops.push_back(node.target_name);
    writes |= node.kind == graph::NodeKind::Call && graph::has_write_effects(node);
  }
  out.reruns_when_graph_raises = !writes;
  const auto build_start = Clock::now();
  BuiltExecutable built = build_executable(std::move(trace.graph), out.guards, options.mode == "reduce-overhead");
  FC_LOG(compile, debug, "built the executable of {} in {:.2f} ms: {}", utf8(code->co_qualname), ms_since(build_start),
         built.summary);
  out.executable = std::move(built.executable);
  out.backend = std::move(built.summary);
  out.plan_text = std::move(built.plan_text);
  out.cuda_source = std::move(built.cuda_source);
  out.seconds = ms_since(start) / 1e3;
  return out;
}

}  // namespace fastcomp
