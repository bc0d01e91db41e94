// Choosing and building a graph's executable: the CUDA backend (lower -> emit -> NVRTC -> executable) for
// graphs on CUDA tensors, the torch runner for everything else and whenever the CUDA path cannot be used.
#pragma once
#include <memory>
#include <string>

#include "frontend/guards/guards.h"
#include "graph/ir.h"
#include "runtime/executable.h"

namespace fastcomp {

struct BuiltExecutable {
  std::unique_ptr<runtime::Executable> executable;
  std::string summary;  // "cuda: 2 kernels, 1 cuBLAS calls, 0 extern ops" or "torch runner: 5 ops (why)"
  std::string plan_text;    // the fusion plan, when the CUDA backend lowered the graph
  std::string cuda_source;  // its CUDA C
  bool cuda_graph = false;  // replays as a CUDA graph (mode="reduce-overhead")
  std::string no_cuda_graph;  // with mode="reduce-overhead": why a CUDA executable launches directly instead
  std::string dump_folder;    // where FASTCOMP_DUMP_DIR's files of this graph went ("" when not dumped)
};

/** Builds `graph`'s executable; adds the guards the choice depends on (e.g. TF32 for fp32 matmuls) to
 *  `guards`. With `cuda_graphs` (mode="reduce-overhead"), a CUDA executable replays as a CUDA graph after a
 *  warm-up call. Never throws for a CUDA failure: it logs the reason and uses the torch runner (unless
 *  fastcomp.config.suppress_errors is off: then it throws, and the call raises fastcomp.InternalError). With
 *  FASTCOMP_DUMP_DIR set, every graph writes graph.txt and guards.txt into a folder of its own there, and a
 *  graph the CUDA backend lowered also plan.txt and kernels.cu. */
BuiltExecutable build_executable(graph::Graph graph, frontend::GuardSet& guards, bool cuda_graphs);

}  // namespace fastcomp
