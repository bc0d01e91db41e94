// The device memory cuBLASLt may use for split-K partial sums, shared the way torch shares its own: one workspace
// per (device, stream), used by every executable that queues matrix products on that stream (stream order keeps
// their uses apart), freed when the last executable holding it is gone. A capture into a CUDA graph uses a
// workspace of its own instead: the graph's replays may later run beside other work of the capture stream.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>

#include "cpython/pyref.h"
#include "runtime/cuda/cuda_api.h"

namespace fastcomp::runtime {

// What every cuBLASLt plan may use: torch's own default on Hopper. With 4 MiB, cuBLASLt's heuristic gave W7's
// 2048 -> 512 FF product no split-K algorithm (68 us on an H100 instead of 57; W7 fc-ro 244 -> 213 us/call).
inline constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

struct CublasWorkspace {
  PyRef tensor;  // a torch tensor of kCublasWorkspaceBytes bytes
  void* data = nullptr;
};

// The workspace of `stream` on CUDA device `device`; `allocate` makes it when the stream has none alive. Needs
// the GIL.
std::shared_ptr<CublasWorkspace> shared_cublas_workspace(int device, cuda::CUstream stream,
                                                         const std::function<std::shared_ptr<CublasWorkspace>()>& allocate);

}  // namespace fastcomp::runtime
