// Combo kernels: independent pointwise kernels as one launch. Each part is emitted as the pointwise emitter writes
// a kernel of its own, but as a __device__ function that takes its block's index and its grid's size; the combo's
// blocks are the parts' grids one after the other, and each block runs the part its index falls in. Under
// autocast a model casts every weight and bias on every call: dozens of launches of a few microseconds each, which
// the plan hoists together (plan/combine_kernels.h) into one.
#include <fmt/format.h>

#include <map>

#include "codegen/emit_internal.h"

namespace fastcomp::codegen::detail {

KernelSource emit_combo(const Kernel& k, const DeviceLimits& limits) {
  KernelSource src = source_for(k, 0, 0);  // the parts' block size, which emit_pointwise fixes for parts
  const size_t n_in = k.inputs.size();
  std::string parts, dispatch;
  // Parts of the same code but for their name (a weight's cast in every layer) share the first one's function, so
  // that NVRTC compiles it once, as share_identical_kernels does for kernels.
  std::map<std::string, std::string> function_of;
  size_t in_base = 0, out_base = 0;
  for (size_t i = 0; i < k.parts.size(); ++i) {
    Kernel part = k.parts[i];
    part.name = fmt::format("{}_part{}", k.name, i);
    const KernelSource ps = emit_pointwise(part, limits, /*as_combo_part=*/true);
    if ((i > 0 && ps.block != src.block) || ps.shared_bytes != 0 || !ps.size_params.empty())
      throw std::invalid_argument("kernel " + k.name + ": a combo part must be a static pointwise kernel");
    src.block = ps.block;
    auto [same, added] = function_of.emplace(renamed(ps.code, part.name, "fc_part"), part.name);
    if (added) parts += ps.code;
    src.needs_fp16 |= ps.needs_fp16;
    src.needs_bf16 |= ps.needs_bf16;
    const size_t part_in = part.inputs.size();
    for (KernelSource::VectorOperand v : ps.vector_operands) {
      const size_t o = static_cast<size_t>(v.operand);
      v.operand = static_cast<int>(o < part_in ? in_base + o : n_in + out_base + (o - part_in));
      src.vector_operands.push_back(v);
    }
    std::string args;
    for (size_t j = 0; j < part_in; ++j) args += fmt::format("in{}, ", in_base + j);
    for (size_t j = 0; j < part.outputs.size(); ++j) args += fmt::format("out{}, ", out_base + j);
    const bool last = i + 1 == k.parts.size();
    dispatch += fmt::format("  {}{}({}b - {}u, {}u);{}\n", last ? "" : fmt::format("if (b < {}u) {{ ", src.grid + ps.grid),
                            same->second, args, src.grid, ps.grid, last ? "" : " return; }");
    src.grid += ps.grid;
    in_base += part_in;
    out_base += part.outputs.size();
  }
  src.code = fmt::format("// {}: combo of {} pointwise kernels, {} blocks\n", k.name, k.parts.size(), src.grid) +
             parts +
             fmt::format("extern \"C\" __global__ void __launch_bounds__({}) {}({}) {{\n  const unsigned b = blockIdx.x;\n",
                         src.block, k.name, kernel_params(k)) +
             dispatch + "}\n";
  return src;
}

}  // namespace fastcomp::codegen::detail
