// GPU time of work queued on a stream, from a pair of CUDA events: what cuBLASLt tuning and the CUDA-graph
// executable's comparison of matmul picks measure.
#pragma once
#include "runtime/cuda/driver.h"

namespace fastcomp::runtime::cuda {

// Two events, destroyed with the pair. Record `start` and `stop` around the work, then elapsed_ms().
struct EventPair {
  CUevent start = nullptr, stop = nullptr;
  EventPair();  // throws CudaError
  ~EventPair();
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  // Milliseconds of GPU time from start to stop; waits for stop. Throws CudaError.
  double elapsed_ms() const;
};

}  // namespace fastcomp::runtime::cuda
