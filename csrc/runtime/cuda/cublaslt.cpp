#include "runtime/cuda/cublaslt.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>

#include "runtime/cuda/arch.h"
#include "runtime/cuda/driver.h"
#include "runtime/cuda/events.h"
#include "runtime/cuda/module.h"
#include "runtime/kernel_cache.h"
#include "support/config.h"
#include "support/log.h"

namespace fastcomp::runtime::cuda {
namespace {

// The alignment run() expects of every pointer, and plans for first (see the header).
constexpr uint32_t kPlannedAlignment = 256;
// Tuning (see the header): how many of the heuristic's candidates are timed, the GPU time it may spend on one
// product, the timed launches per candidate at most, and how much faster than the heuristic's favourite another
// candidate must be to replace it (timing noise on an idle GPU is about 1%).
constexpr int kTuningCandidates = 8;
constexpr double kTuningBudgetMs = 10.0;
constexpr int kTuningMaxRepeats = 3;
constexpr int kTuningRounds = 2;  // launch-timed candidates: each timed this many times, interleaved
constexpr double kTuningMinGain = 0.03;
// Products shorter than this are not timed by launches on the caller's stream: back-to-back launches of a few-µs
// kernel leave the GPU waiting for the host, so the timings would rank the launch overhead (measured on an H200:
// tuning W5's and W10's 5-15 µs GEMMs this way picked algorithms 10-20% slower in the graph) ...
constexpr double kTuningMinMs = 0.02;
// ... nor products whose GPU time per launch is under this many times the host's: the GPU was (nearly) waiting
// for the launches. Such products are timed as replays of a CUDA graph of kGraphLaunches launches instead,
// where launch costs drop out as they do under reduce-overhead (H200, scripts/cublaslt_candidates.py --graph:
// W10's four products 31.8 us a layer with the heuristic's favourites, 29.1 with the fastest of its top 8; W5's
// first 9.0 -> 7.9 us).
constexpr double kHostBoundRatio = 1.5;
constexpr int kGraphLaunches = 20;
constexpr int kGraphReplays = 2;  // timed replays per candidate, the best kept
// ... but only products whose favourite runs under this long in the graph: the picks of longer ones, timed alone,
// did not carry over into a model (W7 on an H200: its 1024x512x512 product's pick, 19.0 against 20.8 us alone,
// made the model's kernels 2.6 us slower), while those of W5's and W10's 6-10 us products did (W10
// reduce-overhead 158.7 -> 148.4 us/call, W5 20.3 -> 17.6). Longer ones keep the heuristic's favourite, as before.
constexpr double kGraphTuningMaxMs = 0.012;

// What tuning decided for a product: the algorithm and the sentence saying why ("tuned: candidate 3 of 8, ...",
// "not tuned: 9.1 us is too short ..."). Kept for the process by tuning_key(), so a product planned again (a
// recompile, another layer of the same shape) is not timed again, and in the kernel cache on disk by
// disk_key(), so a new process is not either.
// The pick is kept as its rank among the heuristic's candidates, not as cuBLASLt's algorithm struct: the same
// heuristic (same cuBLASLt, GPU model and desc) ranks the same candidates alike in every process, but the
// structs of some algorithms differ in their bytes from one process to the next (seen on an H200 for W7's fp32
// products), so a struct from disk would match nothing.
struct TuningDecision {
  int rank = 0;        // index into the candidates
  int candidates = 0;  // how many there were: a heuristic that now returns another number is asked again
  std::string why;
};
std::mutex tuned_mutex;
std::map<std::string, TuningDecision>& tuned_algos() {
  static std::map<std::string, TuningDecision> decisions;
  return decisions;
}
std::string tuning_key(const MatmulDesc& desc, int device, size_t workspace_bytes) {
  return fmt::format("{} device={} workspace={}", desc.to_string(), device, workspace_bytes);
}

// The kernel cache's key of a decision on disk: what it depends on, the device's model rather than its ordinal.
// An H100 and an H200 (both sm_90 with 132 SMs) share decisions; a pick that is not among the heuristic's
// candidates on this one is not used.
std::array<std::string, 3> disk_key(const MatmulDesc& desc, int device, size_t workspace_bytes) {
  const DeviceInfo& info = device_info(device);
  // "v2": products of a few µs are timed in CUDA graphs since; the decisions before left them untuned.
  return {"cuBLASLt tuning decision v2", fmt::format("{} workspace={}", desc.to_string(), workspace_bytes),
          fmt::format("sm_{}{} sms={} cublasLt={}", info.arch.major, info.arch.minor, info.sm_count,
                      cublaslt_version())};
}
// On disk: "<rank> <candidates> <why>".
std::optional<TuningDecision> find_decision_on_disk(const MatmulDesc& desc, int device, size_t workspace_bytes) {
  const std::array<std::string, 3> key = disk_key(desc, device, workspace_bytes);
  const std::array<std::string_view, 3> parts{key[0], key[1], key[2]};
  std::shared_ptr<const std::string> text = kernel_cache().find(parts);
  TuningDecision d;
  int consumed = 0;
  if (!text || std::sscanf(text->c_str(), "%d %d %n", &d.rank, &d.candidates, &consumed) != 2 || consumed == 0)
    return std::nullopt;
  d.why = text->substr(consumed);
  return d;
}
void store_decision(const MatmulDesc& desc, int device, size_t workspace_bytes, const TuningDecision& d) {
  {
    std::lock_guard lock(tuned_mutex);
    tuned_algos()[tuning_key(desc, device, workspace_bytes)] = d;
  }
  const std::array<std::string, 3> key = disk_key(desc, device, workspace_bytes);
  const std::array<std::string_view, 3> parts{key[0], key[1], key[2]};
  kernel_cache().store(parts, fmt::format("{} {} {}", d.rank, d.candidates, d.why));
}

// (device, dtype) pairs whose first heuristic query has finished: heuristic_warm().
std::mutex warm_mutex;
std::set<std::pair<int, ScalarType>>& warm_heuristics() {
  static std::set<std::pair<int, ScalarType>> warm;
  return warm;
}

// A stream of the tuning's own, for capturing CUDA graphs of a product's launches (the caller's stream may be the
// legacy default stream, which cannot capture); it waits for the caller's work before each capture's replays.
struct TuningStream {
  CUstream stream = nullptr;
  CUevent caller_done = nullptr;
  TuningStream() {
    FC_CU_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    try {
      FC_CU_CHECK(cuEventCreate(&caller_done, CU_EVENT_DISABLE_TIMING));
    } catch (...) {
      driver().cuStreamDestroy_v2(stream);
      throw;
    }
  }
  ~TuningStream() {
    driver().cuEventDestroy_v2(caller_done);
    driver().cuStreamDestroy_v2(stream);
  }
  TuningStream(const TuningStream&) = delete;
  TuningStream& operator=(const TuningStream&) = delete;
};

// A captured graph and its instantiation, destroyed with it.
struct CapturedGraph {
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  CapturedGraph() = default;
  ~CapturedGraph() {
    if (exec) driver().cuGraphExecDestroy(exec);
    if (graph) driver().cuGraphDestroy(graph);
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
};

cudaDataType_t data_type(ScalarType type) {
  switch (type) {
    case ScalarType::F16: return CUDA_R_16F;
    case ScalarType::BF16: return CUDA_R_16BF;
    case ScalarType::F32: return CUDA_R_32F;
  }
  return CUDA_R_32F;
}

cublasLtEpilogue_t lt_epilogue(Epilogue epilogue) {
  switch (epilogue) {
    case Epilogue::None: return CUBLASLT_EPILOGUE_DEFAULT;
    case Epilogue::Bias: return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::Gelu: return CUBLASLT_EPILOGUE_GELU;
    case Epilogue::GeluBias: return CUBLASLT_EPILOGUE_GELU_BIAS;
    case Epilogue::Relu: return CUBLASLT_EPILOGUE_RELU;
    case Epilogue::ReluBias: return CUBLASLT_EPILOGUE_RELU_BIAS;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// A caller's matrix X, [rows, cols] in the row-major view with the given strides, as the cuBLASLt operand X^T
// ([cols, rows]). Its bytes are X^T stored column-major when X's rows are contiguous (stride 1 along cols: op
// N), or X stored column-major when its columns are (op T). The stride of a dimension of size 1 is never used,
// so it may be anything (torch gives such dimensions arbitrary strides). cuBLASLt needs ld >= the stored
// matrix's row count.
struct Operand {
  cublasOperation_t trans = CUBLAS_OP_N;
  LtMatrix stored;
};
std::optional<Operand> as_operand(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  if (col_stride == 1 || cols == 1) {
    int64_t ld = rows == 1 ? cols : row_stride;
    if (ld >= cols) return Operand{CUBLAS_OP_N, {uint64_t(cols), uint64_t(rows), ld, 0}};
  }
  if (row_stride == 1 || rows == 1) {
    int64_t ld = cols == 1 ? rows : col_stride;
    if (ld >= rows) return Operand{CUBLAS_OP_T, {uint64_t(rows), uint64_t(cols), ld, 0}};
  }
  return std::nullopt;
}

// D or C: [rows, cols] row-major with column stride 1, stored as its transpose column-major (op N only).
std::optional<LtMatrix> as_output(int64_t rows, int64_t cols, int64_t row_stride) {
  int64_t ld = rows == 1 ? cols : row_stride;
  if (ld < cols) return std::nullopt;
  return LtMatrix{uint64_t(cols), uint64_t(rows), ld, 0};
}

std::string matrix_text(const LtMatrix& x) {
  return fmt::format("{}x{},ld={},bs={}", x.rows, x.cols, x.ld, x.batch_stride);
}

const char* on_off(bool value) { return value ? "on" : "off"; }

// Sets a descriptor attribute from a value of exactly the type cuBLASLt stores (it checks the size).
template <typename Set, typename Object, typename Attribute, typename T>
void set_attribute(Set set, Object object, Attribute attribute, const T& value, const char* call,
                   const std::source_location& where = std::source_location::current()) {
  check_cublas(set(object, attribute, &value, sizeof(T)), call, where);
}
#define FC_SET_ATTRIBUTE(function, object, attribute, value) \
  set_attribute(cublaslt().function, object, attribute, value, #function "(" #object ", " #attribute ")")

// A dummy bias pointer aligned to exactly `alignment` bytes, for the heuristic before run() knows the real one:
// cuBLASLt reads the pointer's alignment out of its value at planning, without dereferencing it.
CublasError with_matmul(const CublasError& e, const MatmulDesc& desc) {
  return CublasError(e.status, e.call, std::string(e.what()) + "\n  matmul: " + desc.to_string());
}

const void* dummy_bias(uint32_t alignment) { return reinterpret_cast<const void*>(uintptr_t(1) << 20 | alignment); }

// The largest power of two, up to kPlannedAlignment, that divides the address.
uint32_t alignment_of(const void* p) {
  auto address = reinterpret_cast<uintptr_t>(p) | kPlannedAlignment;
  return uint32_t(address & (~address + 1));
}

}  // namespace

const char* scalar_type_name(ScalarType type) {
  switch (type) {
    case ScalarType::F16: return "f16";
    case ScalarType::BF16: return "bf16";
    case ScalarType::F32: return "f32";
  }
  return "?";
}

size_t scalar_type_size(ScalarType type) { return type == ScalarType::F32 ? 4 : 2; }

const char* epilogue_name(Epilogue epilogue) {
  switch (epilogue) {
    case Epilogue::None: return "none";
    case Epilogue::Bias: return "bias";
    case Epilogue::Gelu: return "gelu_tanh";
    case Epilogue::GeluBias: return "gelu_tanh_bias";
    case Epilogue::Relu: return "relu";
    case Epilogue::ReluBias: return "relu_bias";
  }
  return "?";
}

bool epilogue_has_bias(Epilogue epilogue) {
  return epilogue == Epilogue::Bias || epilogue == Epilogue::GeluBias || epilogue == Epilogue::ReluBias;
}

std::string MatmulDesc::to_string() const {
  std::string out = fmt::format("{} m={} n={} k={} batch={} a=[{},{};{}] b=[{},{};{}] d=[{};{}]", scalar_type_name(dtype),
                                m, n, k, batch, a_row_stride, a_col_stride, a_batch_stride, b_row_stride, b_col_stride,
                                b_batch_stride, d_row_stride, d_batch_stride);
  if (has_c) out += fmt::format(" c=[{};{}]", c_row_stride, c_batch_stride);
  out += fmt::format(" alpha={} beta={} epilogue={}", alpha, beta, epilogue_name(epilogue));
  if (bias_batch_stride != 0) out += fmt::format(" bias_bs={}", bias_batch_stride);
  out += fmt::format(" tf32={} reduced_precision_reduction={}", on_off(allow_tf32),
                     on_off(allow_reduced_precision_reduction));
  return out;
}

std::string LtMatmul::to_string() const {
  auto op = [](cublasOperation_t t) { return t == CUBLAS_OP_T ? "T" : "N"; };
  return fmt::format("m={} n={} k={} batch={} a={}[{}] b={}[{}] c=[{}] d=[{}]", m, n, k, batch, op(transa),
                     matrix_text(a), op(transb), matrix_text(b), matrix_text(c), matrix_text(d));
}

std::string matmul_unsupported_reason(const MatmulDesc& d) {
  if (d.m < 1 || d.n < 1 || d.k < 1 || d.batch < 1)
    return fmt::format("an empty matmul (m={}, n={}, k={}, batch={}) has nothing for cuBLASLt to do", d.m, d.n, d.k,
                       d.batch);
  if (d.m > INT32_MAX || d.n > INT32_MAX || d.k > INT32_MAX || d.batch > INT32_MAX)
    return fmt::format("a size above 2^31-1 (m={}, n={}, k={}, batch={}) is beyond cuBLASLt", d.m, d.n, d.k, d.batch);
  for (int64_t stride : {d.a_row_stride, d.a_col_stride, d.a_batch_stride, d.b_row_stride, d.b_col_stride,
                         d.b_batch_stride, d.d_row_stride, d.d_batch_stride, d.c_row_stride, d.c_batch_stride,
                         d.bias_batch_stride})
    if (stride < 0) return "a negative stride (a flipped view) cannot be described to cuBLASLt";
  if (!as_operand(d.m, d.k, d.a_row_stride, d.a_col_stride))
    return fmt::format("A [{}, {}] has strides ({}, {}): cuBLASLt needs one of them to be 1 and the other to span "
                       "a whole row or column",
                       d.m, d.k, d.a_row_stride, d.a_col_stride);
  if (!as_operand(d.k, d.n, d.b_row_stride, d.b_col_stride))
    return fmt::format("B [{}, {}] has strides ({}, {}): cuBLASLt needs one of them to be 1 and the other to span "
                       "a whole row or column",
                       d.k, d.n, d.b_row_stride, d.b_col_stride);
  if (!as_output(d.m, d.n, d.d_row_stride))
    return fmt::format("D [{}, {}] has row stride {}: rows overlap (it must be at least n)", d.m, d.n, d.d_row_stride);
  if (d.batch > 1 && d.d_batch_stride == 0) return "D has batch stride 0: every batch would write the same matrix";
  if (d.has_c && !as_output(d.m, d.n, d.c_row_stride))
    return fmt::format("C [{}, {}] has row stride {}: cuBLASLt reads C like D, with a row stride of at least n (a "
                       "broadcast row vector belongs in the bias)",
                       d.m, d.n, d.c_row_stride);
  if (!d.has_c && d.beta != 0.f) return fmt::format("beta={} without a C matrix", d.beta);
  if (d.bias_batch_stride != 0 && !epilogue_has_bias(d.epilogue))
    return fmt::format("a bias batch stride ({}) without a bias epilogue", d.bias_batch_stride);
  return "";
}

LtMatmul lower_matmul(const MatmulDesc& desc) {
  if (std::string why = matmul_unsupported_reason(desc); !why.empty())
    throw std::invalid_argument("fastcomp::runtime::cuda::lower_matmul(): cannot run " + desc.to_string() +
                                " with cuBLASLt: " + why + "; check matmul_supported() first");
  // Row-major D = A @ B is column-major D^T = B^T @ A^T: cuBLASLt's first operand is B, its second A.
  Operand first = *as_operand(desc.k, desc.n, desc.b_row_stride, desc.b_col_stride);
  Operand second = *as_operand(desc.m, desc.k, desc.a_row_stride, desc.a_col_stride);
  LtMatmul lt;
  lt.transa = first.trans;
  lt.transb = second.trans;
  lt.m = uint64_t(desc.n);
  lt.n = uint64_t(desc.m);
  lt.k = uint64_t(desc.k);
  lt.batch = int32_t(desc.batch);
  lt.a = first.stored;
  lt.b = second.stored;
  lt.d = *as_output(desc.m, desc.n, desc.d_row_stride);
  lt.c = desc.has_c ? *as_output(desc.m, desc.n, desc.c_row_stride) : lt.d;
  if (desc.batch > 1) {
    lt.a.batch_stride = desc.b_batch_stride;
    lt.b.batch_stride = desc.a_batch_stride;
    lt.d.batch_stride = desc.d_batch_stride;
    lt.c.batch_stride = desc.has_c ? desc.c_batch_stride : desc.d_batch_stride;
  }
  return lt;
}

bool heuristic_warm(ScalarType type, int device) {
  std::lock_guard lock(warm_mutex);
  return warm_heuristics().count({device, type}) > 0;
}

// ---- MatmulPlan --------------------------------------------------------------------------------------------

MatmulPlan::Descriptors::Descriptors(const MatmulDesc& desc, const LtMatmul& lt, size_t workspace_bytes) {
  const CublasLtApi& api = cublaslt();
  // A constructor that throws runs no destructor, so what it made so far is freed here.
  try {
    // fp32 accumulation and fp32 alpha/beta for every dtype, as torch does (unless allow_fp16_accumulation).
    cublasComputeType_t compute =
        desc.dtype == ScalarType::F32 && desc.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    check_cublas(api.cublasLtMatmulDescCreate(&matmul, compute, CUDA_R_32F),
                 "cublasLtMatmulDescCreate(&matmul, compute, CUDA_R_32F)");
    FC_SET_ATTRIBUTE(cublasLtMatmulDescSetAttribute, matmul, CUBLASLT_MATMUL_DESC_TRANSA, int32_t(lt.transa));
    FC_SET_ATTRIBUTE(cublasLtMatmulDescSetAttribute, matmul, CUBLASLT_MATMUL_DESC_TRANSB, int32_t(lt.transb));
    FC_SET_ATTRIBUTE(cublasLtMatmulDescSetAttribute, matmul, CUBLASLT_MATMUL_DESC_EPILOGUE,
                     uint32_t(lt_epilogue(desc.epilogue)));
    if (desc.bias_batch_stride != 0)
      FC_SET_ATTRIBUTE(cublasLtMatmulDescSetAttribute, matmul, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE,
                       int64_t(desc.bias_batch_stride));

    cudaDataType_t type = data_type(desc.dtype);
    auto layout = [&](cublasLtMatrixLayout_t& out, const LtMatrix& m) {
      check_cublas(api.cublasLtMatrixLayoutCreate(&out, type, m.rows, m.cols, m.ld),
                   "cublasLtMatrixLayoutCreate(&layout, type, rows, cols, ld)");
      if (lt.batch == 1) return;
      FC_SET_ATTRIBUTE(cublasLtMatrixLayoutSetAttribute, out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, int32_t(lt.batch));
      FC_SET_ATTRIBUTE(cublasLtMatrixLayoutSetAttribute, out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                       int64_t(m.batch_stride));
    };
    layout(a, lt.a);
    layout(b, lt.b);
    layout(d, lt.d);
    if (desc.has_c) layout(c, lt.c);

    check_cublas(api.cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate(&preference)");
    FC_SET_ATTRIBUTE(cublasLtMatmulPreferenceSetAttribute, preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                     uint64_t(workspace_bytes));
    // Split-K partial sums kept in fp32 (COMPUTE_TYPE) are as exact as no split; INPLACE and OUTPUT_TYPE add
    // them in D's type, which is what the reduced-precision-reduction switch is about. Unsplit algorithms
    // (scheme NONE, value 0) pass every mask.
    if (desc.dtype != ScalarType::F32 && !desc.allow_reduced_precision_reduction)
      FC_SET_ATTRIBUTE(cublasLtMatmulPreferenceSetAttribute, preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                       uint32_t(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE));
  } catch (...) {
    destroy();
    throw;
  }
}

MatmulPlan::Descriptors::~Descriptors() { destroy(); }

void MatmulPlan::Descriptors::destroy() {
  // Nothing was created unless cublaslt() loaded; destroying host-side descriptors cannot fail.
  if (!matmul && !a && !b && !c && !d && !preference) return;
  const CublasLtApi& api = cublaslt();
  if (preference) api.cublasLtMatmulPreferenceDestroy(preference);
  for (cublasLtMatrixLayout_t* layout : {&a, &b, &c, &d})
    if (*layout) api.cublasLtMatrixLayoutDestroy(*layout);
  if (matmul) api.cublasLtMatmulDescDestroy(matmul);
  matmul = nullptr, a = b = c = d = nullptr, preference = nullptr;
}

void MatmulPlan::Descriptors::expect_alignment(uint32_t alignment, bool has_bias) {
  for (cublasLtMatmulPreferenceAttributes_t attribute :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    FC_SET_ATTRIBUTE(cublasLtMatmulPreferenceSetAttribute, preference, attribute, alignment);
  if (has_bias)
    FC_SET_ATTRIBUTE(cublasLtMatmulDescSetAttribute, matmul, CUBLASLT_MATMUL_DESC_BIAS_POINTER, dummy_bias(alignment));
}

std::string check_matmul_descriptors(const MatmulDesc& desc, size_t workspace_bytes) {
  LtMatmul lt = lower_matmul(desc);
  MatmulPlan::Descriptors descriptors(desc, lt, workspace_bytes);
  descriptors.expect_alignment(kPlannedAlignment, epilogue_has_bias(desc.epilogue));
  return lt.to_string();
}

MatmulPlan::MatmulPlan(const MatmulDesc& desc, int device, size_t workspace_bytes) try
    : desc_(desc),
      lt_(lower_matmul(desc)),
      device_(device),
      workspace_bytes_(workspace_bytes),
      handle_(cublaslt_handle(device)),
      descriptors_(desc_, lt_, workspace_bytes) {
  ContextGuard context(device_);  // the heuristic reads the current device's arch and SM count
  candidates_ = choose_algos(kPlannedAlignment, kTuningCandidates);
  aligned_ = candidates_.front();
  if (candidates_.size() == 1) tuned_ = true, tuning_ = "one candidate";
  // config().matmul_tuning off means the heuristic's pick, so no decision taken earlier (in this process or on
  // disk) applies either.
  if (!tuned_ && config().matmul_tuning) adopt_decision(/*look_on_disk=*/true);
} catch (const CublasError& e) {
  throw with_matmul(e, desc);
}

MatmulPlan::~MatmulPlan() = default;

bool MatmulPlan::adopt_decision(bool look_on_disk) const {
  // A decision applies while its pick is among the heuristic's candidates (the same cuBLASLt on the same model
  // of GPU gives the same ones); else the product is tuned again.
  auto use = [&](const TuningDecision& d, const char* when) {
    if (d.candidates != int(candidates_.size()) || d.rank < 0 || d.rank >= d.candidates) return false;
    aligned_ = candidates_[d.rank], pick_ = d.rank, tuned_ = true, tuning_ = fmt::format("{} ({})", d.why, when);
    return true;
  };
  std::lock_guard lock(tuned_mutex);
  const std::string key = tuning_key(desc_, device_, workspace_bytes_);
  if (auto it = tuned_algos().find(key); it != tuned_algos().end()) return use(it->second, "earlier in this process");
  if (!look_on_disk) return false;
  std::optional<TuningDecision> d = find_decision_on_disk(desc_, device_, workspace_bytes_);
  if (!d || !use(*d, "in an earlier process, from the kernel cache")) return false;
  tuned_algos()[key] = *d;
  return true;
}

std::vector<MatmulPlan::Algo> MatmulPlan::choose_algos(uint32_t alignment, int wanted) const {
  const CublasLtApi& api = cublaslt();
  descriptors_.expect_alignment(alignment, epilogue_has_bias(desc_.epilogue));
  std::vector<cublasLtMatmulHeuristicResult_t> results(wanted);
  int count = 0;
  cublasLtMatrixLayout_t c = descriptors_.c ? descriptors_.c : descriptors_.d;
  check_cublas(api.cublasLtMatmulAlgoGetHeuristic(handle_, descriptors_.matmul, descriptors_.a, descriptors_.b, c,
                                                  descriptors_.d, descriptors_.preference, wanted, results.data(),
                                                  &count),
               "cublasLtMatmulAlgoGetHeuristic(handle, matmul, a, b, c, d, preference, wanted, results, &count)");
  if (count == 0)
    throw CublasError(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmulAlgoGetHeuristic",
                      fmt::format("fastcomp::runtime::cuda::MatmulPlan::choose_algo(): cuBLASLt {} has no algorithm "
                                  "for this matmul on device {} with {}-byte aligned pointers and a workspace of {} "
                                  "bytes; run it through torch instead\n  cublasLt: {}",
                                  cublaslt_version(), device_, alignment, workspace_bytes_, lt_.to_string()));
  {
    std::lock_guard lock(warm_mutex);
    warm_heuristics().insert({device_, desc_.dtype});
  }
  std::vector<Algo> algos;
  for (int i = 0; i < count; ++i) algos.push_back({results[i].algo, results[i].workspaceSize, results[i].wavesCount});
  return algos;
}

cublasStatus_t MatmulPlan::launch(const Algo& algo, const void* a, const void* b, const void* c, void* d,
                                  void* workspace, CUstream stream) const {
  float alpha = desc_.alpha, beta = desc_.has_c ? desc_.beta : 0.f;
  // Without C, beta is 0 and cuBLASLt never reads C; it still wants a pointer and a layout, so it gets D's.
  const void* c_or_d = desc_.has_c ? c : d;
  cublasLtMatrixLayout_t c_layout = descriptors_.c ? descriptors_.c : descriptors_.d;
  return cublaslt().cublasLtMatmul(handle_, descriptors_.matmul, &alpha, b, descriptors_.a, a, descriptors_.b, &beta,
                                   c_or_d, c_layout, d, descriptors_.d, &algo.algo, workspace, workspace_bytes_,
                                   stream);
}

void MatmulPlan::tune(const void* a, const void* b, const void* c, void* d, void* workspace, CUstream stream) const {
  EventPair events;
  // GPU milliseconds per launch of `algo` over `repeats` launches after one untimed launch (which also loads
  // the algorithm's kernel on first use); negative when cuBLASLt refuses the algorithm for these pointers.
  double host_ms = 0;  // of the last call of time(): host milliseconds per launch
  auto time = [&](const Algo& algo, int repeats) -> double {
    if (launch(algo, a, b, c, d, workspace, stream) != CUBLAS_STATUS_SUCCESS) return -1;
    const auto host_start = std::chrono::steady_clock::now();
    FC_CU_CHECK(cuEventRecord(events.start, stream));
    for (int r = 0; r < repeats; ++r)
      if (launch(algo, a, b, c, d, workspace, stream) != CUBLAS_STATUS_SUCCESS) return -1;
    FC_CU_CHECK(cuEventRecord(events.stop, stream));
    host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - host_start).count() / repeats;
    return events.elapsed_ms() / repeats;
  };
  // A product is too short to time by its launches when the GPU kept pace with the host's launches (it waited
  // for them, so the timings would rank the host's launch cost), or when it is under kTuningMinMs: then its
  // candidates are timed in CUDA graphs. The best of up to three rounds
  // of three launches: a process's first launches run slow (seen on an H100: cuBLASLt's first calls of a
  // 64x136x64 product took 15-20 us of host time each, later ones ~5 us). A product clearly longer is timed once.
  double favourite_ms = -1, favourite_host_ms = 0;
  auto too_short = [&] { return favourite_ms < kTuningMinMs || favourite_ms < kHostBoundRatio * favourite_host_ms; };
  for (int round = 0; round < 3; ++round) {
    const double ms = time(candidates_.front(), 3);
    if (ms < 0) {
      tuning_ = "not tuned: cuBLASLt refused its own favourite";
      return;
    }
    if (round == 0 || ms < favourite_ms) favourite_ms = ms, favourite_host_ms = host_ms;
    if (too_short() || favourite_ms > 3 * std::max(kTuningMinMs, kHostBoundRatio * favourite_host_ms)) break;
  }
  const int n = int(candidates_.size());
  std::vector<double> ms(n, -1);
  const bool in_graph = too_short();
  if (in_graph) {
    // GPU milliseconds per launch of `algo`, from replays of a CUDA graph of kGraphLaunches launches captured on
    // the tuning's stream after the caller's work; negative when cuBLASLt refuses the algorithm or the capture.
    TuningStream tuning;
    FC_CU_CHECK(cuEventRecord(tuning.caller_done, stream));
    FC_CU_CHECK(cuStreamWaitEvent(tuning.stream, tuning.caller_done, 0));
    auto graph_time = [&](const Algo& algo) -> double {
      CapturedGraph g;
      FC_CU_CHECK(cuStreamBeginCapture_v2(tuning.stream, CU_STREAM_CAPTURE_MODE_RELAXED));
      bool launched = true;
      for (int r = 0; r < kGraphLaunches && launched; ++r)
        launched = launch(algo, a, b, c, d, workspace, tuning.stream) == CUBLAS_STATUS_SUCCESS;
      const CUresult ended = driver().cuStreamEndCapture(tuning.stream, &g.graph);  // ends it in any case
      if (!launched || ended != CUDA_SUCCESS ||
          driver().cuGraphInstantiateWithFlags(&g.exec, g.graph, 0) != CUDA_SUCCESS)
        return -1;
      FC_CU_CHECK(cuGraphLaunch(g.exec, tuning.stream));  // untimed: loads the algorithm's kernels
      double best_ms = -1;
      for (int r = 0; r < kGraphReplays; ++r) {
        FC_CU_CHECK(cuEventRecord(events.start, tuning.stream));
        FC_CU_CHECK(cuGraphLaunch(g.exec, tuning.stream));
        FC_CU_CHECK(cuEventRecord(events.stop, tuning.stream));
        const double per_launch = events.elapsed_ms() / kGraphLaunches;
        if (best_ms < 0 || per_launch < best_ms) best_ms = per_launch;
      }
      return best_ms;
    };
    ms[0] = graph_time(candidates_[0]);
    if (ms[0] < 0 || ms[0] > kGraphTuningMaxMs) {
      tuning_ = ms[0] < 0 ? "not tuned: cuBLASLt's favourite could not be captured into a CUDA graph"
                          : fmt::format("not tuned: {:.1f} us in a CUDA graph, too short to time by launches and "
                                        "over the {:.0f} us below which timings alone carried over into models",
                                        ms[0] * 1e3, kGraphTuningMaxMs * 1e3);
      store_decision(desc_, device_, workspace_bytes_, {0, n, tuning_});
      return;
    }
    for (int i = 1; i < n; ++i) ms[i] = graph_time(candidates_[i]);
  } else {
    // Rounds over all candidates in turn, each candidate's best kept: one timing each drifted by a few per cent
    // with the GPU's clocks, as much as the gain a pick must show, and picks flipped between processes (W9's
    // 2048 x 2816 x 1024 pair, 4% ahead of the favourite: 52.3 or 56 µs/call under reduce-overhead).
    const int repeats = std::clamp(int(kTuningBudgetMs / (kTuningRounds * n * std::max(favourite_ms, 1e-3))) - 1,
                                   1, kTuningMaxRepeats);
    for (int round = 0; round < kTuningRounds; ++round)
      for (int i = 0; i < n; ++i) {
        if (round > 0 && ms[i] < 0) continue;  // cuBLASLt refused it
        const double t = time(candidates_[i], repeats);
        ms[i] = round == 0 || t < 0 ? t : std::min(ms[i], t);
      }
  }
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (ms[i] > 0 && ms[i] < ms[best] * (1 - kTuningMinGain)) best = i;
  aligned_ = candidates_[best];
  pick_ = best;
  const char* how = in_graph ? "tuned in a CUDA graph" : "tuned";
  tuning_ = best == 0 ? fmt::format("{}: the heuristic's favourite of {} candidates, {:.1f} us", how, n, ms[0] * 1e3)
                      : fmt::format("{}: candidate {} of {}, {:.1f} us vs the heuristic's favourite at {:.1f} us",
                                    how, best + 1, n, ms[best] * 1e3, ms[0] * 1e3);
  store_decision(desc_, device_, workspace_bytes_, {best, n, tuning_});
}

void MatmulPlan::run(const void* a, const void* b, const void* c, void* d, const void* bias, void* workspace,
                     CUstream stream) const {
  bool has_bias = epilogue_has_bias(desc_.epilogue);
  uint32_t alignment = kPlannedAlignment;
  auto require = [&](const void* p, const char* name) {
    if (!p)
      throw std::invalid_argument(std::string("fastcomp::runtime::cuda::MatmulPlan::run(): ") + name +
                                  " is null for " + desc_.to_string());
    alignment = std::min(alignment, alignment_of(p));
  };
  require(a, "a");
  require(b, "b");
  require(d, "d");
  if (desc_.has_c) require(c, "c");
  if (has_bias) require(bias, "bias");
  if (alignment < scalar_type_size(desc_.dtype))
    throw std::invalid_argument(fmt::format(
        "fastcomp::runtime::cuda::MatmulPlan::run(): a pointer is aligned to {} bytes, less than one {} element, "
        "for {}; run this matmul through torch",
        alignment, scalar_type_name(desc_.dtype), desc_.to_string()));
  if (workspace_bytes_ > 0 && !workspace)
    throw std::invalid_argument(fmt::format("fastcomp::runtime::cuda::MatmulPlan::run(): the plan was made for a "
                                            "{}-byte workspace but none was given",
                                            workspace_bytes_));

  ContextGuard context(device_);
  std::lock_guard lock(mutex_);
  try {
    const Algo* algo = prefer_favourite_ ? &candidates_.front() : &aligned_;
    if (alignment < kPlannedAlignment) {
      std::optional<Algo>& slot = less_aligned_[std::countr_zero(alignment)];
      if (!slot) slot = choose_algos(alignment, 1).front();
      algo = &*slot;
    }
    if (has_bias)
      FC_SET_ATTRIBUTE(cublasLtMatmulDescSetAttribute, descriptors_.matmul, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
    // With C, the timed launches would add to D again and again (C may be D), so such products are not tuned.
    // Plans are built before any runs (W10 builds 24 plans of 6 products at once), so another plan of this
    // product may have decided since this one was built.
    if (!tuned_ && alignment == kPlannedAlignment && !desc_.has_c && config().matmul_tuning &&
        !stream_capturing(stream) && !adopt_decision(/*look_on_disk=*/false)) {
      tuned_ = true;
      try {
        tune(a, b, c, d, workspace, stream);
      } catch (const std::exception& e) {  // an event call failed: keep the heuristic's favourite
        aligned_ = candidates_.front();
        pick_ = 0;
        tuning_ = std::string("not tuned: ") + e.what();
      }
      FC_LOG(compile, debug, "cuBLASLt {}: {}", desc_.to_string(), tuning_);
    }
    check_cublas(launch(*algo, a, b, c, d, workspace, stream),
                 "cublasLtMatmul(handle, matmul, &alpha, b, b_layout, a, a_layout, &beta, c, c_layout, d, d_layout, "
                 "&algo, workspace, workspace_bytes, stream)");
  } catch (const CublasError& e) {
    throw with_matmul(e, desc_);
  }
}

size_t MatmulPlan::workspace_used() const {
  std::lock_guard lock(mutex_);
  return aligned_.workspace;
}

std::string MatmulPlan::tuning() const {
  std::lock_guard lock(mutex_);
  return tuning_;
}

bool MatmulPlan::tuned_pick_differs() const {
  std::lock_guard lock(mutex_);
  return tuned_ && pick_ != 0;
}

void MatmulPlan::prefer_favourite(bool yes) const {
  std::lock_guard lock(mutex_);
  prefer_favourite_ = yes;
}

std::string MatmulPlan::to_string() const {
  std::lock_guard lock(mutex_);
  return fmt::format("{}\n  cublasLt: {} algo_workspace={} waves={:.2f} ({})", desc_.to_string(), lt_.to_string(),
                     aligned_.workspace, aligned_.waves, tuning_);
}

}  // namespace fastcomp::runtime::cuda
