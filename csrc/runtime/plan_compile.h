// A fusion plan's CUDA C and its cubins: the kernels emitted for a device, cut into programs that NVRTC compiles
// side by side on a cache miss (codegen::split_program), and those programs' modules loaded as one.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "codegen/kernel_ir.h"
#include "plan/program.h"
#include "runtime/cuda/module.h"

namespace fastcomp::runtime {

// Codegen limits of CUDA device `device`, from the driver. Throws CudaError / CudaLibraryError.
codegen::DeviceLimits device_limits(int device);

// The CUDA C of a plan.
struct CudaSource {
  std::vector<codegen::KernelSource> kernels;  // one per plan::Program::kernels, same order
  std::string program;                         // every kernel in one program, as dumps and logs show it
  std::vector<codegen::ProgramPart> parts;     // what NVRTC compiles: the kernels cut into programs
};
/** Emits the plan's kernels: the program for aligned vector operands unless `alignment` says otherwise (the
 *  executable compiles the other on the first launch that needs it), cut into at most `parts` programs. Throws
 *  std::invalid_argument if a kernel breaks codegen's rules (a lowering bug). */
CudaSource emit_plan(const plan::Program& program, const codegen::DeviceLimits& limits,
                     codegen::PointerAlignment alignment = codegen::PointerAlignment::Vector, int parts = 1);

/** How many programs this process's kernels are cut into: NVRTC's thread budget (fastcomp.config.nvrtc_threads,
 *  else all usable cores but one, at most 8), one thread a program. */
int nvrtc_program_parts();

// A plan's cubins, one per CudaSource::parts; empty when the plan has no kernels.
using PlanBinary = std::vector<std::shared_ptr<const std::string>>;

/** The cubins of `source`'s parts for the program's device, through the kernel cache. On a miss the parts
 *  compile at once, a thread each (the caller's thread takes one), each with its share of NVRTC's threads:
 *  50-400 ms, without the GIL (run it on a background thread). Throws NvrtcError (with the log) or
 *  CudaLibraryError. */
PlanBinary compile_plan(const plan::Program& program, const CudaSource& source);
/** compile_plan's result when the kernel cache already holds every part (memory or disk), else empty. */
PlanBinary cached_plan_binary(const plan::Program& program, const CudaSource& source);

// The modules of a plan's parts, loaded into one device's primary context.
class LoadedPlan {
 public:
  /** Loads `binary` (compile_plan's for `source`). Throws CudaError. */
  LoadedPlan(const CudaSource& source, const PlanBinary& binary, int device);
  /** The kernel named `name`, from the part that defines it. Throws CudaError if none does. */
  cuda::CUfunction get_function(const std::string& name) const;

 private:
  std::vector<std::unique_ptr<cuda::LoadedModule>> modules_;
  std::vector<std::vector<std::string>> names_;  // per module: the kernels it defines
};

}  // namespace fastcomp::runtime
