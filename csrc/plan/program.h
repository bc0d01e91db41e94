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

// Row-major with no gaps (size-1 dimensions may have any stride), as torch's is_contiguous().
bool is_contiguous(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides);
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes);

// A tensor at run time. Its element (i0, i1, ...) lives at root_pointer + offset + sum(i_d * strides[d]) (in
// elements), where root_pointer is the data pointer of buffer `root` (itself, unless it is a view).
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
  std::vector<int64_t> sizes, strides;  // in elements
  int64_t offset = 0;                   // in elements, from the root's data pointer (0 unless View)

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
  int64_t m = 0, n = 0, k = 0, batch = 1;
  DType dtype = DType::F32;
  int a = -1, b = -1, bias = -1, d = -1;  // buffer ids (bias: -1 for none)
  int64_t a_row_stride = 0, a_col_stride = 0, a_batch_stride = 0;
  int64_t b_row_stride = 0, b_col_stride = 0, b_batch_stride = 0;
  int64_t d_row_stride = 0, d_batch_stride = 0;
  Epilogue epilogue = Epilogue::None;
  graph::NodeId node = -1;
  // "matmul f32 m=64 n=64 k=64 batch=8 a=b11(64, 1, 4096) b=b9(64, 1, 4096) -> b12(512, 64)": each operand's
  // (row, column, batch) strides; D's (row, batch) strides only where D is not dense row-major.
  std::string to_string() const;
};

// A graph node run by calling its torch callable, as the torch runner does: ops the backend has no code for,
// views whose tensor object the program hands out, and everything that is not a tensor.
struct ExternStep {
  graph::NodeId node = -1;
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

  int count(Step::Kind kind) const;
  std::string counts_text() const;  // "2 kernels, 1 cuBLAS calls, 0 extern ops": what explain() and logs report
  std::string to_string(const graph::Graph& graph) const;  // fusion.txt: buffers, then steps in order
};

}  // namespace fastcomp::plan
