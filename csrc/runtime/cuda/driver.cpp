#include "runtime/cuda/driver.h"

#include <dlfcn.h>

#include <string_view>

#include "runtime/cuda/libraries.h"

namespace fastcomp::runtime::cuda {
namespace {

std::string name_and_text(const DriverApi& api, CUresult code) {
  const char* name = nullptr;
  const char* text = nullptr;
  // Either lookup fails for a code this driver does not know; say which number it was instead.
  if (api.cuGetErrorName(code, &name) != CUDA_SUCCESS || !name) return "CUresult " + std::to_string(code);
  std::string out = name;
  if (api.cuGetErrorString(code, &text) == CUDA_SUCCESS && text) out += " (" + std::string(text) + ")";
  return out;
}

const char* hint(CUresult code) {
  switch (code) {
    case CUDA_ERROR_NO_DEVICE:
      return "no CUDA device is visible to this process: check nvidia-smi and CUDA_VISIBLE_DEVICES";
    case CUDA_ERROR_STUB_LIBRARY:
      return "the libcuda.so.1 that was loaded is the toolkit's link-time stub: make sure the driver's libcuda.so.1 "
             "comes first on the loader path (remove lib64/stubs from LD_LIBRARY_PATH)";
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
      return "the PTX comes from an NVRTC newer than this driver: compile to a cubin for the device's arch, "
             "install an NVRTC no newer than the driver's CUDA version, or update the driver";
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
      return "the cubin was compiled for another GPU arch: compile for CudaArch::of_device() of this device";
    default:
      return nullptr;
  }
}

DriverApi load_driver() {
  const LoadedLibrary& lib = load_library(Library::Driver);
  DriverApi api;
#define FC_CU_FN(ret, name, params)                                                                          \
  api.name = reinterpret_cast<ret(*) params>(dlsym(lib.handle, #name));                                      \
  if (!api.name)                                                                                             \
    throw CudaLibraryError("fastcomp: the CUDA driver at " + lib.path + " has no " #name                    \
                           "; to fix: update the NVIDIA driver");
#include "runtime/cuda/driver_api.def"
#undef FC_CU_FN
  if (CUresult r = api.cuInit(0); r != CUDA_SUCCESS) {
    std::string message = "fastcomp::runtime::cuda::driver(): cuInit(0) failed: " + name_and_text(api, r);
    if (const char* h = hint(r)) message += "; " + std::string(h);
    throw CudaError(r, "cuInit(0)", message);
  }
  return api;
}

}  // namespace

std::string_view qualified_name(std::string_view function) {
  function = function.substr(0, function.find('('));
  if (size_t space = function.rfind(' '); space != std::string_view::npos) function.remove_prefix(space + 1);
  return function;
}

const DriverApi& driver() {
  // A magic static is safe here: loading the driver never takes the GIL (it is not searched for in sys.path).
  // A throw leaves it uninitialised, so the next call tries again and throws the same error.
  static const DriverApi api = load_driver();
  return api;
}

std::string describe_cu_result(CUresult code) {
  std::string out = name_and_text(driver(), code);
  if (const char* h = hint(code)) out += "; " + std::string(h);
  return out;
}

void throw_cuda_error(CUresult code, const char* call, const std::source_location& where) {
  throw CudaError(code, call,
                  std::string(qualified_name(where.function_name())) + "(): " + call +
                      " failed: " + describe_cu_result(code));
}

}  // namespace fastcomp::runtime::cuda
