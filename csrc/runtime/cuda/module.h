// Loading compiled kernels into the GPU and launching them. Everything runs in the device's primary context,
// the one torch's CUDA runtime uses, so torch's tensors, streams and our kernels are mutually usable.
#pragma once
#include <string>

#include "runtime/cuda/cuda_api.h"

namespace fastcomp::runtime::cuda {

// Makes device `device`'s primary context current on this thread for the guard's lifetime and restores the
// thread's previous context afterwards, so torch's idea of the current device is left as it was. The primary
// context is retained once per device and kept for the life of the process, as torch does.
class ContextGuard {
 public:
  explicit ContextGuard(int device);
  ~ContextGuard();
  ContextGuard(const ContextGuard&) = delete;
  ContextGuard& operator=(const ContextGuard&) = delete;

 private:
  CUcontext previous_ = nullptr;
  bool switched_ = false;
};

// A module (cubin or PTX) loaded into one device's primary context; unloaded when destroyed.
class LoadedModule {
 public:
  // `image` is a cubin or PTX text. Throws CudaError (e.g. a cubin of another arch, PTX newer than the driver).
  LoadedModule(const std::string& image, int device);
  ~LoadedModule();
  LoadedModule(const LoadedModule&) = delete;
  LoadedModule& operator=(const LoadedModule&) = delete;

  // The kernel named `name` (its extern "C" name; C++ names are mangled). Throws CudaError if there is none.
  CUfunction get_function(const std::string& name) const;
  int device() const { return device_; }

 private:
  CUmodule module_ = nullptr;
  int device_ = 0;
};

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// Lets `function` use up to `bytes` of dynamic shared memory; needed above the default 48 KiB.
void set_max_dynamic_shared_memory(CUfunction function, int bytes);

// Queues `function` on `stream` (the caller's, e.g. torch's current stream; not synchronised). `args` holds one
// pointer per kernel parameter, to that parameter's value. The function's context must be current (a
// ContextGuard for the module's device).
void launch(CUfunction function, Dim3 grid, Dim3 block, unsigned shared_mem_bytes, CUstream stream, void** args);

// Queues a copy of `bytes` bytes between two device addresses of the current context on `stream`.
void copy_async(void* dst, const void* src, size_t bytes, CUstream stream);

// Queues an instantiated CUDA graph (e.g. torch.cuda.CUDAGraph.raw_cuda_graph_exec()) on `stream`.
void launch_graph(CUgraphExec exec, CUstream stream);

// Whether `stream` is recording a CUDA graph (or cannot say).
bool stream_capturing(CUstream stream);

// Waits for everything queued on `stream`; a kernel's asynchronous fault surfaces here as a CudaError.
void synchronize(CUstream stream);

}  // namespace fastcomp::runtime::cuda
