// cuBLASLt, opened at first use: one function table built from cublaslt_api.def, one handle per device, and
// FC_CUBLAS_CHECK, which turns a failed call into a CublasError naming the call, the status and what to do.
#pragma once
#include <source_location>
#include <stdexcept>
#include <string>

#include "runtime/cuda/cuda_api.h"

namespace fastcomp::runtime::cuda {

// cuBLASLt's functions, one member per row of cublaslt_api.def, all non-null once cublaslt() returns.
struct CublasLtApi {
#define FC_CUBLASLT_FN(ret, name, params) ret(*name) params = nullptr;
#include "runtime/cuda/cublaslt_api.def"
#undef FC_CUBLASLT_FN
};

// Loads libcublasLt (libraries.h says where from) and resolves every row of cublaslt_api.def, once per process
// (thread-safe). Needs no GPU: descriptors can be built on a CPU-only machine. Throws CudaLibraryError if
// cuBLASLt is missing or lacks a symbol.
const CublasLtApi& cublaslt();

// "13.1.1" from cublasLtGetVersion() (13.1.1 is 130101). Throws CudaLibraryError.
std::string cublaslt_version();

// A cuBLASLt call failed. `call` is the call's source text as written at the FC_CUBLAS_CHECK; `status` its
// cublasStatus_t.
struct CublasError : std::runtime_error {
  CublasError(cublasStatus_t status, std::string call, const std::string& message)
      : std::runtime_error(message), status(status), call(std::move(call)) {}
  cublasStatus_t status;
  std::string call;
};

// "CUBLAS_STATUS_NOT_SUPPORTED (the requested functionality is not supported)", plus what to do for the
// statuses that have a usual cause. Loads cuBLASLt for the names; a status it does not know is named by number.
std::string describe_cublas_status(cublasStatus_t status);

[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const std::source_location& where);

inline void check_cublas(cublasStatus_t status, const char* call,
                         const std::source_location& where = std::source_location::current()) {
  if (status != CUBLAS_STATUS_SUCCESS) [[unlikely]]
    throw_cublas_error(status, call, where);
}

// The cuBLASLt handle of CUDA device `device` (an ordinal, as torch numbers them): created on first use in the
// device's primary context and kept for the life of the process (destroying it at exit could run after the
// driver has shut down). Thread-safe; cuBLASLt allows one handle to be used by many threads at once, since
// the stream and workspace are arguments of each call. Throws CudaLibraryError, CudaError or CublasError.
cublasLtHandle_t cublaslt_handle(int device);

}  // namespace fastcomp::runtime::cuda

// FC_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, ...)) calls the function through cublaslt() and throws
// CublasError if it fails: "fastcomp::runtime::cuda::MatmulPlan::MatmulPlan(): cublasLtMatmulAlgoGetHeuristic(...)
// failed: CUBLAS_STATUS_NOT_SUPPORTED (the requested functionality is not supported); <what to do>".
#define FC_CUBLAS_CHECK(call) \
  ::fastcomp::runtime::cuda::check_cublas(::fastcomp::runtime::cuda::cublaslt().call, #call)
