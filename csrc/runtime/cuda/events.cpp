#include "runtime/cuda/events.h"

namespace fastcomp::runtime::cuda {

EventPair::EventPair() {
  FC_CU_CHECK(cuEventCreate(&start, 0));
  try {
    FC_CU_CHECK(cuEventCreate(&stop, 0));
  } catch (...) {
    driver().cuEventDestroy_v2(start);
    throw;
  }
}

EventPair::~EventPair() {
  driver().cuEventDestroy_v2(start);
  driver().cuEventDestroy_v2(stop);
}

double EventPair::elapsed_ms() const {
  FC_CU_CHECK(cuEventSynchronize(stop));
  float ms = 0;
  FC_CU_CHECK(cuEventElapsedTime(&ms, start, stop));
  return ms;
}

}  // namespace fastcomp::runtime::cuda
