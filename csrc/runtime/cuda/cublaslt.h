// Matrix products through cuBLASLt, with their epilogues (bias, ReLU, tanh-GELU) fused: a MatmulDesc says what
// to compute in the row-major terms the graph uses, a MatmulPlan turns it into cuBLASLt's descriptors and chosen
// algorithm once, and MatmulPlan::run launches it many times on the caller's stream with no allocation.
//
// cuBLASLt is column-major. A row-major [r, c] matrix is, byte for byte, its column-major transpose [c, r], so
// the row-major D = A @ B is computed as the column-major D^T = B^T @ A^T: the operands swap places, m and n
// swap, and each operand's strides decide whether cuBLASLt reads it as is (CUBLAS_OP_N) or transposed
// (CUBLAS_OP_T). lower_matmul() is that translation, kept apart so that it can be printed and tested on a CPU.
#pragma once
#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/cuda/cublaslt_library.h"
#include "runtime/cuda/cuda_api.h"

namespace fastcomp::runtime::cuda {

// Element type of A, B, C, D and the bias (they share one). Accumulation is always fp32.
enum class ScalarType : uint8_t { F16, BF16, F32 };
const char* scalar_type_name(ScalarType type);  // "f16", "bf16", "f32"
size_t scalar_type_size(ScalarType type);       // bytes per element

// What cuBLASLt applies to the product before storing D. The bias is a vector of n elements (D's columns in
// the row-major view, the features of F.linear) broadcast over rows and batches, of the matmul's dtype.
//
// Gelu and GeluBias are cuBLASLt's GELU, which is the TANH APPROXIMATION:
//     0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
// i.e. F.gelu(x, approximate='tanh'); on an H200 with CUDA 13's cuBLAS it came within 5e-6 of it in f32. torch's
// default F.gelu(x) (approximate='none') uses erf and differs from it by up to 4.7e-4 (near |x| = 2.7), far more
// than f32 rounding: never use these epilogues for it; fuse erf-GELU into a pointwise kernel after a Bias matmul.
enum class Epilogue : uint8_t { None, Bias, Gelu, GeluBias, Relu, ReluBias };
const char* epilogue_name(Epilogue epilogue);  // "none", "bias", "gelu_tanh", "gelu_tanh_bias", "relu", "relu_bias"
bool epilogue_has_bias(Epilogue epilogue);

// One strided-batched matrix product, described row-major as the caller sees its tensors:
//     D[b] = act(alpha * A[b] @ B[b] + beta * C[b] + bias)        for b in [0, batch)
// with A[b] an [m, k] matrix, B[b] [k, n], C[b] and D[b] [m, n]; act and bias as `epilogue` says (the
// activation applies to the whole sum, residual included: relu(a @ b + c + bias), checked on an H200). Strides are in elements. A and B may be any view
// with one of its two strides equal to 1 (contiguous, or transposed like w.t() or x.transpose(-2, -1)); a
// stride of a dimension of size 1 is ignored. Batch strides may be 0 (one matrix shared by every batch, e.g.
// a weight). D and C are row-major with column stride 1. Without C (has_c false) beta must be 0.
struct MatmulDesc {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  ScalarType dtype = ScalarType::F32;
  int64_t a_row_stride = 0, a_col_stride = 0, a_batch_stride = 0;
  int64_t b_row_stride = 0, b_col_stride = 0, b_batch_stride = 0;
  int64_t d_row_stride = 0, d_batch_stride = 0;
  bool has_c = false;
  int64_t c_row_stride = 0, c_batch_stride = 0;
  float alpha = 1.f, beta = 0.f;
  Epilogue epilogue = Epilogue::None;
  // With a bias epilogue and batch > 1: elements from one batch's bias vector to the next's (0: one bias for all).
  int64_t bias_batch_stride = 0;
  // fp32 only: let cuBLASLt round A and B to TF32 (CUBLAS_COMPUTE_32F_FAST_TF32), as
  // torch.backends.cuda.matmul.allow_tf32 does. Ignored for f16/bf16.
  bool allow_tf32 = false;
  // f16/bf16 only: false forbids split-K algorithms that add partial sums in f16/bf16 (in D, or in the workspace)
  // rather than fp32, as torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction (or the bf16 one)
  // = False does for torch's cuBLAS calls; split-K with fp32 partial sums stays allowed. Ignored for f32.
  bool allow_reduced_precision_reduction = true;

  // One line, stable (a dump and log format): "f16 m=17 n=33 k=5 batch=3 a=[17,1;561] b=[1,5;0] d=[33;561]
  // c=[33;561] alpha=1 beta=1 epilogue=bias tf32=off reduced_precision_reduction=on"; c= only with has_c, and
  // bias_bs= after the epilogue only when the bias batch stride is not 0.
  std::string to_string() const;
  bool operator==(const MatmulDesc&) const = default;
};

// Why this wrapper cannot express `desc` (a cheap check of sizes, strides and layouts, no library needed); empty
// when it can. The caller runs the matmul through torch when it is not empty, and says why in its log. A
// supported desc can still be refused by cuBLASLt on a particular GPU: MatmulPlan throws CublasError then.
std::string matmul_unsupported_reason(const MatmulDesc& desc);
inline bool matmul_supported(const MatmulDesc& desc) { return matmul_unsupported_reason(desc).empty(); }

// cuBLASLt's column-major view of a MatmulDesc. `a` is cuBLASLt's first operand, which is the caller's B (and
// `b` the caller's A); each is the matrix as stored, rows x cols with leading dimension ld, that trans turns
// into the operand. d and c are [n, m] with ld = the caller's row stride.
struct LtMatrix {
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int64_t batch_stride = 0;
};
struct LtMatmul {
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  uint64_t m = 0, n = 0, k = 0;  // cuBLAS's: m = the caller's n, n = the caller's m
  int32_t batch = 1;
  LtMatrix a, b, c, d;  // c is d when the desc has no C
  // "m=33 n=17 k=5 batch=3 a=N[33x5,ld=33,bs=0] b=T[17x5,ld=17,bs=85] c=[33x17,ld=33,bs=561] d=[...]"
  std::string to_string() const;
};
// Precondition: matmul_supported(desc); throws std::invalid_argument naming the reason otherwise.
LtMatmul lower_matmul(const MatmulDesc& desc);

// Builds and frees cuBLASLt's descriptors for `desc` (matmul description, the four layouts, the preference)
// without touching a GPU, and returns lower_matmul(desc).to_string(): lets a CPU-only machine check that
// cuBLASLt accepts every attribute this file sets. Throws CublasError, CudaLibraryError, std::invalid_argument.
std::string check_matmul_descriptors(const MatmulDesc& desc, size_t workspace_bytes);

// Whether cuBLASLt's heuristic already answered a query for `type` on `device` in this process. The first query
// of each dtype costs 30-110 ms (cuBLASLt 13.1 on an H100: f32 109 ms, then f16 103 ms, then bf16 93 ms; later
// queries of any shape 0.1-1 ms; torch's own matmuls beforehand cut the f32 one to 30 ms:
// scripts/cublaslt_plan_time.py), so a caller plans such products off the critical path when this is false.
bool heuristic_warm(ScalarType type, int device);

// A MatmulDesc planned for one device: cuBLASLt's descriptors and the algorithm its heuristic picks for this
// GPU and workspace size, made once; run() then only launches. Not copyable; thread-safe.
//
// Alignment: cuBLASLt's fastest kernels need their pointers aligned to 16 bytes or more, and an algorithm chosen
// for aligned pointers may fault on less-aligned ones, but pointers are only known at run(). So the plan picks
// its algorithm for 256-byte alignment (what torch's allocator gives every fresh tensor; also what torch tells
// cuBLASLt for such pointers, so both pick the same kernel), and run() checks the actual a, b, c, d and bias
// pointers: when any is less aligned (a view at an offset), it uses an algorithm chosen for that alignment
// instead, asking the heuristic once per alignment (128 down to 2 bytes) and keeping the answer. Strides are
// known at plan time and the heuristic accounts for them itself.
//
// Tuning: the heuristic ranks algorithms by a model, and for the medium fp32 shapes of small transformers its
// favourite can be much slower than another of its top candidates. So the plan keeps the heuristic's top
// candidates for 256-byte alignment, and the first run() with such pointers that is not being captured into a
// CUDA graph times each of them on the caller's stream with the call's own pointers, in two interleaved rounds
// (D is written several times; A, B and the bias are only read) and keeps the fastest; products of a few µs,
// whose launches on the stream would time the host's launch cost, are timed instead as replays of a CUDA graph
// of 20 launches captured on a stream of the tuning's own (after the caller's work), as reduce-overhead replays
// them -- those under 12 µs there; longer ones keep the heuristic's favourite (cublaslt.cpp says why). That run
// waits for the GPU; tuning costs about 10 ms of GPU time at most per product. The decision (the pick) is kept
// for the process (keyed by desc, device and workspace size), so another plan of the same product does not time
// it again, and in the kernel cache on disk (keyed by desc, the GPU's arch and SM count, cuBLASLt's version and
// the workspace size), so a new process does not either; a pick is kept as its rank among the heuristic's
// candidates. config().matmul_tuning = false keeps the heuristic's favourite, and ignores earlier decisions (then
// the choice never depends on timing noise).
class MatmulPlan {
 public:
  // Plans `desc` on CUDA device `device` (an ordinal, as torch numbers them) for a workspace of at most
  // `workspace_bytes` (cuBLASLt uses it for split-K partial sums; a few MiB is plenty, 0 rules split-K out). Throws std::invalid_argument if !matmul_supported(desc), CublasError if cuBLASLt refuses
  // it (the message ends with desc.to_string()), CudaLibraryError if cuBLASLt or the driver cannot be loaded.
  MatmulPlan(const MatmulDesc& desc, int device, size_t workspace_bytes);
  ~MatmulPlan();
  MatmulPlan(const MatmulPlan&) = delete;
  MatmulPlan& operator=(const MatmulPlan&) = delete;

  // Queues the product on `stream` (not synchronised). a, b, c, d, bias point at element [0, 0] of batch 0 of
  // each matrix; c is ignored without has_c and bias without a bias epilogue (pass nullptr). Every pointer must
  // be aligned to its element size. `workspace` is device memory of at least workspace_bytes() bytes, aligned
  // to 256 bytes (any torch allocation is), not used by other work on other streams meanwhile; it may be null
  // when workspace_bytes() is 0. c may equal d (in place) only if C's strides equal D's. Makes the plan's
  // device current for the call and restores the caller's. Throws CublasError, CudaError, std::invalid_argument.
  void run(const void* a, const void* b, const void* c, void* d, const void* bias, void* workspace,
           CUstream stream) const;

  const MatmulDesc& desc() const { return desc_; }
  int device() const { return device_; }
  size_t workspace_bytes() const { return workspace_bytes_; }
  // How much of the workspace the algorithm for aligned pointers uses (0 for most shapes without split-K).
  size_t workspace_used() const;
  // What tuning chose ("tuned: candidate 3 of 8, 41.2 us vs the heuristic's favourite at 55.9 us"), or why it
  // has not ("not tuned yet", "one candidate").
  std::string tuning() const;
  // Whether tuning picked another algorithm than the heuristic's favourite.
  bool tuned_pick_differs() const;
  // Runs the heuristic's favourite instead of tuning's pick (true), or the pick again (false): a pick timed alone
  // can run slower between a model's other kernels, which a caller that times the whole model (the CUDA-graph
  // executable) can see and undo.
  void prefer_favourite(bool yes) const;
  // desc.to_string(), the lowering, and the chosen algorithm's workspace and waves count: for dumps and logs.
  std::string to_string() const;

 private:
  struct Algo {
    cublasLtMatmulAlgo_t algo;
    size_t workspace = 0;
    float waves = 0;
  };
  // The cuBLASLt objects a plan owns; destroyed with it (also when its constructor throws part way).
  struct Descriptors {
    Descriptors(const MatmulDesc& desc, const LtMatmul& lt, size_t workspace_bytes);
    ~Descriptors();
    Descriptors(const Descriptors&) = delete;
    Descriptors& operator=(const Descriptors&) = delete;
    void destroy();
    // Tells the heuristic that the pointers will be aligned to `alignment` bytes; with a bias, sets a stand-in
    // bias pointer of that alignment (run() sets the real one).
    void expect_alignment(uint32_t alignment, bool has_bias);
    cublasLtMatmulDesc_t matmul = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
    cublasLtMatmulPreference_t preference = nullptr;
  };
  friend std::string check_matmul_descriptors(const MatmulDesc&, size_t);

  // The heuristic's best `count` algorithms for pointers aligned to `alignment` bytes (a power of two up to 256),
  // its favourite first; at least one. Called with mutex_ held or from the constructor.
  std::vector<Algo> choose_algos(uint32_t alignment, int count) const;
  // cublasLtMatmul with `algo`; the bias pointer is already set. Called with mutex_ held.
  cublasStatus_t launch(const Algo& algo, const void* a, const void* b, const void* c, void* d, void* workspace,
                        CUstream stream) const;
  // Takes the decision kept for this product (in this process, else on disk when `look_on_disk`), if its pick is
  // among candidates_: sets aligned_, tuned_ and tuning_ and returns true.
  bool adopt_decision(bool look_on_disk) const;
  // Times candidates_ (see the class comment) and sets aligned_ to the fastest. Called with mutex_ held.
  void tune(const void* a, const void* b, const void* c, void* d, void* workspace, CUstream stream) const;

  MatmulDesc desc_;
  LtMatmul lt_;
  int device_;
  size_t workspace_bytes_;
  cublasLtHandle_t handle_ = nullptr;
  // Mutable: choose_algo() and run() change the preference's alignment and the bias pointer, under mutex_.
  mutable Descriptors descriptors_;
  std::vector<Algo> candidates_;  // the heuristic's top picks for 256-byte alignment, its favourite first
  mutable Algo aligned_;          // what run() uses for 256-byte alignment: tuning's pick, else candidates_[0]
  mutable bool tuned_ = false;    // tuning is over (or there is nothing to tune)
  mutable int pick_ = 0;          // aligned_'s rank among candidates_
  mutable bool prefer_favourite_ = false;
  mutable std::string tuning_ = "not tuned yet";
  // run() sets the bias pointer in the shared matmul descriptor before each launch, and fills the fallback
  // algorithms on first need, both under this lock.
  mutable std::mutex mutex_;
  mutable std::array<std::optional<Algo>, 8> less_aligned_;  // by log2 of the alignment: 1 to 128 bytes
};

}  // namespace fastcomp::runtime::cuda
