// fastcomp._C._testing: the CUDA runtime's entry points for tests (library search, NVRTC, kernel cache, module
// loading and launching) and the Python types of its errors. Compiles release the GIL, as the compiler will.
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "bindings/bind.h"
#include "runtime/cuda/arch.h"
#include "runtime/cuda/driver.h"
#include "runtime/cuda/libraries.h"
#include "runtime/cuda/module.h"
#include "runtime/cuda/nvrtc.h"
#include "runtime/kernel_cache.h"

namespace fastcomp::bindings {
namespace {
namespace cuda = runtime::cuda;
using Dim3Tuple = std::tuple<unsigned, unsigned, unsigned>;

cuda::Output output_arg(const std::string& kind) {
  if (kind == "ptx") return cuda::Output::Ptx;
  if (kind == "cubin") return cuda::Output::Cubin;
  throw py::value_error("kind must be 'ptx' or 'cubin', not '" + kind + "'");
}

py::dict library_status_dict(cuda::Library library) {
  cuda::LibraryStatus status = cuda::library_status(library);
  py::dict out;
  out["name"] = cuda::library_name(library);
  out["path"] = status.loaded ? py::object(py::str(status.loaded->path)) : py::object(py::none());
  out["error"] = status.error;
  return out;
}

// One 8-byte slot per kernel parameter: an int fills it as int64 (pointers from data_ptr(), int64_t, and on
// little-endian hosts int32_t too, whose value is the slot's first 4 bytes); a float as a 32-bit float.
union ParamSlot {
  int64_t i;
  float f;
};

void load_and_launch(const std::string& image, const std::string& function, Dim3Tuple grid, Dim3Tuple block,
                     const py::list& args, uintptr_t stream, unsigned shared_mem, int device) {
  std::vector<ParamSlot> slots(args.size());
  std::vector<void*> pointers(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    py::handle arg = args[i];
    if (py::isinstance<py::float_>(arg))
      slots[i].f = arg.cast<float>();
    else if (py::isinstance<py::int_>(arg))
      slots[i].i = arg.cast<int64_t>();
    else
      throw py::type_error("kernel arguments must be int or float, not " +
                           std::string(py::str(py::type::handle_of(arg))));
    pointers[i] = &slots[i];
  }
  py::gil_scoped_release release;
  cuda::LoadedModule module(image, device);
  cuda::CUfunction fn = module.get_function(function);
  if (shared_mem > 48 * 1024) cuda::set_max_dynamic_shared_memory(fn, static_cast<int>(shared_mem));
  auto [gx, gy, gz] = grid;
  auto [bx, by, bz] = block;
  auto cu_stream = reinterpret_cast<cuda::CUstream>(stream);
  cuda::ContextGuard context(device);
  cuda::launch(fn, {gx, gy, gz}, {bx, by, bz}, shared_mem, cu_stream, pointers.data());
  // The module is unloaded on return, so the kernel must have finished; this also surfaces its faults here.
  cuda::synchronize(cu_stream);
}

}  // namespace

void bind_cuda(py::module_& m) {
  using namespace pybind11::literals;
  py::register_exception<cuda::CudaLibraryError>(m, "CudaLibraryError", PyExc_RuntimeError);
  py::register_exception<cuda::CudaError>(m, "CudaError", PyExc_RuntimeError);
  py::register_exception<cuda::NvrtcError>(m, "NvrtcError", PyExc_RuntimeError);

  m.def(
      "cuda_libraries_status",
      [] {
        py::list out;
        for (cuda::Library library : cuda::kAllLibraries) out.append(library_status_dict(library));
        return out;
      },
      "One dict per CUDA library {name, path (None if not found), error}; loads each on first call.");
  m.def(
      "cuda_find_library",
      [](const std::string& what, const std::vector<std::string>& sonames, const std::string& fix) {
        return cuda::find_library(what, sonames, fix).path;
      },
      "what"_a, "sonames"_a, "fix"_a = "test fix",
      "Runs the library search now for `sonames` and returns the path found; raises CudaLibraryError naming every "
      "place searched otherwise.");
  m.def("nvrtc_version", [] {
    cuda::NvrtcVersion v = cuda::nvrtc_version();
    return std::make_tuple(v.major, v.minor);
  });
  m.def("usable_cores", &cuda::usable_cores);
  m.def("nvrtc_threads", &cuda::nvrtc_threads, "configured"_a, "cores"_a);
  m.def(
      "nvrtc_options",
      [](const std::string& source, int major, int minor, const std::string& kind,
         const std::vector<std::string>& options, int threads) {
        return cuda::nvrtc_options(source, {major, minor}, output_arg(kind), options, threads);
      },
      "source"_a, "arch_major"_a, "arch_minor"_a, "kind"_a = "ptx", "options"_a = std::vector<std::string>{},
      "threads"_a = 0);
  m.def(
      "nvrtc_compile",
      [](const std::string& source, const std::string& name, int major, int minor, const std::string& kind,
         const std::vector<std::string>& options) {
        cuda::Output output = output_arg(kind);
        std::string binary;
        {
          py::gil_scoped_release release;
          binary = cuda::compile_cuda(source, name, {major, minor}, output, options).binary;
        }
        return py::bytes(binary);
      },
      "source"_a, "name"_a, "arch_major"_a, "arch_minor"_a, "kind"_a = "ptx",
      "options"_a = std::vector<std::string>{}, "Compiles with NVRTC (no cache); returns the PTX or cubin.");
  m.def(
      "kernel_cache_get_or_compile",
      [](const std::string& source, const std::string& name, int major, int minor, const std::string& kind,
         const std::vector<std::string>& options) {
        cuda::Output output = output_arg(kind);
        std::shared_ptr<const std::string> binary;
        {
          py::gil_scoped_release release;
          binary = cuda::compile_cuda_cached(source, name, {major, minor}, output, options);
        }
        return py::bytes(*binary);
      },
      "source"_a, "name"_a, "arch_major"_a, "arch_minor"_a, "kind"_a = "ptx",
      "options"_a = std::vector<std::string>{}, "nvrtc_compile through the process's kernel cache.");
  m.def("kernel_cache_stats", [] {
    runtime::KernelCacheStats s = runtime::kernel_cache().stats();
    return py::dict("memory_hits"_a = s.memory_hits, "disk_hits"_a = s.disk_hits, "misses"_a = s.misses,
                    "rejected_files"_a = s.rejected_files, "write_failures"_a = s.write_failures);
  });
  m.def("kernel_cache_dir", [] { return runtime::kernel_cache().directory().string(); });
  m.def(
      "kernel_cache_reset",
      [](std::optional<std::string> directory) {
        runtime::kernel_cache().reset(directory ? std::filesystem::path(*directory)
                                                : runtime::default_kernel_cache_dir());
      },
      "directory"_a = py::none(),
      "Forgets the memory entries and counters and uses `directory` (default: the configured one), as a new "
      "process would; '' keeps entries in memory only.");
  m.def(
      "cuda_device_arch",
      [](int device) {
        cuda::CudaArch arch = cuda::CudaArch::of_device(device);
        return std::make_tuple(arch.major, arch.minor);
      },
      "device"_a = 0);
  m.def("load_and_launch", &load_and_launch, "image"_a, "function"_a, "grid"_a, "block"_a, "args"_a, "stream"_a,
        "shared_mem"_a = 0, "device"_a = 0,
        "Loads a cubin or PTX into `device`'s primary context, launches `function` on `stream` (an integer "
        "CUstream, e.g. torch.cuda.current_stream().cuda_stream) with `args` (ints as 64-bit slots, floats as "
        "float32) and waits for it.");
}

}  // namespace fastcomp::bindings
