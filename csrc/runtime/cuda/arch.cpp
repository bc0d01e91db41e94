#include "runtime/cuda/arch.h"

#include <map>
#include <mutex>

#include "runtime/cuda/driver.h"

namespace fastcomp::runtime::cuda {
namespace {
// cuda.h: enum CUdevice_attribute_enum
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR = 39;
}  // namespace

const DeviceInfo& device_info(int device) {
  static std::mutex mutex;
  static std::map<int, DeviceInfo> known;
  std::lock_guard lock(mutex);
  if (auto it = known.find(device); it != known.end()) return it->second;
  DeviceInfo info;
  info.arch = CudaArch::of_device(device);
  CUdevice handle = 0;
  FC_CU_CHECK(cuDeviceGet(&handle, device));
  FC_CU_CHECK(cuDeviceGetAttribute(&info.sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, handle));
  FC_CU_CHECK(cuDeviceGetAttribute(&info.max_threads_per_block, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, handle));
  FC_CU_CHECK(
      cuDeviceGetAttribute(&info.max_threads_per_sm, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, handle));
  FC_CU_CHECK(cuDeviceGetAttribute(&info.max_shared_per_block, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                   handle));
  return known.emplace(device, info).first->second;
}

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
bool CudaArch::has_bf16_widening() const { return *this >= CudaArch{9, 0}; }

}  // namespace fastcomp::runtime::cuda
