// The CUDA driver API, opened at first use: one function table built from driver_api.def, and FC_CU_CHECK,
// which turns a failed call into a CudaError naming the call, the CUresult and the fastcomp function.
#pragma once
#include <source_location>
#include <stdexcept>
#include <string>
#include <string_view>

#include "runtime/cuda/cuda_api.h"

namespace fastcomp::runtime::cuda {

// The driver's functions, one member per row of driver_api.def, all non-null once driver() returns.
struct DriverApi {
#define FC_CU_FN(ret, name, params) ret(*name) params = nullptr;
#include "runtime/cuda/driver_api.def"
#undef FC_CU_FN
};

// Loads libcuda.so.1, resolves every row of driver_api.def and calls cuInit(0), once per process (thread-safe).
// Throws CudaLibraryError if the driver is missing or too old to have a symbol, CudaError if cuInit fails (no
// GPU visible, ...).
const DriverApi& driver();

// A CUDA driver call failed. `call` is the call's source text, as written at the FC_CU_CHECK.
struct CudaError : std::runtime_error {
  CudaError(CUresult code, std::string call, const std::string& message)
      : std::runtime_error(message), code(code), call(std::move(call)) {}
  CUresult code;
  std::string call;
};

// "CUDA_ERROR_INVALID_IMAGE (device kernel image is invalid)", plus what to do for the errors that have a
// usual cause.
std::string describe_cu_result(CUresult code);

// "fastcomp::runtime::cuda::launch" from GCC's and Clang's "void fastcomp::runtime::cuda::launch(CUfunction, ...)"
// (std::source_location::function_name()): the function an error message names.
std::string_view qualified_name(std::string_view function);

[[noreturn]] void throw_cuda_error(CUresult code, const char* call, const std::source_location& where);

inline void check_cu(CUresult result, const char* call,
                     const std::source_location& where = std::source_location::current()) {
  if (result != CUDA_SUCCESS) [[unlikely]]
    throw_cuda_error(result, call, where);
}

}  // namespace fastcomp::runtime::cuda

// FC_CU_CHECK(cuModuleLoadData(&module, image)) calls the function through driver() and throws CudaError if
// it fails: "fastcomp::runtime::cuda::LoadedModule::LoadedModule(): cuModuleLoadData(&module, image) failed:
// CUDA_ERROR_INVALID_IMAGE (device kernel image is invalid)".
#define FC_CU_CHECK(call) ::fastcomp::runtime::cuda::check_cu(::fastcomp::runtime::cuda::driver().call, #call)
