// emit_cuda and emit_program: dispatch by kernel kind, and the prelude every program starts with.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <map>
#include <set>

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

// f16 and bf16 as the kernels see them: expr_emitter.cpp converts each element to float where it is loaded and
// back where it is stored, and computes in float in between, so a type needs only its 16 bits in memory and one
// conversion each way: fc_f16 / fc_bf16, fc_<type>_to_float and fc_float_to_<type>.
//
// From sm_80 on every one of these conversions is a single PTX instruction, so the prelude writes them itself and
// the program includes no CUDA header: cuda_fp16.h and cuda_bf16.h are ~18k lines whose parsing took 10-25 ms of
// each half program's NVRTC time on a 2-core Xeon, and a program without #include needs no -I. Before sm_80 no
// instruction narrows to bf16 (it would take rounding in software, which we leave to NVIDIA), so there both
// types are the headers' own under our names: one prelude per arch, chosen in emit_program.
constexpr const char* kHalfBits = R"cuda(struct alignas(2) fc_f16 { unsigned short bits; };
// PTX cvt: widening is exact; narrowing rounds to nearest even (.rn), as torch does.
__device__ __forceinline__ float fc_f16_to_float(fc_f16 x) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
  return f;
}
__device__ __forceinline__ fc_f16 fc_float_to_f16(float f) {
  fc_f16 x;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(x.bits) : "f"(f));
  return x;
}
)cuda";
constexpr const char* kBfloatBits = R"cuda(struct alignas(2) fc_bf16 { unsigned short bits; };
// Narrowing rounds to nearest even with cvt.rn.bf16.f32 (new in sm_80).
__device__ __forceinline__ fc_bf16 fc_float_to_bf16(float f) {
  fc_bf16 x;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(x.bits) : "f"(f));
  return x;
}
)cuda";
// Widening: a bf16 is the upper half of the float it stands for, so a shift does it on any arch. From sm_90 on
// there is an instruction for it, and the kernels use it there: with it, their machine code is the code that was
// measured on H100/H200 through the headers, byte for byte (W1-W9). The shift, which the optimizer sees through,
// reschedules whole kernels (W8 loses 30 of its ~500 instructions); whether that is faster is for a GPU to tell.
constexpr const char* kBfloatWidenByShift = R"cuda(__device__ __forceinline__ float fc_bf16_to_float(fc_bf16 x) {
  return __uint_as_float((unsigned int)x.bits << 16);
}
)cuda";
constexpr const char* kBfloatWidenByCvt = R"cuda(__device__ __forceinline__ float fc_bf16_to_float(fc_bf16 x) {
  float f;
  asm("cvt.f32.bf16 %0, %1;" : "=f"(f) : "h"(x.bits));
  return f;
}
)cuda";
constexpr const char* kHalfFromHeader = R"cuda(#include <cuda_fp16.h>
typedef __half fc_f16;
__device__ __forceinline__ float fc_f16_to_float(fc_f16 x) { return __half2float(x); }
__device__ __forceinline__ fc_f16 fc_float_to_f16(float f) { return __float2half_rn(f); }
)cuda";
constexpr const char* kBfloatFromHeader = R"cuda(#include <cuda_bf16.h>
typedef __nv_bfloat16 fc_bf16;
__device__ __forceinline__ float fc_bf16_to_float(fc_bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ fc_bf16 fc_float_to_bf16(float f) { return __float2bfloat16_rn(f); }
)cuda";

// f16/bf16 values compute in float and round where they are produced (see expr_emitter.cpp).
constexpr const char* kHalfRound =
    "__device__ __forceinline__ float fc_round_f16(float x) { return fc_f16_to_float(fc_float_to_f16(x)); }\n";
constexpr const char* kBfloatRound =
    "__device__ __forceinline__ float fc_round_bf16(float x) { return fc_bf16_to_float(fc_float_to_bf16(x)); }\n";

constexpr const char* kHelpers = R"(
// A kernel's dynamic shared memory (the launch's shared bytes) as 16-byte aligned floats. CPU tests that run the
// kernels (tests/codegen/cuda_on_cpu.h) define it as a static array first.
#ifndef FC_DYNAMIC_SHARED_FLOATS
#define FC_DYNAMIC_SHARED_FLOATS(name) \
  extern __shared__ float4 name##_float4[]; \
  float* const name = reinterpret_cast<float*>(name##_float4)
#endif

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

void replace_all(std::string& text, const std::string& marker, const std::string& with) {
  for (size_t at = text.find(marker); at != std::string::npos; at = text.find(marker, at + with.size()))
    text.replace(at, marker.size(), with);
}

std::string fill_template(const char* text, std::initializer_list<TemplateField> fields) {
  std::string out = text;
  for (const auto& [marker, value] : fields) replace_all(out, marker, value);
  return out;
}

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

void add_vector_operand(KernelSource& src, const Kernel& k, size_t o, int group) {
  const Operand& op = operand(k, o);
  // An input with a range may have an offset before its tensor; its first readable element is where it starts.
  const Size first =
      op.valid.dim >= 0 ? op.storage_offset + op.valid.begin * op.strides[op.valid.dim] : op.storage_offset;
  src.vector_operands.push_back({static_cast<int>(o), first, group * dtype_size(op.dtype)});
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

bool wide_indices(const Kernel& k, int64_t loop_reach) {
  int64_t max_index = std::max(loop_reach, numel(k.shape).hint());
  bool symbolic = !all_static(k.shape);
  for (size_t o = 0; o < k.inputs.size() + k.outputs.size(); ++o) {
    const Operand& op = operand(k, o);
    max_index = std::max({max_index, max_offset(k.shape, op.strides, op.storage_offset),
                          max_offset(k.shape, op.strides, 0), -op.storage_offset.hint()});
    symbolic = symbolic || !all_static(op.strides) || !op.storage_offset.is_static();
  }
  for (const Expr& e : k.exprs) {
    if (e.op != ExprOp::Gather) continue;
    const Operand& op = k.inputs[e.operand];
    const int64_t reach = std::max<int64_t>(e.gather.size.hint() - 1, 0) * e.gather.stride.hint();
    max_index = std::max(max_index, max_offset(k.shape, op.strides, op.storage_offset) + reach);
    symbolic = symbolic || !e.gather.size.is_static() || !e.gather.stride.is_static();
  }
  return symbolic || max_index > INT_MAX;
}

std::string index_type_decl(bool wide) { return wide ? "using idx_t = int64_t;" : "using idx_t = int32_t;"; }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace detail

KernelSource emit_cuda(const Kernel& kernel, const DeviceLimits& limits) {
  detail::validate(kernel);
  KernelSource src = kernel.kind == Kernel::Kind::Pointwise      ? detail::emit_pointwise(kernel, limits)
                     : kernel.kind == Kernel::Kind::RowReduce    ? detail::emit_row_reduce(kernel, limits)
                     : kernel.kind == Kernel::Kind::ColumnReduce ? detail::emit_column_reduce(kernel, limits)
                     : kernel.kind == Kernel::Kind::Attention    ? detail::emit_attention(kernel, limits)
                     : kernel.kind == Kernel::Kind::Combo        ? detail::emit_combo(kernel, limits)
                                                                 : detail::emit_small_matmul(kernel, limits);
  std::string params, args;
  for (size_t i = 0; i < src.size_params.size(); ++i) {
    params += fmt::format(", const int64_t p{}", i);
    args += fmt::format(", p{}", i);
  }
  detail::replace_all(src.code, detail::kSizeParamsMarker, params);
  detail::replace_all(src.code, detail::kSizeArgsMarker, args);
  return src;
}

std::string emit_program(const std::vector<KernelSource>& kernels, const runtime::cuda::CudaArch& arch,
                         PointerAlignment alignment) {
  bool fp16 = false, bf16 = false;
  for (const KernelSource& k : kernels) {
    fp16 |= k.needs_fp16;
    bf16 |= k.needs_bf16;
  }
  // Each declaration costs front-end time, so the half types come in only when a kernel uses them.
  const bool own_types = arch.has_bf16_arithmetic();  // declared here from sm_80 on (see kHalfBits)
  std::string out = "// fastcomp program: prelude, then one kernel per fused group\n";
  out += detail::kIntegerTypes;
  if (fp16) out += std::string(own_types ? detail::kHalfBits : detail::kHalfFromHeader) + detail::kHalfRound;
  if (bf16 && own_types)
    out += std::string(detail::kBfloatBits) +
           (arch.has_bf16_widening() ? detail::kBfloatWidenByCvt : detail::kBfloatWidenByShift);
  if (bf16 && !own_types) out += detail::kBfloatFromHeader;
  if (bf16) out += detail::kBfloatRound;
  out += detail::kHelpers;
  bool vector = false;
  for (const KernelSource& k : kernels) vector |= !k.vector_operands.empty();
  if (vector)
    out += alignment == PointerAlignment::Vector
             ? "// The launcher checked that every vector operand is aligned (KernelSource::vector_operands).\n"
               "constexpr bool kVectorAccess = true;\n"
             : "// Pointers of any alignment: every access is scalar.\nconstexpr bool kVectorAccess = false;\n";
  for (const KernelSource& k : kernels) out += "\n" + k.code;
  return out;
}

namespace {
// What a kernel costs NVRTC, in characters of code: its text, what every kernel costs beyond it (signature,
// launch bounds, the optimiser's per-function work), and most of all its unrolled loops, whose bodies NVVM and
// ptxas see many times over. On an H200 host (less the ~25 ms a program costs at all) an attention kernel took
// ~285 ms, a row reduction ~90, a pointwise kernel ~35: 8 : 2.6 : 1, where their `#pragma unroll`s are
// 24 : 8 : 3 and their characters 5.9k : 3.5k : 1.7k.
constexpr size_t kPerKernelCost = 1000;
constexpr size_t kPerUnrolledLoopCost = 1000;
constexpr size_t kMinPartCost = 8000;  // about two pointwise kernels: less would not pay for the prelude again
size_t compile_cost(const KernelSource& k) {
  size_t unrolled = 0;
  for (size_t at = 0; (at = k.code.find("#pragma unroll\n", at)) != std::string::npos; ++at) ++unrolled;
  return k.code.size() + kPerKernelCost + unrolled * kPerUnrolledLoopCost;
}
}  // namespace

std::vector<ProgramPart> split_program(const std::vector<KernelSource>& kernels, const runtime::cuda::CudaArch& arch,
                                       PointerAlignment alignment, int parts) {
  // The kernels with code of their own (share_identical_kernels leaves a later twin only a comment and the
  // first one's name).
  std::vector<size_t> owners;
  std::vector<size_t> cost(kernels.size(), 0);
  std::set<std::string> named;
  size_t total = 0;
  for (size_t i = 0; i < kernels.size(); ++i)
    if (named.insert(kernels[i].name).second) owners.push_back(i), total += cost[i] = compile_cost(kernels[i]);
  const size_t n = std::clamp<size_t>(std::min<size_t>(total / kMinPartCost, owners.size()), 1,
                                      static_cast<size_t>(std::max(parts, 1)));
  // Longest first onto the part with the least so far (LPT), then each part's kernels back in program order.
  std::vector<size_t> by_cost = owners;
  std::stable_sort(by_cost.begin(), by_cost.end(), [&](size_t a, size_t b) { return cost[a] > cost[b]; });
  std::vector<size_t> load(n, 0);
  std::vector<std::vector<size_t>> members(n);
  for (size_t i : by_cost) {
    const size_t part = std::min_element(load.begin(), load.end()) - load.begin();
    load[part] += cost[i];
    members[part].push_back(i);
  }
  std::vector<ProgramPart> out;
  for (std::vector<size_t>& m : members) {
    std::sort(m.begin(), m.end());
    std::vector<KernelSource> mine;
    ProgramPart part;
    for (size_t i : m) mine.push_back(kernels[i]), part.kernels.push_back(kernels[i].name);
    part.source = emit_program(mine, arch, alignment);
    out.push_back(std::move(part));
  }
  return out;
}

namespace detail {
std::string renamed(const std::string& code, const std::string& name, const std::string& as) {
  auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  std::string out;
  size_t at = 0;
  for (size_t hit; (hit = code.find(name, at)) != std::string::npos; at = hit + name.size()) {
    const size_t end = hit + name.size();
    const bool starts = hit == 0 || !ident(code[hit - 1]);
    const bool ends = end == code.size() || !std::isalnum(static_cast<unsigned char>(code[end]));
    out.append(code, at, hit - at).append(starts && ends ? as : name);
  }
  return out.append(code, at);
}
}  // namespace detail

int share_identical_kernels(std::vector<KernelSource>& kernels) {
  std::map<std::string, std::string> first;  // code under a placeholder name -> the kernel that has it
  int shared = 0;
  for (KernelSource& k : kernels) {
    auto [it, added] = first.emplace(detail::renamed(k.code, k.name, "fc_kernel"), k.name);
    if (added) continue;
    k.code = "// " + k.name + ": the same code as " + it->second + "\n";
    k.name = it->second;
    ++shared;
  }
  return shared;
}

}  // namespace fastcomp::codegen
