// The CUDA backend's executable: a fusion plan bound to a loaded NVRTC module, cuBLASLt plans and torch.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "codegen/kernel_ir.h"
#include "graph/ir.h"
#include "plan/program.h"
#include "runtime/executable.h"
#include "runtime/matmul_steps.h"
#include "runtime/plan_compile.h"

namespace fastcomp::runtime {

/** Loads `binary` (compile_plan's) and takes `plans` (plan_matmuls', or empty: planned here): the executable of
 *  `program`. Needs the GIL. Throws CudaError, CublasError or CudaLibraryError; the caller falls back to the
 *  torch runner. */
std::unique_ptr<Executable> make_cuda_executable(graph::Graph graph, plan::Program program, const CudaSource& source,
                                                 const PlanBinary& binary, const MatmulSwitches& switches,
                                                 MatmulPlans plans = {});

}  // namespace fastcomp::runtime
