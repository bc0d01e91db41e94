#include "runtime/cuda/nvrtc.h"

#include <fmt/format.h>

#include <array>

#include <dlfcn.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <optional>
#include <thread>

#include "runtime/cuda/cuda_api.h"
#include "runtime/cuda/libraries.h"
#include "runtime/kernel_cache.h"
#include "support/config.h"
#include "support/file_io.h"
#include "support/log.h"

namespace fastcomp::runtime::cuda {
namespace fs = std::filesystem;
namespace {

constexpr const char* kWhere = "fastcomp::runtime::cuda::compile_cuda(): ";

// NVRTC's functions (one member per row of nvrtc_api.def) and the facts about it that are fixed once loaded.
struct Nvrtc {
#define FC_NVRTC_FN(ret, name, params) ret(*name) params = nullptr;
#include "runtime/cuda/nvrtc_api.def"
#undef FC_NVRTC_FN
  NvrtcVersion version;
  std::vector<int> supported_sms;  // NVRTC's list of real archs, ascending: 75, 80, ..., 121
  std::optional<fs::path> include_dir;
  std::vector<std::string> include_dirs_searched;
};

// NVRTC loads libnvrtc-builtins.so.<major>.<minor> at its first compile by soname, and it has no RUNPATH, so
// from a pip wheel (not on the loader path) that fails with "failed to open libnvrtc-builtins". Loading it
// ourselves, from NVRTC's own folder, makes NVRTC's lookup find it already in the process.
void load_builtins(const fs::path& nvrtc_path, NvrtcVersion version) {
  std::string soname = "libnvrtc-builtins.so." + version.to_string();
  fs::path beside = nvrtc_path.parent_path() / soname;
  const char* fix =
      "\nto fix: reinstall the nvidia-cuda-nvrtc wheel, or set FASTCOMP_CUDA_HOME to a complete CUDA toolkit";
  std::error_code ec;
  if (fs::exists(beside, ec)) {
    if (dlopen(beside.c_str(), RTLD_NOW)) return;
    throw CudaLibraryError("fastcomp: cannot load " + beside.string() + ", which NVRTC " + version.to_string() +
                           " needs: " + dlerror() + fix);
  }
  if (dlopen(soname.c_str(), RTLD_NOW)) return;
  throw CudaLibraryError("fastcomp: NVRTC " + version.to_string() + " at " + nvrtc_path.string() + " needs " +
                         soname + ", which is neither in " + nvrtc_path.parent_path().string() +
                         " nor on the loader path (" + dlerror() + ")" + fix);
}

Nvrtc load_nvrtc() {
  const LoadedLibrary& lib = load_library(Library::Nvrtc);
  Nvrtc api;
#define FC_NVRTC_FN(ret, name, params)                                                                       \
  api.name = reinterpret_cast<ret(*) params>(dlsym(lib.handle, #name));                                      \
  if (!api.name)                                                                                             \
    throw CudaLibraryError("fastcomp: the NVRTC at " + lib.path + " has no " #name                          \
                           "; to fix: install a newer one (pip install nvidia-cuda-nvrtc)");
#include "runtime/cuda/nvrtc_api.def"
#undef FC_NVRTC_FN
  api.nvrtcVersion(&api.version.major, &api.version.minor);
  load_builtins(lib.path, api.version);
  int count = 0;
  api.nvrtcGetNumSupportedArchs(&count);
  api.supported_sms.resize(count);
  if (count > 0) api.nvrtcGetSupportedArchs(api.supported_sms.data());
  std::sort(api.supported_sms.begin(), api.supported_sms.end());
  api.include_dir = cuda_include_dir(&api.include_dirs_searched);
  return api;
}

const Nvrtc& nvrtc() {
  // Not a magic static: loading reads sys.path under the GIL, and a thread holding the GIL could be blocked
  // on the static's guard while we wait for the GIL. Racing loaders each build a table; the first one wins.
  static std::atomic<const Nvrtc*> instance{nullptr};
  if (const Nvrtc* loaded = instance.load(std::memory_order_acquire)) return *loaded;
  auto fresh = std::make_unique<Nvrtc>(load_nvrtc());
  const Nvrtc* expected = nullptr;
  if (instance.compare_exchange_strong(expected, fresh.get(), std::memory_order_acq_rel)) return *fresh.release();
  return *expected;
}

std::string join(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

void check_supported(const Nvrtc& api, CudaArch arch, const std::string& program_name) {
  if (api.supported_sms.empty() ||
      std::find(api.supported_sms.begin(), api.supported_sms.end(), arch.sm()) != api.supported_sms.end())
    return;
  throw NvrtcError(program_name, "",
                   kWhere + std::string("NVRTC ") + api.version.to_string() + " cannot compile for " + arch.name() +
                       " (it supports sm_" + std::to_string(api.supported_sms.front()) + " to sm_" +
                       std::to_string(api.supported_sms.back()) +
                       "); to fix: install an NVRTC that supports this GPU (pip install nvidia-cuda-nvrtc)");
}

// Destroys the program however compile_cuda leaves.
struct ProgramGuard {
  const Nvrtc& api;
  nvrtcProgram program = nullptr;
  ~ProgramGuard() {
    if (program) api.nvrtcDestroyProgram(&program);
  }
};

void check(const Nvrtc& api, nvrtcResult result, const char* call, const std::string& program_name) {
  if (result != NVRTC_SUCCESS)
    throw NvrtcError(program_name, "",
                     kWhere + std::string(call) + " failed for program '" + program_name + "': " +
                         api.nvrtcGetErrorString(result));
}

std::string program_log(const Nvrtc& api, nvrtcProgram program) {
  size_t size = 0;
  if (api.nvrtcGetProgramLogSize(program, &size) != NVRTC_SUCCESS || size <= 1) return "";
  std::string log(size, '\0');
  if (api.nvrtcGetProgramLog(program, log.data()) != NVRTC_SUCCESS) return "";
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n' || log.back() == ' ')) log.pop_back();
  return log;
}

std::string compile_failure_message(const Nvrtc& api, nvrtcResult result, const std::string& program_name,
                                    CudaArch arch, const std::vector<std::string>& options, const std::string& log) {
  std::string message = kWhere + std::string("NVRTC ") + api.version.to_string() + " failed to compile program '" +
                        program_name + "' for " + arch.name() + " (" + api.nvrtcGetErrorString(result) +
                        ")\noptions: " + join(options, " ") + "\nlog:\n" + log;
  if (log.find("could not open source file") != std::string::npos && !api.include_dir)
    message += "\nno CUDA include directory (one with cuda_fp16.h) was found; searched: " +
               join(api.include_dirs_searched, ", ") +
               "\nto fix: pip install nvidia-cuda-runtime (it ships the headers), or set FASTCOMP_CUDA_HOME to a "
               "CUDA toolkit";
  return message;
}

}  // namespace

std::string NvrtcVersion::to_string() const { return std::to_string(major) + "." + std::to_string(minor); }

NvrtcVersion nvrtc_version() { return nvrtc().version; }

int usable_cores() {
  cpu_set_t cores;
  if (sched_getaffinity(0, sizeof(cores), &cores) == 0) return CPU_COUNT(&cores);
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

int nvrtc_threads(int configured, int cores) {
  if (configured > 0) return configured;
  // The thread that asked for the kernels goes on running the graph through torch while they compile, so NVRTC
  // gets the other cores: on a 2-core box that was also busy, splitting made W7 and W9 5-10% slower. At most 8:
  // the work splits by kernel (a graph's kernels into programs a thread each, and a program's over its
  // --split-compile threads), and several graphs may be compiling side by side.
  return std::clamp(cores - 1, 1, 8);
}

std::vector<std::string> nvrtc_options(std::string_view source, CudaArch arch, Output kind,
                                       const std::vector<std::string>& extra_options, int threads) {
  const Nvrtc& api = nvrtc();
  std::vector<std::string> options = {arch.nvrtc_arch_flag(kind), "-std=c++17", "-default-device"};
  // --minimal leaves out the texture, device-runtime and driver-type declarations that every program would
  // otherwise parse (~10 ms a program on a 2-core Xeon; scripts/nvrtc_compile_time.py) and changes no machine
  // code (tests/codegen/test_emit_cuda.py). It came with NVRTC 12.4.
  if (api.version.at_least(12, 4)) options.push_back("--minimal");
  // --no-cache: NVRTC 12.9 and later keep a cache of their own next to the driver's JIT cache, and opening it
  // costs the first compile of every process 180-250 ms (H200 host, NVRTC 13.0, a cache directory that exists;
  // scripts/compile_breakdown.py). fastcomp's kernel cache already keeps every cubin it compiles, so NVRTC's
  // would only duplicate it at that price.
  if (api.version.at_least(12, 9)) options.push_back("--no-cache");
  // --split-compile=N: NVVM and ptxas optimise the program's kernels on up to N threads. Every NVRTC fastcomp
  // loads takes it (tried on 12.0 to 13.0; documented from 12.2). N does not change the code, but splitting can:
  // NVVM then optimises each part of a program of several kernels on its own, and kernels with __shared__ slots
  // may come out otherwise (of W1-W9 only W7's k2: other instructions, as many, as many registers; a five-kernel
  // test program's RMSNorm went from 40 to 32 registers). The same results either way; which is faster is for a
  // GPU to tell. One thread is the serial compile, and the option is left out so that its cache key is too.
  if (threads <= 0) threads = nvrtc_threads(config().nvrtc_threads, usable_cores());
  if (threads > 1) options.push_back("--split-compile=" + std::to_string(threads));
  // --Ofast-compile (NVRTC 12.8+) only when fastcomp.config.nvrtc_fast_compile asks: =min compiled W7 11% faster on
  // an H100 host but its kernels ran 1-5% slower; =mid (98 ms instead of 127 on a 2-core Xeon) left the row loops
  // rolled and the per-thread arrays in local memory, and =max stops inlining the helpers. fastcomp compiles a
  // program once per disk cache, and runs it for the process's life.
  if (!config().nvrtc_fast_compile.empty() && api.version.at_least(12, 8))
    options.push_back("--Ofast-compile=" + config().nvrtc_fast_compile);
  // Only sources that include headers get the -I, so the cache key of the others does not depend on where
  // the headers happen to be installed.
  if (api.include_dir && source.find("#include") != std::string_view::npos)
    options.push_back("-I" + api.include_dir->string());
  options.insert(options.end(), extra_options.begin(), extra_options.end());
  return options;
}

CompiledKernel compile_cuda(const std::string& source, const std::string& program_name, CudaArch arch, Output kind,
                            const std::vector<std::string>& extra_options, int threads) {
  const Nvrtc& api = nvrtc();
  check_supported(api, arch, program_name);
  std::vector<std::string> options = nvrtc_options(source, arch, kind, extra_options, threads);
  std::vector<const char*> argv;
  for (const auto& option : options) argv.push_back(option.c_str());

  ProgramGuard guard{api};
  check(api, api.nvrtcCreateProgram(&guard.program, source.c_str(), program_name.c_str(), 0, nullptr, nullptr),
        "nvrtcCreateProgram", program_name);
  auto start = std::chrono::steady_clock::now();
  nvrtcResult result = api.nvrtcCompileProgram(guard.program, static_cast<int>(argv.size()), argv.data());
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::string log = program_log(api, guard.program);
  if (result != NVRTC_SUCCESS)
    throw NvrtcError(program_name, log, compile_failure_message(api, result, program_name, arch, options, log));

  CompiledKernel out{program_name, arch, kind, "", std::move(log), api.version};
  size_t size = 0;
  if (kind == Output::Ptx) {
    check(api, api.nvrtcGetPTXSize(guard.program, &size), "nvrtcGetPTXSize", program_name);
    out.binary.resize(size);
    check(api, api.nvrtcGetPTX(guard.program, out.binary.data()), "nvrtcGetPTX", program_name);
    if (!out.binary.empty() && out.binary.back() == '\0') out.binary.pop_back();
  } else {
    check(api, api.nvrtcGetCUBINSize(guard.program, &size), "nvrtcGetCUBINSize", program_name);
    out.binary.resize(size);
    check(api, api.nvrtcGetCUBIN(guard.program, out.binary.data()), "nvrtcGetCUBIN", program_name);
  }
  FC_LOG(compile, debug, "nvrtc {}: compiled '{}' to {} for {} in {:.1f} ms ({} bytes)", api.version.to_string(),
         program_name, output_name(kind), arch.name(), ms, out.binary.size());
  return out;
}

namespace {
// Every fact that can change the binary, in the kernel cache's key.
struct CacheKey {
  std::string version, options;
  std::array<std::string_view, 6> parts;
  CacheKey(const std::string& source, const std::string& program_name, CudaArch arch, Output kind,
           const std::vector<std::string>& extra_options, int threads)
      : version(nvrtc_version().to_string()),
        options(join(nvrtc_options(source, arch, kind, extra_options, threads), "\n")),
        parts{"nvrtc", version, output_name(kind), program_name, options, source} {}
};
}  // namespace

std::shared_ptr<const std::string> compile_cuda_cached(const std::string& source, const std::string& program_name,
                                                       CudaArch arch, Output kind,
                                                       const std::vector<std::string>& extra_options, int threads) {
  CacheKey key(source, program_name, arch, kind, extra_options, threads);
  return kernel_cache().get_or_compile(
      key.parts, [&] { return compile_cuda(source, program_name, arch, kind, extra_options, threads).binary; });
}

std::shared_ptr<const std::string> cached_cuda_binary(const std::string& source, const std::string& program_name,
                                                      CudaArch arch, Output kind,
                                                      const std::vector<std::string>& extra_options, int threads) {
  CacheKey key(source, program_name, arch, kind, extra_options, threads);
  return kernel_cache().find(key.parts);
}

std::string save_rejected_source(const std::string& source) {
  std::error_code ec;
  fs::path dir = fs::temp_directory_path(ec);
  if (ec) return "";
  fs::path path = dir / fmt::format("fastcomp-failed-{:016x}.cu", std::hash<std::string>{}(source));
  return write_file(path, source).empty() ? path.string() : "";
}

}  // namespace fastcomp::runtime::cuda
