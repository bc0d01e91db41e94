#include "runtime/plan_compile.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <future>

#include "runtime/cuda/arch.h"
#include "runtime/cuda/driver.h"
#include "runtime/cuda/nvrtc.h"
#include "support/config.h"
#include "support/log.h"

namespace fastcomp::runtime {

int nvrtc_program_parts() { return cuda::nvrtc_threads(config().nvrtc_threads, cuda::usable_cores()); }

namespace {

constexpr const char* kProgramName = "fastcomp_graph";

// The name NVRTC's messages give part `index` of `parts` (part of its kernel-cache key): one part keeps the name
// the whole program always had.
std::string part_name(size_t index, size_t parts) {
  return parts == 1 ? kProgramName : fmt::format("{}_part{}of{}", kProgramName, index + 1, parts);
}

// NVRTC's threads for each of `parts` programs compiled at once: an even share of the budget.
int threads_per_part(size_t parts) {
  return std::max(1, nvrtc_program_parts() / static_cast<int>(std::max<size_t>(parts, 1)));
}

}  // namespace

codegen::DeviceLimits device_limits(int device) {
  const cuda::DeviceInfo& info = cuda::device_info(device);
  codegen::DeviceLimits limits;
  limits.arch = info.arch;
  limits.sm_count = info.sm_count;
  limits.max_threads_per_block = info.max_threads_per_block;
  limits.max_threads_per_sm = info.max_threads_per_sm;
  limits.max_shared_per_block = info.max_shared_per_block;
  return limits;
}

CudaSource emit_plan(const plan::Program& program, const codegen::DeviceLimits& limits,
                     codegen::PointerAlignment alignment, int parts) {
  CudaSource out;
  for (const codegen::Kernel& k : program.kernels) out.kernels.push_back(codegen::emit_cuda(k, limits));
  codegen::share_identical_kernels(out.kernels);
  if (out.kernels.empty()) return out;
  out.program = codegen::emit_program(out.kernels, limits.arch, alignment);
  out.parts = codegen::split_program(out.kernels, limits.arch, alignment, parts);
  // One part is the whole program: the same text, and the same kernel-cache key as before parts existed.
  if (out.parts.size() == 1) out.parts.front().source = out.program;
  return out;
}

PlanBinary compile_plan(const plan::Program& program, const CudaSource& source) {
  const cuda::CudaArch arch = cuda::device_info(program.device).arch;
  const int threads = threads_per_part(source.parts.size());
  const size_t parts = source.parts.size();
  auto compile = [&](const codegen::ProgramPart& part) {
    const size_t index = &part - source.parts.data();
    try {
      return cuda::compile_cuda_cached(part.source, part_name(index, parts), arch, cuda::Output::Cubin, {}, threads);
    } catch (const cuda::NvrtcError& e) {
      // NVRTC's log numbers the lines of the part, not of the whole program that dumps and warnings name: a
      // rejected part says which it is, and is saved on its own.
      if (parts == 1) throw;
      const std::string saved = cuda::save_rejected_source(part.source);
      throw cuda::NvrtcError(e.program_name, e.log,
                             fmt::format("{}\n(program {} of {}, kernels {}{})", e.what(), index + 1, parts,
                                         fmt::join(part.kernels, ", "), saved.empty() ? "" : "; its source: " + saved));
    }
  };
  // The helper threads must not need the GIL, which the caller may hold while it waits for them (a graph
  // compiled without background_compile, the any-alignment kernels): NVRTC is loaded here first (that reads
  // sys.path), and their log records wait for the join.
  cuda::nvrtc_version();
  log::DeferredRecords records;
  auto compile_apart = [&](const codegen::ProgramPart& part) {
    log::DeferredRecords::Scope scope(records);
    return compile(part);
  };
  const auto start = std::chrono::steady_clock::now();
  PlanBinary out(source.parts.size());
  std::vector<std::future<std::shared_ptr<const std::string>>> others;
  for (size_t i = 1; i < source.parts.size(); ++i)
    others.push_back(std::async(std::launch::async, compile_apart, std::cref(source.parts[i])));
  // Every thread is waited for before anything is thrown: the others read `source`, which the caller owns.
  std::exception_ptr failed;
  try {
    if (!source.parts.empty()) out[0] = compile(source.parts[0]);
  } catch (...) {
    failed = std::current_exception();
  }
  for (size_t i = 0; i < others.size(); ++i) {
    try {
      out[i + 1] = others[i].get();
    } catch (...) {
      if (!failed) failed = std::current_exception();
    }
  }
  records.replay();
  if (failed) std::rethrow_exception(failed);
  if (source.parts.size() > 1)
    FC_LOG(compile, debug, "{} programs of the graph's kernels ready in {:.1f} ms, compiled side by side on {} NVRTC "
           "threads each", source.parts.size(),
           std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count(), threads);
  return out;
}

PlanBinary cached_plan_binary(const plan::Program& program, const CudaSource& source) {
  const cuda::CudaArch arch = cuda::device_info(program.device).arch;
  const int threads = threads_per_part(source.parts.size());
  PlanBinary out;
  for (const codegen::ProgramPart& part : source.parts) {
    out.push_back(cuda::cached_cuda_binary(part.source, part_name(out.size(), source.parts.size()), arch,
                                           cuda::Output::Cubin, {}, threads));
    if (!out.back()) return {};
  }
  return out;
}

LoadedPlan::LoadedPlan(const CudaSource& source, const PlanBinary& binary, int device) {
  for (size_t i = 0; i < source.parts.size(); ++i) {
    modules_.push_back(std::make_unique<cuda::LoadedModule>(*binary.at(i), device));
    names_.push_back(source.parts[i].kernels);
  }
}

cuda::CUfunction LoadedPlan::get_function(const std::string& name) const {
  for (size_t i = 0; i < modules_.size(); ++i)
    if (std::find(names_[i].begin(), names_[i].end(), name) != names_[i].end()) return modules_[i]->get_function(name);
  if (modules_.empty()) throw std::logic_error("fastcomp: a plan without kernels has no kernel '" + name + "'");
  return modules_.front()->get_function(name);  // names none: throws the driver's "no kernel named" error
}

}  // namespace fastcomp::runtime
