#include "runtime/cuda/module.h"

#include <mutex>
#include <unordered_map>

#include "runtime/cuda/driver.h"

namespace fastcomp::runtime::cuda {
namespace {

CUcontext primary_context(int device) {
  static std::mutex mutex;
  static std::unordered_map<int, CUcontext> retained;
  std::lock_guard lock(mutex);
  auto [it, inserted] = retained.try_emplace(device, nullptr);
  if (inserted) {
    try {
      CUdevice handle = 0;
      FC_CU_CHECK(cuDeviceGet(&handle, device));
      FC_CU_CHECK(cuDevicePrimaryCtxRetain(&it->second, handle));
    } catch (...) {
      retained.erase(it);
      throw;
    }
  }
  return it->second;
}

}  // namespace

ContextGuard::ContextGuard(int device) {
  CUcontext wanted = primary_context(device);
  FC_CU_CHECK(cuCtxGetCurrent(&previous_));
  if (previous_ != wanted) {
    FC_CU_CHECK(cuCtxSetCurrent(wanted));
    switched_ = true;
  }
}

ContextGuard::~ContextGuard() {
  // Restoring cannot fail for a context that was current a moment ago, and a destructor must not throw.
  if (switched_) driver().cuCtxSetCurrent(previous_);
}

LoadedModule::LoadedModule(const std::string& image, int device) : device_(device) {
  ContextGuard guard(device);
  // PTX must be NUL-terminated; std::string's c_str() is, and a cubin is read by its ELF header's sizes.
  FC_CU_CHECK(cuModuleLoadData(&module_, image.c_str()));
}

LoadedModule::~LoadedModule() {
  // At interpreter exit the driver may already be shutting down (CUDA_ERROR_DEINITIALIZED); the module then
  // goes with its context, so a failure here is nothing to report.
  try {
    ContextGuard guard(device_);
    driver().cuModuleUnload(module_);
  } catch (...) {
  }
}

CUfunction LoadedModule::get_function(const std::string& name) const {
  CUfunction function = nullptr;
  CUresult result = driver().cuModuleGetFunction(&function, module_, name.c_str());
  if (result == CUDA_ERROR_NOT_FOUND)
    throw CudaError(result, "cuModuleGetFunction",
                    "fastcomp::runtime::cuda::LoadedModule::get_function(): the module has no kernel named '" + name +
                        "' (a kernel is found by its extern \"C\" name; C++ names are mangled)");
  check_cu(result, "cuModuleGetFunction(&function, module_, name.c_str())");
  return function;
}

void set_max_dynamic_shared_memory(CUfunction function, int bytes) {
  FC_CU_CHECK(cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes));
}

void launch(CUfunction function, Dim3 grid, Dim3 block, unsigned shared_mem_bytes, CUstream stream, void** args) {
  FC_CU_CHECK(cuLaunchKernel(function, grid.x, grid.y, grid.z, block.x, block.y, block.z, shared_mem_bytes, stream,
                             args, nullptr));
}

void copy_async(void* dst, const void* src, size_t bytes, CUstream stream) {
  FC_CU_CHECK(cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src), bytes, stream));
}

void launch_graph(CUgraphExec exec, CUstream stream) { FC_CU_CHECK(cuGraphLaunch(exec, stream)); }

bool stream_capturing(CUstream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return driver().cuStreamIsCapturing(stream, &status) != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE;
}

void synchronize(CUstream stream) { FC_CU_CHECK(cuStreamSynchronize(stream)); }

}  // namespace fastcomp::runtime::cuda
