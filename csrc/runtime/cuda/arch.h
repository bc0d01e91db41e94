// A GPU architecture (compute capability) and the features code generation asks about. The only place SM
// numbers are compared: codegen asks arch.has_bf16_arithmetic(), never `sm >= 80`.
#pragma once
#include <compare>
#include <string>

namespace fastcomp::runtime::cuda {

// What NVRTC produces: PTX for a virtual arch (compute_90; any newer GPU can JIT it, if its driver is at least
// as new as NVRTC) or a cubin for one real arch (sm_90; loads without a JIT step, on GPUs of that arch only).
enum class Output { Ptx, Cubin };
const char* output_name(Output kind);  // "ptx", "cubin"

struct CudaArch {
  int major = 0;
  int minor = 0;

  // The compute capability of CUDA device `device` (an ordinal, as torch numbers them), from the driver.
  static CudaArch of_device(int device);

  int sm() const { return major * 10 + minor; }  // 90 for 9.0, 120 for 12.0: NVRTC's numbering
  std::string name() const;                      // "sm_90"
  // "-arch=sm_90" for a cubin, "-arch=compute_90" for PTX.
  std::string nvrtc_arch_flag(Output kind) const;

  bool has_fp16_arithmetic() const;  // native __half arithmetic (sm_53+); storage and conversions work anywhere
  bool has_bf16_arithmetic() const;  // native __nv_bfloat16 arithmetic and conversions (sm_80+)
  bool has_bf16_widening() const;    // one instruction from bf16 to f32, cvt.f32.bf16 (sm_90+)

  auto operator<=>(const CudaArch&) const = default;
};

// What code generation sizes launches by, read from the driver once per device.
struct DeviceInfo {
  CudaArch arch;
  int sm_count = 0;
  int max_threads_per_block = 0;
  int max_threads_per_sm = 0;
  int max_shared_per_block = 0;  // bytes of shared memory one block may opt into (227 KB on an H100)
};
// Throws CudaError / CudaLibraryError when the device cannot be queried.
const DeviceInfo& device_info(int device);

}  // namespace fastcomp::runtime::cuda
