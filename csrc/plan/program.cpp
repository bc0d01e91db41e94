#include "plan/program.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace fastcomp::plan {
namespace {

const char* epilogue_name(MatmulStep::Epilogue e) {
  switch (e) {
    case MatmulStep::Epilogue::None: return "none";
    case MatmulStep::Epilogue::Bias: return "bias";
    case MatmulStep::Epilogue::Relu: return "relu";
    case MatmulStep::Epilogue::ReluBias: return "relu+bias";
    case MatmulStep::Epilogue::GeluTanh: return "gelu_tanh";
    case MatmulStep::Epilogue::GeluTanhBias: return "gelu_tanh+bias";
  }
  return "?";
}

}  // namespace

bool is_contiguous(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  int64_t expected = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] != 1 && strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> s(sizes.size(), 1);
  for (size_t d = sizes.size(); d-- > 1;) s[d - 1] = s[d] * std::max<int64_t>(sizes[d], 1);
  return s;
}

std::string Buffer::to_string() const {
  std::string what;
  switch (kind) {
    case Kind::Input: what = fmt::format("input {}", input); break;
    case Kind::Alloc: what = "alloc"; break;
    case Kind::Extern: what = "extern"; break;
    case Kind::View: what = fmt::format("view b{}", root); break;
  }
  std::string out = fmt::format("{} {}[{}]", what, codegen::dtype_name(dtype), fmt::join(sizes, ", "));
  if (!is_contiguous()) out += fmt::format(" strides=({})", fmt::join(strides, ", "));
  if (offset) out += fmt::format(" offset={}", offset);
  if (node >= 0) out += fmt::format("  # %{}", node);
  return out;
}

std::string MatmulStep::to_string() const {
  std::string out = fmt::format("matmul {} m={} n={} k={}", codegen::dtype_name(dtype), m, n, k);
  if (batch != 1) out += fmt::format(" batch={}", batch);
  out += fmt::format(" a=b{}({}, {}", a, a_row_stride, a_col_stride);
  out += batch != 1 ? fmt::format(", {})", a_batch_stride) : ")";
  out += fmt::format(" b=b{}({}, {}", b, b_row_stride, b_col_stride);
  out += batch != 1 ? fmt::format(", {})", b_batch_stride) : ")";
  out += fmt::format(" -> b{}", d);
  if (d_row_stride != n || (batch != 1 && d_batch_stride != m * n))  // D is row-major and dense unless said here
    out += batch != 1 ? fmt::format("({}, {})", d_row_stride, d_batch_stride) : fmt::format("({})", d_row_stride);
  if (epilogue != Epilogue::None) out += fmt::format(" epilogue={}", epilogue_name(epilogue));
  if (bias >= 0) out += fmt::format(" bias=b{}", bias);
  return out;
}

int Program::count(Step::Kind kind) const {
  int n = 0;
  for (const Step& s : steps) n += s.kind == kind;
  return n;
}

std::string Program::counts_text() const {
  return fmt::format("{} kernels, {} cuBLAS calls, {} extern ops", count(Step::Kind::Kernel), count(Step::Kind::Matmul),
                     count(Step::Kind::Extern));
}

std::string Program::to_string(const graph::Graph& graph) const {
  std::string out;
  for (size_t i = 0; i < buffers.size(); ++i) out += fmt::format("b{} = {}\n", i, buffers[i].to_string());
  for (const Step& s : steps) {
    switch (s.kind) {
      case Step::Kind::Kernel: {
        const KernelStep& k = kernel_steps[s.index];
        std::string args;
        for (size_t i = 0; i < k.args.size(); ++i) args += (i ? ", " : "") + fmt::format("b{}", k.args[i]);
        out += fmt::format("kernel {}({})\n", kernels[k.kernel].name, args);
        break;
      }
      case Step::Kind::Matmul: out += matmul_steps[s.index].to_string() + "\n"; break;
      case Step::Kind::Extern: {
        const graph::Node& n = graph.nodes[extern_steps[s.index].node];
        out += fmt::format("extern %{} = {}\n", n.id, n.target_name);
        break;
      }
    }
  }
  for (const codegen::Kernel& k : kernels) out += "\n" + k.to_string();
  return out;
}

}  // namespace fastcomp::plan
