#include "runtime/cuda/arch.h"

#include "runtime/cuda/driver.h"

namespace fastcomp::runtime::cuda {

const char* output_name(Output kind) { return kind == Output::Ptx ? "ptx" : "cubin"; }

CudaArch CudaArch::of_device(int device) {
  CUdevice handle = 0;
  FC_CU_CHECK(cuDeviceGet(&handle, device));
  CudaArch arch;
  FC_CU_CHECK(cuDeviceGetAttribute(&arch.major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, handle));
  FC_CU_CHECK(cuDeviceGetAttribute(&arch.minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, handle));
  return arch;
}

std::string CudaArch::name() const { return "sm_" + std::to_string(sm()); }

std::string CudaArch::nvrtc_arch_flag(Output kind) const {
  return (kind == Output::Cubin ? "-arch=sm_" : "-arch=compute_") + std::to_string(sm());
}

bool CudaArch::has_fp16_arithmetic() const { return *this >= CudaArch{5, 3}; }
bool CudaArch::has_bf16_arithmetic() const { return *this >= CudaArch{8, 0}; }

}  // namespace fastcomp::runtime::cuda
