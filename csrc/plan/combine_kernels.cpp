#include "plan/combine_kernels.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace fastcomp::plan {
namespace {

using codegen::Kernel;
using codegen::Operand;

// Static, and walking memory in the kernel's own order: each stride 0, or the contiguous one of the kernel's shape.
bool in_iteration_order(const Sizes& shape, const Operand& o) {
  if (!o.storage_offset.is_static() || o.valid.dim >= 0) return false;
  const Sizes contiguous = contiguous_strides(shape);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!o.strides[d].is_static()) return false;
    const int64_t s = o.strides[d].hint();
    if (shape[d].hint() != 1 && s != 0 && s != contiguous[d].hint()) return false;
  }
  return true;
}

int64_t output_bytes(const Kernel& k) {
  int64_t elements = 1, bytes = 0;
  for (const Size& s : k.shape) elements *= s.hint();
  for (const Operand& o : k.outputs) bytes += elements * codegen::dtype_size(o.dtype);
  return bytes;
}

}  // namespace

void combine_input_kernels(Program& p, const graph::Graph& graph) {
  for (const ExternStep& e : p.extern_steps)
    if (!e.as_view && graph::has_write_effects(graph.nodes[e.node])) return;  // it may write a graph input
  std::vector<int> writers(p.buffers.size(), 0);  // per root: the kernel and product steps writing it
  for (const Step& s : p.steps)
    for (int b : written_buffers(p, s)) ++writers[p.buffers[b].root];
  // An input written in place may share its storage with another input (a view passed beside its base).
  for (size_t b = 0; b < p.buffers.size(); ++b)
    if (p.buffers[b].kind == Buffer::Kind::Input && writers[b] > 0) return;

  // An output the kernel alone writes, a buffer of its own.
  auto own_output = [&](int arg) {
    const Buffer& b = p.buffers[arg];
    return b.kind == Buffer::Kind::Alloc && b.root == arg && writers[arg] == 1;
  };
  auto movable = [&](const KernelStep& ks) {
    const Kernel& k = p.kernels[ks.kernel];
    if (k.kind != Kernel::Kind::Pointwise || !codegen::all_static(k.shape) || k.outputs.empty()) return false;
    for (size_t i = 0; i < ks.args.size(); ++i) {
      const bool is_input = i < k.inputs.size();
      const Buffer& b = p.buffers[ks.args[i]];
      if (!in_iteration_order(k.shape, is_input ? k.inputs[i] : k.outputs[i - k.inputs.size()])) return false;
      if (is_input && (p.buffers[b.root].kind != Buffer::Kind::Input || writers[b.root] > 0)) return false;
      if (!is_input && !own_output(ks.args[i])) return false;
    }
    return true;
  };

  // Whether a pointwise kernel's values are the same wherever it runs after its inputs exist: each input a graph
  // input or extern result that no kernel or product writes, or a buffer its one writer made; each output its own
  // buffer that only it writes, of which torch sees no object (a second kernel's object would be another tensor in
  // eager).
  auto repeatable = [&](const KernelStep& ks) {
    const Kernel& k = p.kernels[ks.kernel];
    if (k.kind != Kernel::Kind::Pointwise || k.outputs.empty()) return false;
    for (size_t i = 0; i < ks.args.size(); ++i) {
      const Buffer& b = p.buffers[ks.args[i]];
      const Buffer& root = p.buffers[b.root];
      // An Alloc's one writer made it before anything read it; an input's or an extern result's writer would
      // change it between two reads.
      if (i < k.inputs.size() && writers[b.root] > (root.kind == Buffer::Kind::Alloc ? 1 : 0)) return false;
      if (i >= k.inputs.size() && (!own_output(ks.args[i]) || (b.node >= 0 && p.node_object[b.node]))) return false;
    }
    return true;
  };

  // A kernel the same as an earlier one (the same code on the same inputs: the activation cast to bf16 once for each
  // of q, k and v, a weight cast for each of its uses) is left out; its outputs become the earlier one's.
  std::vector<bool> dropped(p.steps.size(), false);
  std::map<std::pair<std::string, std::vector<int>>, size_t> first_of;  // (code, inputs) -> step position
  for (size_t i = 0; i < p.steps.size(); ++i) {
    if (p.steps[i].kind != Step::Kind::Kernel || !repeatable(p.kernel_steps[p.steps[i].index])) continue;
    const KernelStep& ks = p.kernel_steps[p.steps[i].index];
    Kernel unnamed = p.kernels[ks.kernel];
    unnamed.name = "k";
    const size_t n_in = unnamed.inputs.size();
    auto [it, added] =
        first_of.emplace(std::make_pair(unnamed.to_string(), std::vector<int>(ks.args.begin(), ks.args.begin() + n_in)), i);
    if (added) continue;
    const KernelStep& first = p.kernel_steps[p.steps[it->second].index];
    for (size_t a = n_in; a < ks.args.size(); ++a) {
      make_view_of(p, ks.args[a], first.args[a], Size(0));
      // An extern step takes a passed buffer as its own tensor (a view has none at run time): the first's.
      for (ExternStep& e : p.extern_steps)
        for (ExternStep::PassedBuffer& passed : e.passed)
          if (passed.buffer == ks.args[a]) passed.buffer = first.args[a];
    }
    dropped[i] = true;
  }

  // Groups of movable kernel steps (positions in p.steps), in order.
  std::vector<std::vector<size_t>> groups(1);
  int64_t bytes = 0;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    if (dropped[i] || p.steps[i].kind != Step::Kind::Kernel || !movable(p.kernel_steps[p.steps[i].index])) continue;
    const int64_t b = output_bytes(p.kernels[p.kernel_steps[p.steps[i].index].kernel]);
    if (!groups.back().empty() && (groups.back().size() == kMaxComboParts || bytes + b > kMaxComboBytes)) {
      groups.emplace_back();
      bytes = 0;
    }
    groups.back().push_back(i);
    bytes += b;
  }
  std::vector<int> group_of(p.steps.size(), -1);  // the group a combined step belongs to
  for (size_t g = 0; g < groups.size(); ++g)
    if (groups[g].size() > 1)
      for (size_t i : groups[g]) group_of[i] = static_cast<int>(g);

  // The program again, each group's kernels as one combo at its first part's step.
  std::vector<Kernel> kernels;
  std::vector<KernelStep> kernel_steps;
  std::vector<Step> steps;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const Step& s = p.steps[i];
    if (s.kind != Step::Kind::Kernel) {
      steps.push_back(s);
      continue;
    }
    const int g = group_of[i];
    if (dropped[i] || (g >= 0 && groups[g][0] != i)) continue;  // the same as another, or in its group's combo
    KernelStep step;
    if (g < 0) {
      step = p.kernel_steps[s.index];
      kernels.push_back(std::move(p.kernels[step.kernel]));
    } else {
      Kernel combo;
      combo.kind = Kernel::Kind::Combo;
      combo.name = p.kernels[p.kernel_steps[s.index].kernel].name;
      std::vector<int> outputs;
      for (size_t at : groups[g]) {
        const KernelStep& part_step = p.kernel_steps[p.steps[at].index];
        Kernel& part = p.kernels[part_step.kernel];
        const size_t n_in = part.inputs.size();
        combo.inputs.insert(combo.inputs.end(), part.inputs.begin(), part.inputs.end());
        combo.outputs.insert(combo.outputs.end(), part.outputs.begin(), part.outputs.end());
        step.args.insert(step.args.end(), part_step.args.begin(), part_step.args.begin() + n_in);
        outputs.insert(outputs.end(), part_step.args.begin() + n_in, part_step.args.end());
        combo.parts.push_back(std::move(part));
      }
      step.args.insert(step.args.end(), outputs.begin(), outputs.end());
      kernels.push_back(std::move(combo));
    }
    step.kernel = static_cast<int>(kernels.size()) - 1;
    kernel_steps.push_back(std::move(step));
    steps.push_back({Step::Kind::Kernel, static_cast<int>(kernel_steps.size()) - 1});
  }
  p.kernels = std::move(kernels);
  p.kernel_steps = std::move(kernel_steps);
  p.steps = std::move(steps);
}

}  // namespace fastcomp::plan
