// The loop-level IR of the CUDA backend: one fused kernel = an iteration space, operands addressed by strides
// over it, and a scalar expression DAG evaluated per element. Lowering (graph -> Kernel) decides fusion;
// emit_cuda (Kernel -> CUDA C) decides nothing but how to write it fast.
//
// Four kernel shapes:
//  - Pointwise: every element of `shape` is independent.
//  - RowReduce: the last dimension of `shape` is a row; Reduce expressions combine a row into one value that
//    later expressions (the epilogue) use for every element of that row (softmax, layer_norm, rmsnorm, sums).
//  - ColumnReduce: the dimensions flagged in `reduced_dims` are combined and the last dimension is kept (x.sum(0)
//    of [N, M], x.mean((0, 2)) of [A, B, C, D]); Reduce expressions give one value per kept coordinate (a
//    "column"), which later expressions (the epilogue) use. Each column's elements are read by consecutive
//    threads along the last dimension, so loads are coalesced.
//  - Attention: o = softmax(q @ k^T) @ v for every head of a self-attention whose keys fit in shared memory
//    (nn.MultiheadAttention's heads in W7 and W10): four steps (a kernel splitting the heads, two batched GEMMs
//    and a softmax kernel) as one. See Kernel::kind.
//  - SmallMatmul: D = A @ W^T (+ bias) for a few rows of A (F.linear at a small batch, W5's MLP): a lane per
//    output column, a few rows a block, warps splitting K (emit_small_matmul.cpp). See Kernel::kind.
//  - Combo: independent pointwise kernels launched as one, each on a range of the grid's blocks (emit_combo.cpp;
//    the casts of a model's weights under autocast). See Kernel::kind.
//
// Value semantics (what emit_cuda guarantees, matching eager torch): an f16/bf16 value is computed in fp32 and
// rounded to its dtype where it is produced, as eager rounds every op's result; integer values wrap in their
// dtype; a Cast converts as C++ does (float -> int truncates, anything -> bool is != 0).
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "codegen/size.h"
#include "runtime/cuda/arch.h"

namespace fastcomp::codegen {

// Element types the emitter knows; compute happens in the `compute` type of each expression.
enum class DType : uint8_t { Bool, U8, I8, I16, I32, I64, F16, BF16, F32, F64 };
const char* dtype_name(DType t);      // "f32"
const char* dtype_c_type(DType t);    // "float", "fc_f16", "fc_bf16", "int64_t", ...
int dtype_size(DType t);

enum class ExprOp : uint8_t {
  // leaves
  Load,      // element of input `operand` at the current index (converted like a Cast if dtypes differ)
  Constant,  // `constant` (exactly representable in `dtype`)
  RowIndex,  // index of the element along the row (RowReduce) or the flat element index (Pointwise), as i64;
             // not in ColumnReduce kernels
  InRange,   // bool: the element's coordinate along `range.dim` lies in `range` (Pointwise only)
  // indirect load (Pointwise; RowReduce as below): element of input `operand` at the current index plus
  // `gather.stride` times the value of args[0], an integer expression (the loaded index, e.g. embedding's
  // idx[...]). The operand's strides address the element over the space as a Load's do, with stride 0 along the
  // gathered dimension, so the index alone moves along it. The kernel checks 0 <= index < `gather.size` first and
  // calls __trap() otherwise (as torch's device-side assert, it ends the CUDA context): it never reads outside the
  // tensor. In a RowReduce kernel the index is a Load with stride 0 along the row (an embedding's row of the
  // table), checked once per row, and no other expression reads the gathered input.
  Gather,
  // unary
  // Exp..Silu need a floating dtype; Relu keeps NaN; Not is logical on bool and bitwise (~) on integers.
  Neg, Abs, Exp, Log, Sqrt, Rsqrt, Sigmoid, Tanh, Relu, Erf, Sin, Cos, GeluErf, GeluTanh, Silu, Not, Cast,
  // binary. Div on integers is floor division (Python's //; by zero: unspecified, as torch on CUDA); Pow on
  // integers is exact (negative exponents give 0 except for bases 1 and -1); Max/Min propagate NaN;
  // comparisons yield bool; And/Or are logical on bool and bitwise on integers.
  Add, Sub, Mul, Div, Pow, Max, Min, Lt, Le, Gt, Ge, Eq, Ne, And, Or,
  // ternary
  Where,     // operands: condition, if-true, if-false
  // reductions (RowReduce and ColumnReduce kernels only): reduce operand 0 over the row (over the reduced
  // dimensions); the result is per row (per column)
  ReduceSum, ReduceMax, ReduceMin,
};
const char* expr_op_name(ExprOp op);
bool is_reduce(ExprOp op);  // ReduceSum, ReduceMax, ReduceMin

// Coordinates [begin, end) along dimension `dim` of a kernel's iteration space; dim -1 stands for the whole
// space. Symbolic bounds work like any other size.
struct DimRange {
  int dim = -1;
  Size begin = 0, end = 0;
};

// The gathered dimension of a Gather: the source tensor's size along it (the bound indices are checked against)
// and its stride there, in elements. Either may be symbolic under dynamic shapes.
struct GatherAxis {
  Size size = 0, stride = 0;
};

struct Expr {
  ExprOp op = ExprOp::Constant;
  DType dtype = DType::F32;   // type of the value (for Cast: the target type)
  std::vector<int> args;      // indices of earlier Exprs
  int operand = -1;           // Load, Gather: index into Kernel::inputs
  double constant = 0;        // Constant
  DimRange range;             // InRange
  GatherAxis gather;          // Gather
};

// A tensor the kernel reads or writes, addressed as base + storage_offset + sum(index[d] * strides[d]) over the
// kernel's `shape` (a stride of 0 broadcasts). For RowReduce kernels an output of a per-row value has stride
// 0 in the last dimension; for ColumnReduce kernels an output of a per-column value has stride 0 in every
// reduced dimension. An output may alias an input only element for element (in-place ops).
// Under dynamic shapes sizes, strides and offsets may be expressions over the graph's symbols (codegen/size.h).
//
// An input may be readable in only part of the space (`valid`; Pointwise kernels only): a piece of a
// concatenation, addressed over the whole result so that its storage offset may lie before the tensor (even be
// negative). The kernel reads it only at coordinates inside the range, and a Load yields 0 elsewhere; only the
// elements the range covers need to exist.
struct Operand {
  DType dtype = DType::F32;
  Sizes strides;              // in elements, >= 0, one per dimension of Kernel::shape
  Size storage_offset = 0;    // in elements; >= 0 at the first valid coordinate
  DimRange valid;             // inputs: where it may be read (dim -1: everywhere)
};

struct Store {
  int expr = -1;   // which expression to write (converted like a Cast to the output's dtype)
  int output = -1; // index into Kernel::outputs
};

struct Kernel {
  // Attention: `shape` is [B, H, T, D] (batch, query heads, queries, head width), H, T and D static; inputs 0, 1,
  // 2 are q, k and v and output 0 is o. q and o are addressed over that space (element (b, h, t, d) is row t,
  // column d of head (b, h)); k and v over [B, Hk, S, D], Hk = `attention_kv_heads` heads of S = `attention_keys`
  // keys (0: H and T), query head h reading key head h / (H / Hk) (grouped-query attention). An optional input 3
  // is a mask over [B, H, T, S] (strides 0 where it broadcasts): bool (false: the key is left out) or the
  // operands' dtype (added to the scaled scores). Per head: o = softmax(scale * q @ k^T + mask, over the keys,
  // the keys after the query's own left out when `attention_causal`) @ v, in f32, with the operands' dtype (f32,
  // f16 or bf16, the same for q, k, v and o) for inputs and output; a row whose keys are all left out is 0 (as
  // torch's fused kernels and its math path's safe softmax give). Rounding to that dtype in between follows
  // `attention_rounding`. No exprs or stores.
  //
  // SmallMatmul: `shape` is [M, N, K], all static, M at most kSmallMatmulMaxRows; D[m, n] = sum over k of
  // A[m, k] * W[n, k] (+ bias[n]), accumulated in f32 and rounded once to the dtype (f32, f16 or bf16, the same
  // for every operand). Input 0 is A with strides [a_m, 0, 1], input 1 is W with strides [0, w_n, 1] (K
  // contiguous in both: F.linear's x and weight), an optional input 2 is the bias with strides [0, b_n, 0], and
  // output 0 is D with strides [d_m, d_n, 0]. No exprs or stores.
  //
  // Combo: `parts` are static Pointwise kernels that share no output, run as one launch: the first blocks run part
  // 0, the next ones part 1, and so on, each as its own launch would. `inputs` are the parts' inputs in order, then
  // `outputs` their outputs in order (a kernel step passes them so); `shape`, exprs and stores are empty.
  enum class Kind : uint8_t { Pointwise, RowReduce, ColumnReduce, Attention, SmallMatmul, Combo } kind = Kind::Pointwise;
  std::vector<Kernel> parts;       // Combo only
  enum class AttentionRounding : uint8_t {
    EveryStep,      // as F.multi_head_attention_forward's ops: q * scale, the scores, softmax's output rounded
    Probabilities,  // as scaled_dot_product_attention's fused kernels: only the probabilities, before @ v
    Output,         // as its math path, which computes f16 and bf16 in f32 (torch >= 2.5): only the output
  };
  double attention_scale = 1;      // Attention only
  bool attention_causal = false;
  int64_t attention_keys = 0;      // S; 0: T
  int64_t attention_kv_heads = 0;  // Hk, a divisor of H; 0: H
  int64_t key_count() const { return attention_keys ? attention_keys : shape[2].hint(); }     // S
  int64_t key_heads() const { return attention_kv_heads ? attention_kv_heads : shape[1].hint(); }  // Hk
  AttentionRounding attention_rounding = AttentionRounding::EveryStep;
  // ColumnReduce only: per dimension of `shape`, whether Reduce expressions combine along it; the last dimension
  // is never reduced and at least one is.
  std::vector<bool> reduced_dims;
  std::string name;                // unique within one program, a valid C identifier not starting with fc_
  Sizes shape;                     // iteration space
  std::vector<Operand> inputs;     // kernel parameters, in order, then outputs
  std::vector<Operand> outputs;
  std::vector<Expr> exprs;         // in evaluation order
  std::vector<Store> stores;

  std::string to_string() const;   // stable text for dumps and golden tests
};

// What emit_cuda produces for a kernel: source plus what the runtime needs to launch it. The kernel takes one
// pointer per input then per output: each operand's storage base (`storage_offset` is applied inside), then one
// int64_t per entry of `size_params`. Operands in `vector_operands` are read and written with vector accesses in a
// program emitted for aligned pointers (PointerAlignment::Vector), which the executable launches only when each
// of their first elements is aligned as listed; otherwise it launches the kernel of the same name from a program
// emitted for any alignment, whose accesses are scalar. Index arithmetic is 32-bit when every index, loop bound and element offset of the
// kernel fits in int32, else 64-bit (always, when the kernel has size parameters); `code`'s first line (a comment
// describing the kernel's shape) says which.
struct KernelSource {
  std::string name;
  std::string code;        // CUDA C of one extern "C" __global__ function and its __device__ helpers <name>_*
  int block = 256;         // threads per block
  int64_t grid = 1;        // blocks; with grid_items: the most blocks a call launches
  int shared_bytes = 0;    // dynamic shared memory
  bool needs_fp16 = false; // the prelude declares fc_f16 and its conversions
  bool needs_bf16 = false; // ... and fc_bf16's
  // Dynamic shapes: the values of the kernel's size parameters p0, p1, ..., in order, as expressions over the
  // graph's symbols (the executable evaluates them per call); empty for a static kernel. Every size the kernel
  // needs that is not a constant is one of them, so the code never depends on the sizes of a call.
  std::vector<graph::Sym> size_params;
  // When set, the grid is computed per call: clamp(ceil(grid_items / items_per_block), 1, grid).
  graph::Sym grid_items;
  int64_t items_per_block = 1;
  // Operands accessed `bytes` at a time in the aligned program: operand `operand` (inputs then outputs) at element
  // `first` of its kernel argument (the first it may touch) must be `bytes`-aligned for that program to run.
  struct VectorOperand {
    int operand = -1;
    Size first = 0;
    int bytes = 16;
  };
  std::vector<VectorOperand> vector_operands;
};

// What a program may assume of its kernels' vector operands (KernelSource::vector_operands). A kernel is compiled
// with one kind of access only: two instantiations of its element loop (vector and scalar) in one program would
// cost NVRTC 30-50% more time, for a case the caching allocator makes rare (a view that starts mid-vector).
enum class PointerAlignment : uint8_t {
  Vector,  // every vector operand is aligned: 16-byte loads and stores
  Any,     // no assumption: the same kernels with scalar accesses
};

// The GPU code is generated for: its arch (which decides the program's prelude) and the sizes launches are fitted
// to. The defaults are an H100's.
struct DeviceLimits {
  runtime::cuda::CudaArch arch{9, 0};
  int sm_count = 132;
  int max_threads_per_block = 1024;
  int max_threads_per_sm = 2048;  // resident threads per multiprocessor: grids are sized in waves
  int64_t max_shared_per_block = 227 * 1024;  // dynamic shared memory a block may opt into
};

/** Shared memory an attention kernel over S keys of D columns needs at least (its keys, values and a row a warp of
 *  queries, then their probabilities); lowering uses the attention kernel only where this is at most
 *  attention_shared_limit(the device's limits). */
int64_t attention_shared_bytes(int64_t s, int64_t d);
// The most dynamic shared memory any attention kernel asks for: what a block may opt into on the largest GPUs
// (sm_90 and sm_100: 227 KB; sm_80 163 KB, sm_86/89 and sm_120 99 KB, sm_75 64 KB).
constexpr int64_t kMaxAttentionSharedBytes = 227 * 1024;
// What an attention kernel may take on a device: all a block may opt into there. ViT's 197 keys of 64 f32 columns
// need 106 KB (so they ran as torch's call under the 96 KB this was before).
inline int64_t attention_shared_limit(const DeviceLimits& limits) {
  return std::min(limits.max_shared_per_block, kMaxAttentionSharedBytes);
}

// SmallMatmul kernels take at most this many rows of A: each lane keeps a running sum per row (and column) in
// registers.
constexpr int64_t kSmallMatmulMaxRows = 32;

/** Operand i of `k` (inputs then outputs, as a kernel step's arguments) and, in a combo, the same operand of the
 *  part it belongs to: what a change of the operand's addressing must change alike. */
std::vector<Operand*> operand_copies(Kernel& k, size_t i);

/** Emits the CUDA C of one kernel. Kernel parameters: one pointer per input then per output, in order.
 *  Throws std::invalid_argument when the kernel breaks the rules above (bad indices, types or strides). */
KernelSource emit_cuda(const Kernel& kernel, const DeviceLimits& limits);

/** One NVRTC program for all kernels of a graph, compiled for `arch`: the common prelude once, then every kernel,
 *  with vector or scalar accesses as `alignment` says. */
std::string emit_program(const std::vector<KernelSource>& kernels, const runtime::cuda::CudaArch& arch,
                         PointerAlignment alignment = PointerAlignment::Vector);

/** One of the NVRTC programs a graph's kernels are cut into: its source (the prelude and its kernels) and the
 *  names of the kernels it defines. */
struct ProgramPart {
  std::string source;
  std::vector<std::string> kernels;
};

/** The kernels (after share_identical_kernels) cut into at most `parts` programs that NVRTC can compile side by
 *  side, each about as costly to compile: NVRTC's own --split-compile parallelises one program's optimiser and
 *  assembler poorly (8 threads compiled GPT-2's program 1.6x faster than one on an H100 host), while separate
 *  programs on separate threads share nothing. Every part pays the prelude's front end again (~25 ms), so a part
 *  gets at least kMinPartCost of code; a program that small stays whole. Kernels keep their order within a part,
 *  so the same plan always gives the same parts (and kernel-cache keys). */
std::vector<ProgramPart> split_program(const std::vector<KernelSource>& kernels, const runtime::cuda::CudaArch& arch,
                                       PointerAlignment alignment, int parts);

/** Kernels whose code is the same but for their name (the layers of a model, each its own fused kernel of the
 *  same shapes) are compiled once: each later one keeps its launch shape but takes the first one's name (the
 *  function to launch) and a one-line comment as its code. NVRTC's time grows with the code it compiles, so a
 *  4-layer model compiles about as fast as one layer. Returns how many kernels now share another's code. */
int share_identical_kernels(std::vector<KernelSource>& kernels);

}  // namespace fastcomp::codegen
