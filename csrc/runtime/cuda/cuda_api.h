// The few CUDA driver and NVRTC declarations fastcomp uses, written out here so that building fastcomp needs
// no CUDA headers: the libraries are opened with dlopen at first use (libraries.h) and their functions found
// with dlsym (driver.h, nvrtc.h). Each declaration mirrors the header named beside it, as shipped with CUDA
// 13.0; both C APIs keep these values and signatures stable across releases, and a function whose ABI changed
// gets a new, versioned symbol (see driver_api.def).
#pragma once
#include <cstddef>

namespace fastcomp::runtime::cuda {

// ---- cuda.h ------------------------------------------------------------------------------------------------
using CUresult = int;  // cuda.h: enum cudaError_enum
using CUdevice = int;  // cuda.h: typedef int CUdevice_v1
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUdevice_attribute = int;    // cuda.h: enum CUdevice_attribute_enum
using CUfunction_attribute = int;  // cuda.h: enum CUfunction_attribute_enum

inline constexpr CUresult CUDA_SUCCESS = 0;
inline constexpr CUresult CUDA_ERROR_DEINITIALIZED = 4;
inline constexpr CUresult CUDA_ERROR_STUB_LIBRARY = 34;
inline constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
inline constexpr CUresult CUDA_ERROR_NO_BINARY_FOR_GPU = 209;
inline constexpr CUresult CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222;
inline constexpr CUresult CUDA_ERROR_NOT_FOUND = 500;
inline constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
inline constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
inline constexpr CUfunction_attribute CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;

// ---- nvrtc.h -----------------------------------------------------------------------------------------------
using nvrtcResult = int;  // nvrtc.h: enum nvrtcResult
using nvrtcProgram = struct _nvrtcProgram*;

inline constexpr nvrtcResult NVRTC_SUCCESS = 0;

}  // namespace fastcomp::runtime::cuda
