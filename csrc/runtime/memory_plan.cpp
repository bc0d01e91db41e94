#include "runtime/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>

namespace fastcomp::runtime {

using plan::Buffer;
using plan::Step;

int64_t span_bytes_hint(const Buffer& buffer) {
  int64_t last = 0;
  for (size_t d = 0; d < buffer.sizes.size(); ++d) {
    if (buffer.sizes[d].hint() == 0) return 0;
    last += (buffer.sizes[d].hint() - 1) * buffer.strides[d].hint();
  }
  return (last + 1) * codegen::dtype_size(buffer.dtype);
}

MemoryPlan plan_memory(const plan::Program& program, const graph::Graph& graph) {
  MemoryPlan m;
  const size_t nsteps = program.steps.size();
  const size_t nb = program.buffers.size();
  m.end = static_cast<int>(nsteps);
  m.first_use.assign(nb, -1);
  m.last_use.assign(nb, -1);
  m.node_last_use.assign(graph.nodes.size(), -1);
  m.check_layout.assign(nb, false);
  std::vector<bool> extern_reads(nb, false);  // an extern step's argument shares the buffer's memory
  // A buffer exists from its first use, read or write: usually its writer, but a bare allocation (torch.empty, a
  // tensor of no elements) may first be an extern op's argument (filled in place, as a MoE's inverse permutation
  // is) or read.
  auto use = [&](int b, int step) {
    const int r = program.buffers[b].root;
    if (m.first_use[r] < 0) m.first_use[r] = step;
    m.last_use[r] = std::max(m.last_use[r], step);
  };
  // Kernels and matmuls read a buffer through its planned layout, which an extern op's result may not have.
  auto kernel_read = [&](int b, int step) {
    use(b, step);
    const int r = program.buffers[b].root;
    if (program.buffers[r].kind == Buffer::Kind::Extern) m.check_layout[r] = true;
  };
  std::function<void(const graph::Arg&, int)> node_use = [&](const graph::Arg& a, int step) {
    if (a.kind == graph::Arg::Kind::Node) m.node_last_use[a.node] = std::max(m.node_last_use[a.node], step);
    for (const auto& item : a.items) node_use(item, step);
  };
  // A node's object keeps its storage alive, but the buffer of an Alloc node also feeds the object.
  std::function<void(const graph::Arg&, int)> buffers_of = [&](const graph::Arg& a, int step) {
    if (a.kind == graph::Arg::Kind::Node && program.node_buffer[a.node] >= 0) {
      use(program.node_buffer[a.node], step);
      extern_reads[program.buffers[program.node_buffer[a.node]].root] = true;
    }
    for (const auto& item : a.items) buffers_of(item, step);
  };
  for (size_t si = 0; si < nsteps; ++si) {
    const Step& s = program.steps[si];
    const int step = static_cast<int>(si);
    if (s.kind == Step::Kind::Kernel) {
      const plan::KernelStep& k = program.kernel_steps[s.index];
      const size_t ninputs = program.kernels[k.kernel].inputs.size();
      for (size_t i = 0; i < k.args.size(); ++i) i < ninputs ? kernel_read(k.args[i], step) : use(k.args[i], step);
    } else if (s.kind == Step::Kind::Matmul) {
      const plan::MatmulStep& mm = program.matmul_steps[s.index];
      kernel_read(mm.a, step);
      kernel_read(mm.b, step);
      for (int b_other : mm.b_next) kernel_read(b_other, step);
      for (int bias_other : mm.bias_next) kernel_read(bias_other, step);
      if (mm.bias >= 0) kernel_read(mm.bias, step);
      use(mm.d, step);
    } else if (program.extern_steps[s.index].as_view) {
      // as_strided on the root's tensor: the view's object shares the root's memory from here on.
      const int b = program.node_buffer[program.extern_steps[s.index].node];
      use(b, step);
      extern_reads[program.buffers[b].root] = true;
    } else {
      const plan::ExternStep& e = program.extern_steps[s.index];
      const graph::Node& n = graph.nodes[e.node];
      for (const auto& a : n.args) node_use(a, step), buffers_of(a, step);
      for (const auto& a : n.kwargs) node_use(a, step), buffers_of(a, step);
      for (const plan::ExternStep::PassedBuffer& p : e.passed) {  // its tensor is passed for an argument
        use(p.buffer, step);
        extern_reads[program.buffers[p.buffer].root] = true;
      }
      const int b = e.result >= 0 ? e.result : program.node_buffer[n.id];
      if (b >= 0 && program.buffers[b].kind == Buffer::Kind::Extern) use(b, step);
    }
  }
  node_use(graph.output, m.end);
  buffers_of(graph.output, m.end);

  std::vector<ScratchLifetime> lifetimes;
  for (size_t b = 0; b < nb; ++b) {
    const Buffer& buf = program.buffers[b];
    const bool object = buf.node >= 0 && program.node_object[buf.node];
    if (buf.kind != Buffer::Kind::Alloc || m.first_use[b] < 0 || m.last_use[b] >= m.end || object ||
        extern_reads[b])
      continue;
    m.scratch.push_back(static_cast<int>(b));
    lifetimes.push_back({m.first_use[b], m.last_use[b], span_bytes_hint(buf)});
    m.arena_first = m.arena_first < 0 ? m.first_use[b] : std::min(m.arena_first, m.first_use[b]);
    m.arena_last = std::max(m.arena_last, m.last_use[b]);
    for (const plan::Size& x : buf.sizes) m.arena_static = m.arena_static && x.is_static();
    for (const plan::Size& x : buf.strides) m.arena_static = m.arena_static && x.is_static();
  }
  m.arena = ScratchArena(lifetimes);
  return m;
}

std::string MemoryPlan::to_string(const plan::Program& program) const {
  if (scratch.empty()) return "";
  std::vector<std::string> slots(arena.num_slots());
  for (size_t i = 0; i < scratch.size(); ++i) {
    std::string& s = slots[arena.slot(i)];
    s += fmt::format("{}b{}", s.empty() ? "" : " ", scratch[i]);
  }
  std::string size = "dynamic size";
  if (arena_static) {
    std::vector<int64_t> bytes, offsets;
    for (int b : scratch) bytes.push_back(span_bytes_hint(program.buffers[b]));
    size = fmt::format("{} bytes", arena.layout(bytes, &offsets));
  }
  std::string members;
  for (const std::string& s : slots) members += (members.empty() ? "" : " | ") + s;
  return fmt::format("scratch arena: {} buffers in {} slots, {} ({})", scratch.size(), arena.num_slots(), size,
                     members);
}

}  // namespace fastcomp::runtime
