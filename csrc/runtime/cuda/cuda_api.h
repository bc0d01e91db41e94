// The few CUDA driver, NVRTC and cuBLASLt declarations fastcomp uses, written out here so that building fastcomp needs
// no CUDA headers: the libraries are opened with dlopen at first use (libraries.h) and their functions found
// with dlsym (driver.h, nvrtc.h). Each declaration mirrors the header named beside it, as shipped with CUDA
// 13.0 (cuBLASLt: cuBLAS 13.1, the nvidia-cublas wheel's headers); these C APIs keep their values and signatures
// stable across releases, and a function whose ABI changed gets a new, versioned symbol (see driver_api.def).
// C enums cross the ABI as int, so each enum type is declared as int and its values as constants.
#pragma once
#include <cstddef>
#include <cstdint>

namespace fastcomp::runtime::cuda {

// ---- cuda.h ------------------------------------------------------------------------------------------------
using CUresult = int;  // cuda.h: enum cudaError_enum
using CUdevice = int;  // cuda.h: typedef int CUdevice_v1
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUgraphExec = struct CUgraphExec_st*;  // the runtime's cudaGraphExec_t is the same handle
using CUgraph = struct CUgraph_st*;
using CUevent = struct CUevent_st*;
using CUstreamCaptureStatus = int;  // cuda.h: enum CUstreamCaptureStatus_enum
using CUstreamCaptureMode = int;    // cuda.h: enum CUstreamCaptureMode_enum
using CUdeviceptr = unsigned long long;     // cuda.h: typedef unsigned long long CUdeviceptr_v2
using CUdevice_attribute = int;    // cuda.h: enum CUdevice_attribute_enum
using CUfunction_attribute = int;  // cuda.h: enum CUfunction_attribute_enum

inline constexpr CUresult CUDA_SUCCESS = 0;
inline constexpr CUresult CUDA_ERROR_DEINITIALIZED = 4;
inline constexpr CUresult CUDA_ERROR_STUB_LIBRARY = 34;
inline constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
inline constexpr CUresult CUDA_ERROR_NO_BINARY_FOR_GPU = 209;
inline constexpr CUresult CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222;
inline constexpr CUresult CUDA_ERROR_NOT_FOUND = 500;
inline constexpr CUstreamCaptureStatus CU_STREAM_CAPTURE_STATUS_NONE = 0;
inline constexpr CUstreamCaptureMode CU_STREAM_CAPTURE_MODE_RELAXED = 2;
inline constexpr unsigned int CU_STREAM_NON_BLOCKING = 0x1;
inline constexpr unsigned int CU_EVENT_DISABLE_TIMING = 0x2;
inline constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
inline constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
inline constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97;
inline constexpr CUfunction_attribute CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;

// ---- nvrtc.h -----------------------------------------------------------------------------------------------
using nvrtcResult = int;  // nvrtc.h: enum nvrtcResult
using nvrtcProgram = struct _nvrtcProgram*;

inline constexpr nvrtcResult NVRTC_SUCCESS = 0;

// ---- library_types.h ---------------------------------------------------------------------------------------
using cudaDataType_t = int;  // library_types.h: enum cudaDataType_t
inline constexpr cudaDataType_t CUDA_R_32F = 0;
inline constexpr cudaDataType_t CUDA_R_16F = 2;
inline constexpr cudaDataType_t CUDA_R_16BF = 14;

// ---- cublas_api.h ------------------------------------------------------------------------------------------
using cublasStatus_t = int;       // cublas_api.h: enum cublasStatus_t
using cublasOperation_t = int;    // cublas_api.h: enum cublasOperation_t
using cublasComputeType_t = int;  // cublas_api.h: enum cublasComputeType_t

inline constexpr cublasStatus_t CUBLAS_STATUS_SUCCESS = 0;
inline constexpr cublasStatus_t CUBLAS_STATUS_NOT_INITIALIZED = 1;
inline constexpr cublasStatus_t CUBLAS_STATUS_ALLOC_FAILED = 3;
inline constexpr cublasStatus_t CUBLAS_STATUS_INVALID_VALUE = 7;
inline constexpr cublasStatus_t CUBLAS_STATUS_ARCH_MISMATCH = 8;
inline constexpr cublasStatus_t CUBLAS_STATUS_EXECUTION_FAILED = 13;
inline constexpr cublasStatus_t CUBLAS_STATUS_NOT_SUPPORTED = 15;
inline constexpr cublasOperation_t CUBLAS_OP_N = 0;
inline constexpr cublasOperation_t CUBLAS_OP_T = 1;
inline constexpr cublasComputeType_t CUBLAS_COMPUTE_32F = 68;
inline constexpr cublasComputeType_t CUBLAS_COMPUTE_32F_FAST_TF32 = 77;

// ---- cublasLt.h --------------------------------------------------------------------------------------------
using cublasLtHandle_t = struct cublasLtContext*;
// The descriptors are pointers to "semi-opaque" structs; only their pointer types are needed here.
using cublasLtMatmulDesc_t = struct cublasLtMatmulDescOpaque_st*;
using cublasLtMatrixLayout_t = struct cublasLtMatrixLayoutOpaque_st*;
using cublasLtMatmulPreference_t = struct cublasLtMatmulPreferenceOpaque_st*;
// cublasLt.h: typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t; copied by value, never looked into.
struct cublasLtMatmulAlgo_t {
  uint64_t data[8];
};
// cublasLt.h: the result of cublasLtMatmulAlgoGetHeuristic, field for field.
struct cublasLtMatmulHeuristicResult_t {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
};
static_assert(sizeof(cublasLtMatmulHeuristicResult_t) == 96, "must match cublasLt.h");

using cublasLtMatmulDescAttributes_t = int;        // cublasLt.h: enum cublasLtMatmulDescAttributes_t
using cublasLtMatrixLayoutAttribute_t = int;       // cublasLt.h: enum cublasLtMatrixLayoutAttribute_t
using cublasLtMatmulPreferenceAttributes_t = int;  // cublasLt.h: enum cublasLtMatmulPreferenceAttributes_t
using cublasLtEpilogue_t = int;                    // cublasLt.h: enum cublasLtEpilogue_t

// Attribute value types (the size passed to Set*Attribute must match them exactly) are in the comments.
inline constexpr cublasLtMatmulDescAttributes_t CUBLASLT_MATMUL_DESC_TRANSA = 3;        // int32_t
inline constexpr cublasLtMatmulDescAttributes_t CUBLASLT_MATMUL_DESC_TRANSB = 4;        // int32_t
inline constexpr cublasLtMatmulDescAttributes_t CUBLASLT_MATMUL_DESC_EPILOGUE = 7;      // uint32_t
inline constexpr cublasLtMatmulDescAttributes_t CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8;  // const void*
inline constexpr cublasLtMatmulDescAttributes_t CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE = 10;  // int64_t
inline constexpr cublasLtMatrixLayoutAttribute_t CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5;           // int32_t
inline constexpr cublasLtMatrixLayoutAttribute_t CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6;  // int64_t
inline constexpr cublasLtMatmulPreferenceAttributes_t CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1;    // uint64_t
inline constexpr cublasLtMatmulPreferenceAttributes_t CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = 3;  // uint32_t
inline constexpr cublasLtMatmulPreferenceAttributes_t CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5;  // uint32_t
inline constexpr cublasLtMatmulPreferenceAttributes_t CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6;  // uint32_t
inline constexpr cublasLtMatmulPreferenceAttributes_t CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7;  // uint32_t
inline constexpr cublasLtMatmulPreferenceAttributes_t CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8;  // uint32_t

inline constexpr cublasLtEpilogue_t CUBLASLT_EPILOGUE_DEFAULT = 1;
inline constexpr cublasLtEpilogue_t CUBLASLT_EPILOGUE_RELU = 2;
inline constexpr cublasLtEpilogue_t CUBLASLT_EPILOGUE_BIAS = 4;
inline constexpr cublasLtEpilogue_t CUBLASLT_EPILOGUE_RELU_BIAS = 6;  // RELU | BIAS
inline constexpr cublasLtEpilogue_t CUBLASLT_EPILOGUE_GELU = 32;
inline constexpr cublasLtEpilogue_t CUBLASLT_EPILOGUE_GELU_BIAS = 36;  // GELU | BIAS

// cublasLt.h: enum cublasLtReductionScheme_t, a bit mask over the ways split-K partial sums are combined.
inline constexpr uint32_t CUBLASLT_REDUCTION_SCHEME_INPLACE = 1;       // added up in D, in D's type
inline constexpr uint32_t CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE = 2;  // kept in the workspace in fp32
inline constexpr uint32_t CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE = 4;   // kept in the workspace in D's type
inline constexpr uint32_t CUBLASLT_REDUCTION_SCHEME_MASK = 7;          // all of them (the default)

}  // namespace fastcomp::runtime::cuda
