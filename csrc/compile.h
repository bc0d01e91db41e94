// The compile pipeline for one frame: trace -> graph -> executable. One stage per line in compile.cpp.
#pragma once
#include <Python.h>

#include <memory>
#include <optional>
#include <string>

#include "cpython/frame.h"
#include "frontend/guards/guards.h"
#include "frontend/resume/plan.h"
#include "frontend/trace/side_effects.h"
#include "frontend/trace/unsupported.h"
#include "runtime/executable.h"

namespace fastcomp {

// What the user asked for in fastcomp.compile(...). Entries compiled under different options never mix.
struct CompileOptions {
  bool fullgraph = false;
  int dynamic = -1;  // -1: None (automatic), 0: False, 1: True
  std::string mode = "default";
  std::string backend = "default";
  int key = 0;       // interned identity of the option set, compared on every cache lookup

  std::string to_string() const;
};

struct CompiledFrame {
  frontend::GuardSet guards;
  std::unique_ptr<runtime::Executable> executable;  // null: run this frame eagerly under these guards
  std::optional<frontend::Unsupported> failure;     // why the frame breaks the graph (or runs eagerly), when it does
  // Set when the frame breaks the graph and continues: `executable` runs the graph up to the break and outputs
  // the values the break code takes. Shared so that a call in flight keeps it while the cache changes.
  std::shared_ptr<const frontend::ResumePlan> resume;
  std::string not_resumed;                          // why a break runs the whole frame eagerly instead
  // Written into objects from outside the frame after the graph runs (see frontend/trace/side_effects.h). With a
  // plain return and effects, the executable's output is (result, new values...).
  std::vector<frontend::SideEffect> side_effects;
  // The graph changes no tensor in place, so when it raises nothing has happened yet: CPython runs the frame
  // instead. Where the graph was right to raise (an op whose meta function accepted what its kernel rejects), the
  // user gets eager's exception from their own line, after the side effects before it; where CPython runs the
  // frame without raising, the graph was wrong (see CacheEntry::runs_eagerly).
  bool reruns_when_graph_raises = false;
  std::string user_error;                           // the user's code raised while tracing
  std::string graph_text;
  std::vector<std::string> ops;
  std::string plan_text;    // the CUDA backend's fusion plan, when it lowered the graph
  std::string cuda_source;  // and its CUDA C
  std::string backend;  // what runs the graph: "cuda: 2 kernels, 1 cuBLAS calls, 0 extern ops" / "torch runner: ..."
  double seconds = 0;
};

/** Traces the frame and builds its executable. Never throws for user code or unsupported code. */
CompiledFrame compile_frame(const cpython::FrameView& frame, const CompileOptions& options);

// Tests: the next frame compiled reports `reason` as an unresumable GB999 break of its first line instead of
// tracing, the way the tracer reports its own inconsistencies ("fastcomp internal error: ..."), so that the
// handling of internal errors (fastcomp.config.suppress_errors) can be tested without a bug to trigger it.
void fail_next_trace_for_tests(std::string reason);

}  // namespace fastcomp
