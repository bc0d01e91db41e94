#include "compile.h"

#include <fmt/format.h>

#include <chrono>

#include "backend.h"
#include "frontend/trace/tracer.h"
#include "support/log.h"

namespace fastcomp {

std::string CompileOptions::to_string() const {
  return fmt::format("mode={} backend={} fullgraph={} dynamic={}", mode, backend, fullgraph,
                     dynamic < 0 ? "None" : dynamic ? "True" : "False");
}

CompiledFrame compile_frame(const cpython::FrameView& frame, const CompileOptions& options) {
  auto start = std::chrono::steady_clock::now();
  CompiledFrame out;
  const auto dynamic = static_cast<frontend::DynamicMode>(options.dynamic);
  frontend::TraceResult trace = frontend::trace_frame(frame, nullptr, dynamic);
  out.failure = std::move(trace.failure);
  out.user_error = std::move(trace.user_error);
  if (out.failure && out.user_error.empty() && !options.fullgraph) {
    // A graph break: trace again up to it; the graph runs that far and CPython continues from there.
    auto plan = frontend::plan_graph_break(frame, *out.failure, trace, &out.not_resumed, dynamic);
    if (plan) out.resume = std::make_shared<const frontend::ResumePlan>(std::move(*plan));
  }
  out.guards = std::move(trace.guards);
  out.side_effects = std::move(trace.side_effects);
  if ((out.failure && !out.resume) || !out.user_error.empty()) {
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return out;
  }
  out.graph_text = trace.graph.to_string();
  for (const auto& node : trace.graph.nodes)
    if (node.kind == graph::NodeKind::Call && !node.rebuilds) out.ops.push_back(node.target_name);
  BuiltExecutable built = build_executable(std::move(trace.graph), out.guards, options.mode == "reduce-overhead");
  out.executable = std::move(built.executable);
  out.backend = std::move(built.summary);
  out.plan_text = std::move(built.plan_text);
  out.cuda_source = std::move(built.cuda_source);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace fastcomp
