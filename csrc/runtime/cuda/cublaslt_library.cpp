#include "runtime/cuda/cublaslt_library.h"

#include <dlfcn.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "runtime/cuda/driver.h"
#include "runtime/cuda/libraries.h"
#include "runtime/cuda/module.h"

namespace fastcomp::runtime::cuda {
namespace {

CublasLtApi load_cublaslt() {
  const LoadedLibrary& lib = load_library(Library::CublasLt);
  CublasLtApi api;
#define FC_CUBLASLT_FN(ret, name, params)                                                                    \
  api.name = reinterpret_cast<ret(*) params>(dlsym(lib.handle, #name));                                      \
  if (!api.name)                                                                                             \
    throw CudaLibraryError("fastcomp: the cuBLASLt at " + lib.path + " has no " #name                       \
                           "; to fix: install a newer one (pip install nvidia-cublas)");
#include "runtime/cuda/cublaslt_api.def"
#undef FC_CUBLASLT_FN
  return api;
}

const char* hint(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "cuBLASLt has no kernel for this combination of types, layouts, alignment and epilogue on this GPU; "
             "run this matmul through torch instead";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "cuBLASLt rejected a size, stride or attribute: a bug in how fastcomp describes this matmul, "
             "please report it with this message";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "this GPU lacks a feature the matmul needs (bf16 needs sm_80 or newer)";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "cuBLASLt could not start: check that a CUDA device is visible (nvidia-smi) and that the driver is at "
             "least as new as this cuBLAS";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "cuBLASLt could not allocate host or device memory";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the kernel failed to launch, often because of an earlier asynchronous error on the stream (rerun "
             "with CUDA_LAUNCH_BLOCKING=1 to find it)";
    default:
      return nullptr;
  }
}

}  // namespace

const CublasLtApi& cublaslt() {
  // Not a magic static: loading reads sys.path under the GIL, and a thread holding the GIL could be blocked
  // on the static's guard while we wait for the GIL. Racing loaders each build a table; the first one wins.
  static std::atomic<const CublasLtApi*> instance{nullptr};
  if (const CublasLtApi* loaded = instance.load(std::memory_order_acquire)) return *loaded;
  auto fresh = std::make_unique<CublasLtApi>(load_cublaslt());
  const CublasLtApi* expected = nullptr;
  if (instance.compare_exchange_strong(expected, fresh.get(), std::memory_order_acq_rel)) return *fresh.release();
  return *expected;
}

std::string cublaslt_version() {
  size_t v = cublaslt().cublasLtGetVersion();
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

std::string describe_cublas_status(cublasStatus_t status) {
  const CublasLtApi& api = cublaslt();
  std::string name = api.cublasLtGetStatusName(status);
  std::string out = name.starts_with("CUBLAS_STATUS_") ? name : "cublasStatus_t " + std::to_string(status);
  if (const char* text = api.cublasLtGetStatusString(status); text && name.starts_with("CUBLAS_STATUS_"))
    out += " (" + std::string(text) + ")";
  if (const char* h = hint(status)) out += "; " + std::string(h);
  return out;
}

void throw_cublas_error(cublasStatus_t status, const char* call, const std::source_location& where) {
  throw CublasError(status, call,
                    std::string(qualified_name(where.function_name())) + "(): " + call +
                        " failed: " + describe_cublas_status(status));
}

cublasLtHandle_t cublaslt_handle(int device) {
  static std::mutex mutex;
  static std::unordered_map<int, cublasLtHandle_t> handles;
  const CublasLtApi& api = cublaslt();  // before the lock: loading may take the GIL
  std::lock_guard lock(mutex);
  if (auto it = handles.find(device); it != handles.end()) return it->second;
  ContextGuard context(device);
  cublasLtHandle_t handle = nullptr;
  check_cublas(api.cublasLtCreate(&handle), "cublasLtCreate(&handle)");
  handles.emplace(device, handle);
  return handle;
}

}  // namespace fastcomp::runtime::cuda
