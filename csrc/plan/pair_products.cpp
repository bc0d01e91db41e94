#include "plan/pair_products.h"

#include <vector>

namespace fastcomp::plan {
namespace {

bool plain_product(const MatmulStep& s) {
  return s.batch == Size(1) && s.bias < 0 && s.epilogue == MatmulStep::Epilogue::None && s.b_second < 0;
}

// Whether `second` may run as the second batch of `first`: the same product of the same A by another B.
bool pairable(const Program& p, const MatmulStep& first, const MatmulStep& second) {
  if (!plain_product(first) || !plain_product(second) || first.dtype != second.dtype) return false;
  if (!(first.m == second.m && first.n == second.n && first.k == second.k)) return false;
  const Buffer &a1 = p.buffers[first.a], &a2 = p.buffers[second.a];
  if (a1.root != a2.root || !(a1.offset == a2.offset) || !(first.a_row_stride == second.a_row_stride) ||
      !(first.a_col_stride == second.a_col_stride))
    return false;
  if (!(first.b_row_stride == second.b_row_stride && first.b_col_stride == second.b_col_stride)) return false;
  if (p.buffers[p.buffers[first.b].root].kind != Buffer::Kind::Input ||
      p.buffers[p.buffers[second.b].root].kind != Buffer::Kind::Input)
    return false;
  for (int d : {first.d, second.d}) {
    const Buffer& out = p.buffers[d];
    if (out.kind != Buffer::Kind::Alloc || !(first.d_row_stride == first.n) || !(second.d_row_stride == second.n))
      return false;
    if (out.node >= 0 && p.node_object[out.node]) return false;
  }
  return first.m.hint() * first.n.hint() <= kPairMaxOutputElements;
}

// Makes buffer `d` (an Alloc) and the views of it views of `root` at `offset` elements further. Kernels get their
// operands' root pointers and add the offsets lowering gave them, so those offsets move too.
void move_into(Program& p, int d, int root, const Size& offset) {
  std::vector<bool> moved(p.buffers.size(), false);
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    Buffer& b = p.buffers[i];
    if (b.root != d) continue;
    moved[i] = true;
    b.root = root;
    b.offset = b.offset + offset;
  }
  p.buffers[d].kind = Buffer::Kind::View;
  for (const KernelStep& step : p.kernel_steps) {
    codegen::Kernel& k = p.kernels[step.kernel];
    for (size_t i = 0; i < step.args.size(); ++i) {
      if (!moved[step.args[i]]) continue;
      codegen::Operand& op = i < k.inputs.size() ? k.inputs[i] : k.outputs[i - k.inputs.size()];
      op.storage_offset = op.storage_offset + offset;
    }
  }
}

void fuse(Program& p, size_t first_step, size_t second_step) {
  MatmulStep& first = p.matmul_steps[p.steps[first_step].index];
  const int second_index = p.steps[second_step].index;
  const MatmulStep second = p.matmul_steps[second_index];
  const Size slot = first.m * first.n;
  Buffer both;
  both.kind = Buffer::Kind::Alloc;
  both.dtype = first.dtype;
  both.sizes = {Size(2), first.m, first.n};
  both.strides = {slot, first.n, Size(1)};
  const int root = static_cast<int>(p.buffers.size());
  both.root = root;
  p.buffers.push_back(both);
  move_into(p, first.d, root, Size(0));
  move_into(p, second.d, root, slot);
  first.batch = 2;
  first.a_batch_stride = 0;
  first.b_batch_stride = 0;
  first.b_second = second.b;
  first.d_batch_stride = slot;
  p.steps.erase(p.steps.begin() + second_step);
  p.matmul_steps.erase(p.matmul_steps.begin() + second_index);
  for (Step& s : p.steps)
    if (s.kind == Step::Kind::Matmul && s.index > second_index) --s.index;
}

}  // namespace

void pair_shared_operand_products(Program& program) {
  for (size_t i = 0; i < program.steps.size(); ++i) {
    if (program.steps[i].kind != Step::Kind::Matmul) continue;
    for (size_t j = i + 1; j < program.steps.size(); ++j) {
      // An extern step may write anything (an in-place op on the second weight); kernels and products write
      // only buffers of their own, so the second product may move up past them.
      if (program.steps[j].kind == Step::Kind::Extern) break;
      if (program.steps[j].kind != Step::Kind::Matmul) continue;
      const MatmulStep& first = program.matmul_steps[program.steps[i].index];
      const MatmulStep& second = program.matmul_steps[program.steps[j].index];
      if (pairable(program, first, second)) {
        fuse(program, i, j);
        break;
      }
    }
  }
}

}  // namespace fastcomp::plan
