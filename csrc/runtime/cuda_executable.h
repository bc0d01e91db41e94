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

namespace fastcomp::runtime {

// The CUDA C of a plan: every kernel emitted for the device's limits, in one NVRTC program.
struct CudaSource {
  std::vector<codegen::KernelSource> kernels;  // one per plan::Program::kernels, same order
  std::string program;                         // emit_program(kernels); empty when the plan has no kernels
};
/** Emits the plan's kernels: the program for aligned vector operands unless `alignment` says otherwise (the
 *  executable compiles the other on the first launch that needs it). Throws std::invalid_argument if a kernel
 *  breaks codegen's rules (a lowering bug). */
CudaSource emit_plan(const plan::Program& program, const codegen::DeviceLimits& limits,
                     codegen::PointerAlignment alignment = codegen::PointerAlignment::Vector);

// Codegen limits of CUDA device `device`, from the driver. Throws CudaError / CudaLibraryError.
codegen::DeviceLimits device_limits(int device);

/** The cubin of `source` for the program's device, through the kernel cache; null when there are no kernels.
 *  Takes ~50-300 ms on a cache miss and needs no GIL (run it on a background thread). Throws NvrtcError (with
 *  the log) or CudaLibraryError. */
std::shared_ptr<const std::string> compile_plan(const plan::Program& program, const CudaSource& source);
/** compile_plan's result when the kernel cache already holds it (memory or disk), else null. */
std::shared_ptr<const std::string> cached_plan_binary(const plan::Program& program, const CudaSource& source);

/** Loads `binary` (compile_plan's) and takes `plans` (plan_matmuls', or empty: planned here): the executable of
 *  `program`. Needs the GIL. Throws CudaError, CublasError or CudaLibraryError; the caller falls back to the
 *  torch runner. */
std::unique_ptr<Executable> make_cuda_executable(graph::Graph graph, plan::Program program, const CudaSource& source,
                                                 std::shared_ptr<const std::string> binary,
                                                 const MatmulSwitches& switches, MatmulPlans plans = {});

}  // namespace fastcomp::runtime
