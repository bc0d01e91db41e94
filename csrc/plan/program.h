// The fusion plan: what the CUDA executable runs for one graph. Lowering (lower.h) turns the graph into buffers
// (every tensor that exists at run time) and steps (fused kernels, matrix products, extern torch calls), in
// execution order. The plan knows nothing about CUDA handles or Python objects at run time; the executable
// (runtime/cuda_executable.cpp) binds it to them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "codegen/kernel_ir.h"
#include "graph/ir.h"

namespace fastcomp::plan {

using codegen::DType;
using codegen::Size;
using codegen::Sizes;

// Row-major with no gaps (size-1 dimensions may have any stride), as torch's is_contiguous(); for symbolic
// sizes: for every value of the symbols.
bool is_contiguous(const Sizes& sizes, const Sizes& strides);
Sizes contiguous_strides(const Sizes& sizes);

// A tensor at run time. Its element (i0, i1, ...) lives at root_pointer + offset + sum(i_d * strides[d]) (in
// elements), where root_pointer is the data pointer of buffer `root` (itself, unless it is a view). Under
// dynamic shapes sizes and strides may be expressions over the graph's symbols, evaluated per call.
struct Buffer {
  enum class Kind : uint8_t {
    Input,   // the executable's input `input` (a torch tensor the guard program collected)
    Alloc,   // allocated through torch for each call, written by a kernel or a matrix product
    Extern,  // the tensor an extern step returned
    View,    // another layout of buffer `root`'s storage (view, permute, slice, expand, ...)
  };
  Kind kind = Kind::Alloc;
  int input = -1;           // Input
  int root = -1;            // the buffer owning the storage (itself unless View)
  graph::NodeId node = -1;  // the graph value it holds; -1 for a copy lowering made (e.g. a contiguous copy)
  DType dtype = DType::F32;
  Sizes sizes, strides;  // in elements
  Size offset = 0;       // in elements, from the root's data pointer (0 unless View)

  bool is_contiguous() const { return plan::is_contiguous(sizes, strides); }
  std::string to_string() const;  // "b3 = alloc f32[32, 512]" / "b4 = view b0 f32[512, 32] strides=(1, 512)"
};

// One fused kernel of the graph's NVRTC program; `args` are buffer ids, the kernel's inputs then its outputs.
struct KernelStep {
  int kernel = -1;  // index into Program::kernels
  std::vector<int> args;
};

// D = alpha * A @ B (+ bias) then the epilogue, for row-major views of A [m, k], B [k, n] and D [m, n]
// (batched: `batch` such products, each operand advancing by its batch stride). Strides in elements.
struct MatmulStep {
  enum class Epilogue : uint8_t { None, Bias, Relu, ReluBias, GeluTanh, GeluTanhBias };
  // Sizes and strides may be symbolic (dynamic shapes): the executable evaluates them per call.
  Size m = 0, n = 0, k = 0, batch = 1;
  DType dtype = DType::F32;
  int a = -1, b = -1, bias = -1, d = -1;  // buffer ids (bias: -1 for none)
  Size a_row_stride = 0, a_col_stride = 0, a_batch_stride = 0;
  Size b_row_stride = 0, b_col_stride = 0, b_batch_stride = 0;
  Size d_row_stride = 0, d_batch_stride = 0;
  Epilogue epilogue = Epilogue::None;
  // A group of products that share A (x @ Wg and x @ Wu of a SwiGLU MLP; group_products.h): batch i > 0 reads
  // its B from buffer b_next[i - 1] (of b's layout, anywhere in memory) and writes D's batch i. b_batch_stride is
  // 0 here: the executable reads the distances between the B's on each call. With a bias, bias_next[i - 1] is
  // batch i's (F.linear's q, k and v projections with their biases).
  std::vector<int> b_next, bias_next;
  graph::NodeId node = -1;
  // "matmul f32 m=64 n=64 k=64 batch=8 a=b11(64, 1, 4096) b=b9(64, 1, 4096) -> b12(512, 64)": each operand's
  // (row, column, batch) strides; D's (row, batch) strides only where D is not dense row-major. A group shows
  // its other B's as b=b9(...)+b10+b12.
  std::string to_string() const;
};

// A graph node run by calling its torch callable, as the torch runner does: ops the backend has no code for,
// views whose tensor object the program hands out, and everything that is not a tensor.
struct ExternStep {
  graph::NodeId node = -1;
  std::string why;  // when a lowering declined the node for a reason worth telling (dynamic shapes); else empty
  // The node is a view whose torch object is made from its buffer's root tensor in one as_strided call, rather
  // than by calling its op (and the ops of the views it is a view of) on its argument's object.
  bool as_view = false;
  // A convolution called without its bias: argument `bias_at` is passed as None and the result goes to buffer
  // `result` (an Extern buffer of no node); the node's value is that plus the bias, added by the kernel reading it
  // (lower_convolution.cpp). -1: the node's own call, its result the node's object and buffer.
  int bias_at = -1, result = -1;
  // Arguments passed as a buffer lowering made instead of the node's own value: a convolution planned
  // channels-last (channels_last.h) takes NHWC copies of an input or weight that is not; an attention call left to
  // cuDNN takes its boolean mask as the additive bias torch would make of it (lower_attention.cpp). `slot` counts
  // the positional arguments, then the keyword ones in the node's order.
  struct PassedBuffer {
    size_t slot;
    int buffer;
  };
  std::vector<PassedBuffer> passed;

  // The buffer passed in argument slot `slot` instead of the node's own argument; -1 where there is none.
  int passed_buffer(size_t slot) const {
    for (const PassedBuffer& p : passed)
      if (p.slot == slot) return p.buffer;
    return -1;
  }
};

struct Step {
  enum class Kind : uint8_t { Kernel, Matmul, Extern } kind = Kind::Kernel;
  int index = -1;  // into Program::kernel_steps, matmul_steps or extern_steps
};

struct Program {
  std::vector<Buffer> buffers;
  std::vector<codegen::Kernel> kernels;
  std::vector<KernelStep> kernel_steps;
  std::vector<MatmulStep> matmul_steps;
  std::vector<ExternStep> extern_steps;
  std::vector<Step> steps;                   // in execution order
  std::vector<int> node_buffer;              // per graph node: the buffer holding its value, or -1
  std::vector<bool> node_object;             // per graph node: a torch object exists at run time (input/extern)
  int device = 0;                            // CUDA device ordinal of every tensor
  std::vector<graph::SymBinding> symbols;    // dynamic shapes: where each symbol's value comes from (the graph's)
  std::vector<int> live_symbols;             // ... and those the plan's sizes mention (others were specialised)

  bool is_dynamic() const { return !symbols.empty(); }

  int count(Step::Kind kind) const;
  // "2 kernels, 1 cuBLAS calls, 0 extern ops", plus ", dynamic shapes (s0, s1)" and why ops that lowering
  // declined run through torch ("; through torch: %5 torch.mean (a mean over a symbolic row length)"): what
  // explain() and logs report.
  std::string counts_text() const;
  std::string to_string(const graph::Graph& graph) const;  // fusion.txt: buffers, then steps in order
};

// The symbols the plan's buffer sizes and strides mention, in order (Program::live_symbols).
std::vector<int> symbols_in_use(const Program& program);

// The buffers a kernel step or a product writes: a kernel's outputs, a product's D (an extern step: none known).
std::vector<int> written_buffers(const Program& program, const Step& step);

// Makes buffer `buffer` (an Alloc) and the views of it views of `root` at `offset` elements further. Kernels get
// their operands' root pointers and add the offsets lowering gave them, so those offsets move too.
void make_view_of(Program& program, int buffer, int root, const Size& offset);

}  // namespace fastcomp::plan
