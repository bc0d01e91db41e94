// Compiling CUDA C++ with NVRTC, opened at first use. The only place that asks NVRTC its version, so every
// flag that depends on it is decided in nvrtc.cpp.
#pragma once
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/cuda/arch.h"

namespace fastcomp::runtime::cuda {

struct NvrtcVersion {
  int major = 0;
  int minor = 0;
  std::string to_string() const;  // "13.0"
  bool at_least(int major_, int minor_) const { return major > major_ || (major == major_ && minor >= minor_); }
};

// One NVRTC program's output: a program may hold many kernels (all kernels of a graph go into one, since each
// compile costs ~50 ms however small). `binary` is PTX text (no trailing NUL) or cubin bytes.
struct CompiledKernel {
  std::string program_name;
  CudaArch arch;
  Output kind = Output::Ptx;
  std::string binary;
  std::string log;  // NVRTC's warnings; empty when it had nothing to say
  NvrtcVersion nvrtc_version;
};

// NVRTC rejected a program, or cannot target the requested arch. `log` is NVRTC's full log; the caller adds
// the path of the dumped .cu when there is one.
struct NvrtcError : std::runtime_error {
  NvrtcError(std::string program_name, std::string log, const std::string& message)
      : std::runtime_error(message), program_name(std::move(program_name)), log(std::move(log)) {}
  std::string program_name;
  std::string log;
};

// The loaded NVRTC's version. Throws CudaLibraryError when NVRTC cannot be loaded.
NvrtcVersion nvrtc_version();

// The CPU cores this process may run on (its affinity mask, as os.sched_getaffinity).
int usable_cores();
// Threads NVRTC may use for one graph's programs: `configured` (fastcomp.config.nvrtc_threads) when positive,
// else all of `cores` but one, at most 8.
int nvrtc_threads(int configured, int cores);

// Every option compile_cuda passes to NVRTC for this source: the arch, -std=c++17, -default-device (so helper
// functions need no __device__), --minimal from NVRTC 12.4 on (a faster front end, the same code),
// --split-compile=<threads> (0: nvrtc_threads(...), for a program compiled alone) unless that is one thread,
// --Ofast-compile=<level> when fastcomp.config.nvrtc_fast_compile sets one (NVRTC 12.8 on),
// -I<CUDA include dir> when the source has an #include (cuda_fp16.h and friends are not built into NVRTC), then
// `extra_options` (e.g. -lineinfo). IEEE float semantics: no --use_fast_math unless the caller adds it. Part of
// the kernel cache key.
std::vector<std::string> nvrtc_options(std::string_view source, CudaArch arch, Output kind,
                                       const std::vector<std::string>& extra_options, int threads = 0);

// Compiles `source` (named `program_name` in NVRTC's messages) for `arch` on `threads` threads (nvrtc_options).
// Thread-safe, and programs compiled on several threads at once do not wait for each other; takes ~50 ms, so
// callers release the GIL. Throws NvrtcError (with NVRTC's log) or CudaLibraryError.
CompiledKernel compile_cuda(const std::string& source, const std::string& program_name, CudaArch arch, Output kind,
                            const std::vector<std::string>& extra_options, int threads = 0);

// compile_cuda's binary through the process's kernel cache (memory, then disk), keyed by the source, the
// program name, the NVRTC version and nvrtc_options(): any change to what could change the binary misses.
std::shared_ptr<const std::string> compile_cuda_cached(const std::string& source, const std::string& program_name,
                                                       CudaArch arch, Output kind,
                                                       const std::vector<std::string>& extra_options,
                                                       int threads = 0);

// compile_cuda_cached's binary when the kernel cache (memory or disk) already has it, else null; never compiles.
std::shared_ptr<const std::string> cached_cuda_binary(const std::string& source, const std::string& program_name,
                                                      CudaArch arch, Output kind,
                                                      const std::vector<std::string>& extra_options,
                                                      int threads = 0);

// Writes CUDA C that NVRTC rejected to the temp folder (fastcomp-failed-<hash>.cu), so that the warning can name
// a file for the bug report when no dump folder is set. Returns the path, "" when it cannot be written.
std::string save_rejected_source(const std::string& source);

}  // namespace fastcomp::runtime::cuda
