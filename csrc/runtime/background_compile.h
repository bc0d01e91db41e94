// Compiling kernels off the critical path. NVRTC takes 50-300 ms per graph, far longer than tracing (~1 ms), and
// cuBLASLt's first plan of a dtype in a process 30-110 ms, so a graph whose cubin is not in the kernel cache, or
// whose matrix products cuBLASLt has not yet warmed up for, first runs through the torch runner (eager speed,
// eager results) while a background thread compiles and plans (side by side); the first call after both are
// done switches to the CUDA executable. The user's first call therefore costs a trace, not a compile.
#pragma once
#include <memory>
#include <string>

#include "graph/ir.h"
#include "plan/program.h"
#include "runtime/cuda_executable.h"
#include "runtime/executable.h"

namespace fastcomp::runtime {

/** An executable that runs `graph` through torch until `program`'s kernels (compiled on a background thread,
 *  unless `binary` already holds them) are loaded and its cuBLASLt calls planned. `summary` is what describe()
 *  says (the plan's kernel/cuBLAS/extern counts); `source_path` names the dumped .cu for the warning when NVRTC
 *  fails (then the graph stays on torch); "" when nothing was dumped (the warning then saves the source to the
 *  temp folder). `settle_ms` > 0: waits that long for the thread before returning, and if it is done by then the
 *  first call already runs the kernels. */
std::unique_ptr<Executable> make_background_executable(graph::Graph graph, plan::Program program, CudaSource source,
                                                       PlanBinary binary, const MatmulSwitches& switches,
                                                       std::string summary,
                                                       std::string source_path, double settle_ms = 0);

/** Blocks until every background compile started so far has finished (or `timeout_s` passed, if >= 0); releases
 *  the GIL while waiting. Returns false on timeout. */
bool wait_for_compiles(double timeout_s);

}  // namespace fastcomp::runtime
