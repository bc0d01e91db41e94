// Compiling kernels off the critical path. NVRTC takes 50-300 ms per graph, far longer than tracing (~1 ms), so
// a graph whose cubin is not in the kernel cache first runs through the torch runner (eager speed, eager
// results) while a background thread compiles; the first call after the cubin is ready switches to the CUDA
// executable. The user's first call therefore costs a trace, not a compile.
#pragma once
#include <memory>
#include <string>

#include "graph/ir.h"
#include "plan/program.h"
#include "runtime/cuda_executable.h"
#include "runtime/executable.h"

namespace fastcomp::runtime {

/** An executable that runs `graph` through torch until `program`'s kernels, compiling on a background thread,
 *  are loaded. `summary` is what describe() says (the plan's kernel/cuBLAS/extern counts); `source_path` names
 *  the dumped .cu for the warning when NVRTC fails (then the graph stays on torch). */
std::unique_ptr<Executable> make_background_executable(graph::Graph graph, plan::Program program, CudaSource source,
                                                       std::string summary, std::string source_path);

/** Blocks until every background compile started so far has finished (or `timeout_s` passed, if >= 0); releases
 *  the GIL while waiting. Returns false on timeout. */
bool wait_for_compiles(double timeout_s);

}  // namespace fastcomp::runtime
