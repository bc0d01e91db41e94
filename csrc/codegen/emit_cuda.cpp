// emit_cuda and emit_program: dispatch by kernel kind, and the prelude every program starts with.
#include <fmt/format.h>

#include <climits>

#include "codegen/emit_internal.h"
#include "codegen/expr_emitter.h"

namespace fastcomp::codegen {
namespace detail {
namespace {

// NVRTC has no standard headers unless given them, so the fixed-width names the emitted code uses are declared
// here (the same widths as on every CUDA host).
constexpr const char* kIntegerTypes =
    "typedef signed char int8_t;\n"
    "typedef unsigned char uint8_t;\n"
    "typedef short int16_t;\n"
    "typedef int int32_t;\n"
    "typedef long long int64_t;\n";

// f16/bf16 values compute in float and round where they are produced (see expr_emitter.cpp).
constexpr const char* kHalfHelpers =
    "__device__ __forceinline__ float fc_round_f16(float x) { return __half2float(__float2half_rn(x)); }\n";
constexpr const char* kBfloatHelpers =
    "__device__ __forceinline__ float fc_round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }\n";

constexpr const char* kHelpers = R"(
// N consecutive elements as one memory access of N * sizeof(T) bytes (16 at most).
template <typename T, int N> struct alignas(sizeof(T) * N) fc_vec { T v[N]; };

// Reads/writes N consecutive elements: one vector access when the caller knows p is aligned, else N scalar ones.
template <int N, bool kVector, typename T>
__device__ __forceinline__ void fc_load(const T* p, T (&r)[N]) {
  if constexpr (kVector) {
    const fc_vec<T, N> v = *reinterpret_cast<const fc_vec<T, N>*>(p);
#pragma unroll
    for (int k = 0; k < N; ++k) r[k] = v.v[k];
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) r[k] = p[k];
  }
}
template <int N, bool kVector, typename T>
__device__ __forceinline__ void fc_store(T* p, const T (&r)[N]) {
  if constexpr (kVector) {
    fc_vec<T, N> v;
#pragma unroll
    for (int k = 0; k < N; ++k) v.v[k] = r[k];
    *reinterpret_cast<fc_vec<T, N>*>(p) = v;
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) p[k] = r[k];
  }
}
__device__ __forceinline__ bool fc_aligned(const void* p, int bytes) {
  return (reinterpret_cast<unsigned long long>(p) & (bytes - 1)) == 0;
}

// torch.maximum/minimum and relu: a NaN argument gives NaN.
template <typename T> __device__ __forceinline__ T fc_max(T a, T b) { return (a > b || a != a) ? a : b; }
template <typename T> __device__ __forceinline__ T fc_min(T a, T b) { return (a < b || a != a) ? a : b; }
template <typename T> __device__ __forceinline__ T fc_relu(T x) { return (x > T(0) || x != x) ? x : T(0); }
// Integer division rounding down, like Python's //.
template <typename T> __device__ __forceinline__ T fc_floordiv(T a, T b) {
  const T q = a / b;
  if constexpr (T(-1) > T(0)) return q;  // unsigned: truncation is the floor
  else return (a % b != 0 && (a < T(0)) != (b < T(0))) ? T(q - 1) : q;
}
// Exact integer power; a negative exponent leaves only 1 and -1 nonzero.
template <typename T> __device__ __forceinline__ T fc_ipow(T base, T exp) {
  if constexpr (T(-1) < T(0))
    if (exp < T(0)) return base == T(1) ? T(1) : base == T(-1) ? T((exp & 1) ? -1 : 1) : T(0);
  T r = 1;
  for (; exp; exp >>= 1, base *= base)
    if (exp & 1) r *= base;
  return r;
}

// Row reductions: a butterfly over the warp leaves every lane with the result; across warps each warp's lane 0
// writes a slot and every thread combines the slots in the same order, so all threads agree bit for bit.
struct fc_sum_op { template <typename T> __device__ T operator()(T a, T b) const { return a + b; } };
struct fc_max_op { template <typename T> __device__ T operator()(T a, T b) const { return fc_max(a, b); } };
struct fc_min_op { template <typename T> __device__ T operator()(T a, T b) const { return fc_min(a, b); } };
template <typename T, typename Op> __device__ __forceinline__ T fc_warp_reduce(T v, Op op) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
template <int kWarps, typename T, typename Op> __device__ __forceinline__ T fc_slots_reduce(const T* s, Op op) {
  T v = s[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) v = op(v, s[w]);
  return v;
}
)";

constexpr const char* kSizeParamsMarker = "/*fc_size_params*/";
constexpr const char* kSizeArgsMarker = "/*fc_size_args*/";

void replace_all(std::string& text, const std::string& marker, const std::string& with) {
  for (size_t at = text.find(marker); at != std::string::npos; at = text.find(marker, at + with.size()))
    text.replace(at, marker.size(), with);
}

bool uses(const Kernel& k, DType t) {
  for (const Operand& o : k.inputs)
    if (o.dtype == t) return true;
  for (const Operand& o : k.outputs)
    if (o.dtype == t) return true;
  for (const Expr& e : k.exprs)
    if (e.dtype == t) return true;
  return false;
}

}  // namespace

std::string kernel_params(const Kernel& k) {
  std::string out;
  for (size_t i = 0; i < k.inputs.size(); ++i)
    out += fmt::format("{}const {}* __restrict__ in{}", out.empty() ? "" : ", ", dtype_c_type(k.inputs[i].dtype), i);
  for (size_t i = 0; i < k.outputs.size(); ++i)
    out += fmt::format("{}{}* __restrict__ out{}", out.empty() ? "" : ", ", dtype_c_type(k.outputs[i].dtype), i);
  return out + kSizeParamsMarker;
}

std::string kernel_args(const Kernel& k) {
  std::string out;
  for (size_t i = 0; i < k.inputs.size(); ++i) out += fmt::format("{}in{}", out.empty() ? "" : ", ", i);
  for (size_t i = 0; i < k.outputs.size(); ++i) out += fmt::format("{}out{}", out.empty() ? "" : ", ", i);
  return out + kSizeArgsMarker;
}

const Operand& operand(const Kernel& k, size_t o) {
  return o < k.inputs.size() ? k.inputs[o] : k.outputs[o - k.inputs.size()];
}

std::string stored_value(const Kernel& k, const Store& s) {
  const DType from = k.exprs[s.expr].dtype, to = k.outputs[s.output].dtype;
  return to_memory(to, convert(from, to, value_name(s.expr)));
}

std::string join(const Sizes& sizes) { return join_sizes(sizes, ", "); }

std::string pointer_at(const Kernel& k, size_t o, SizeParams& params) {
  const bool input = o < k.inputs.size();
  const Operand& op = operand(k, o);
  std::string name = fmt::format("{}{}", input ? "in" : "out", input ? o : o - k.inputs.size());
  return op.storage_offset != 0 ? name + " + " + params.text(op.storage_offset) : name;
}

KernelSource source_for(const Kernel& k, int block, int64_t grid) {
  KernelSource src;
  src.name = k.name;
  src.block = block;
  src.grid = grid;
  src.needs_fp16 = uses(k, DType::F16);
  src.needs_bf16 = uses(k, DType::BF16);
  return src;
}

bool fits_int32(int64_t max_index) { return max_index <= INT_MAX; }

std::string index_type_decl(bool wide) { return wide ? "using idx_t = int64_t;" : "using idx_t = int32_t;"; }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace detail

KernelSource emit_cuda(const Kernel& kernel, const DeviceLimits& limits) {
  detail::validate(kernel);
  KernelSource src = kernel.kind == Kernel::Kind::Pointwise ? detail::emit_pointwise(kernel, limits)
                                                            : detail::emit_row_reduce(kernel, limits);
  std::string params, args;
  for (size_t i = 0; i < src.size_params.size(); ++i) {
    params += fmt::format(", const int64_t p{}", i);
    args += fmt::format(", p{}", i);
  }
  detail::replace_all(src.code, detail::kSizeParamsMarker, params);
  detail::replace_all(src.code, detail::kSizeArgsMarker, args);
  return src;
}

std::string emit_program(const std::vector<KernelSource>& kernels) {
  bool fp16 = false, bf16 = false;
  for (const KernelSource& k : kernels) {
    fp16 |= k.needs_fp16;
    bf16 |= k.needs_bf16;
  }
  // The half headers add a few ms to every compile, so they come in only when a kernel uses the type.
  std::string out = "// fastcomp program: prelude, then one kernel per fused group\n";
  out += detail::kIntegerTypes;
  if (fp16) out += std::string("#include <cuda_fp16.h>\n") + detail::kHalfHelpers;
  if (bf16) out += std::string("#include <cuda_bf16.h>\n") + detail::kBfloatHelpers;
  out += detail::kHelpers;
  for (const KernelSource& k : kernels) out += "\n" + k.code;
  return out;
}

}  // namespace fastcomp::codegen
