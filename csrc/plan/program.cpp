#include "plan/program.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "support/pystr.h"

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

std::vector<int> symbols_in_use(const Program& p) {
  std::vector<bool> live(p.symbols.size(), false);
  auto mark = [&](const Size& s) {
    if (!s.is_static())
      for (int i : graph::sym_symbols(s.expr())) live[i] = true;
  };
  for (const Buffer& b : p.buffers) {
    for (const Size& s : b.sizes) mark(s);
    for (const Size& s : b.strides) mark(s);
  }
  std::vector<int> out;
  for (size_t i = 0; i < live.size(); ++i)
    if (live[i]) out.push_back(static_cast<int>(i));
  return out;
}

std::vector<int> written_buffers(const Program& p, const Step& step) {
  if (step.kind == Step::Kind::Matmul) return {p.matmul_steps[step.index].d};
  if (step.kind != Step::Kind::Kernel) return {};
  const KernelStep& k = p.kernel_steps[step.index];
  return std::vector<int>(k.args.begin() + static_cast<std::ptrdiff_t>(p.kernels[k.kernel].inputs.size()), k.args.end());
}

void make_view_of(Program& p, int buffer, int root, const Size& offset) {
  std::vector<bool> moved(p.buffers.size(), false);
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    Buffer& b = p.buffers[i];
    if (b.root != buffer) continue;
    moved[i] = true;
    b.root = root;
    b.offset = b.offset + offset;
  }
  p.buffers[buffer].kind = Buffer::Kind::View;
  for (const KernelStep& step : p.kernel_steps) {
    codegen::Kernel& k = p.kernels[step.kernel];
    for (size_t i = 0; i < step.args.size(); ++i) {
      if (!moved[step.args[i]]) continue;
      for (codegen::Operand* op : codegen::operand_copies(k, i)) op->storage_offset = op->storage_offset + offset;
    }
  }
}

bool is_contiguous(const Sizes& sizes, const Sizes& strides) {
  Size expected = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] != 1 && strides[d] != expected) return false;
    expected = expected * sizes[d];
  }
  return true;
}

// torch's contiguous strides; a symbolic size counts as itself (its strides are checked against this by the
// guards, which see the same expressions torch's meta functions gave at other sizes).
Sizes contiguous_strides(const Sizes& sizes) {
  Sizes s(sizes.size(), 1);
  for (size_t d = sizes.size(); d-- > 1;)
    s[d - 1] = s[d] * (sizes[d].is_static() ? Size(std::max<int64_t>(sizes[d].hint(), 1)) : sizes[d]);
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
  std::string out = fmt::format("{} {}[{}]", what, codegen::dtype_name(dtype), codegen::join_sizes(sizes, ", "));
  if (!is_contiguous()) out += fmt::format(" strides=({})", codegen::join_sizes(strides, ", "));
  if (offset != 0) out += fmt::format(" offset={}", offset.to_string());
  if (node >= 0) out += fmt::format("  # %{}", node);
  return out;
}

std::string MatmulStep::to_string() const {
  auto t = [](const Size& s) { return s.to_string(); };
  std::string out = fmt::format("matmul {} m={} n={} k={}", codegen::dtype_name(dtype), t(m), t(n), t(k));
  if (batch != 1) out += fmt::format(" batch={}", t(batch));
  out += fmt::format(" a=b{}({}, {}", a, t(a_row_stride), t(a_col_stride));
  out += batch != 1 ? fmt::format(", {})", t(a_batch_stride)) : ")";
  out += fmt::format(" b=b{}({}, {}", b, t(b_row_stride), t(b_col_stride));
  out += batch != 1 && b_next.empty() ? fmt::format(", {})", t(b_batch_stride)) : ")";
  for (int b_other : b_next) out += fmt::format("+b{}", b_other);
  out += fmt::format(" -> b{}", d);
  if (d_row_stride != n || (batch != 1 && d_batch_stride != m * n))  // D is row-major and dense unless said here
    out += batch != 1 ? fmt::format("({}, {})", t(d_row_stride), t(d_batch_stride))
                      : fmt::format("({})", t(d_row_stride));
  if (epilogue != Epilogue::None) out += fmt::format(" epilogue={}", epilogue_name(epilogue));
  if (bias >= 0) out += fmt::format(" bias=b{}", bias);
  for (int bias_other : bias_next) out += fmt::format("+b{}", bias_other);
  return out;
}

int Program::count(Step::Kind kind) const {
  int n = 0;
  for (const Step& s : steps) n += s.kind == kind;
  return n;
}

std::string Program::counts_text() const {
  std::string out = fmt::format("{} kernels, {} cuBLAS calls, {} extern ops", count(Step::Kind::Kernel),
                                count(Step::Kind::Matmul), count(Step::Kind::Extern));
  if (is_dynamic()) {
    std::vector<std::string> names;
    for (int s : live_symbols) names.push_back(fmt::format("s{}", s));
    out += fmt::format(", dynamic shapes ({})", fmt::join(names, ", "));
  }
  std::string declined;
  for (const ExternStep& e : extern_steps)
    if (!e.why.empty()) declined += fmt::format("{}%{} ({})", declined.empty() ? "" : ", ", e.node, e.why);
  return declined.empty() ? out : out + "; through torch: " + declined;
}

std::string Program::to_string(const graph::Graph& graph) const {
  std::string out;
  for (size_t i = 0; i < symbols.size(); ++i)
    out += fmt::format("s{} = input {} size({})\n", i, symbols[i].input, symbols[i].dim);
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
        const ExternStep& e = extern_steps[s.index];
        const graph::Node& n = graph.nodes[e.node];
        // Buffers passed for arguments ("taking b3 as 0, b4 as 1", "taking b9 as attn_mask"), and a
        // convolution's call "without its bias -> b5".
        if (!e.passed.empty() || e.result >= 0) {
          std::string passed;
          for (const ExternStep::PassedBuffer& p : e.passed) {
            const std::string name = p.slot < n.args.size() ? std::to_string(p.slot)
                                                            : utf8(PyTuple_GET_ITEM(n.kwnames.get(), p.slot - n.args.size()));
            passed += fmt::format("{}b{} as {}", passed.empty() ? " taking " : ", ", p.buffer, name);
          }
          out += fmt::format("extern %{} = {}{}{}\n", n.id, n.target_name, passed,
                             e.result >= 0 ? fmt::format(" without its bias -> b{}", e.result) : "");
        }
        else if (e.as_view)
          out += fmt::format("extern %{} = as_strided(b{})  # {}\n", n.id, node_buffer[n.id], n.target_name);
        else
          out += fmt::format("extern %{} = {}{}\n", n.id, n.target_name, e.why.empty() ? "" : "  # " + e.why);
        break;
      }
    }
  }
  for (const codegen::Kernel& k : kernels) out += "\n" + k.to_string();
  return out;
}

}  // namespace fastcomp::plan
