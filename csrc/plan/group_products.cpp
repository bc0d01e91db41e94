#include "plan/group_products.h"

#include <vector>

namespace fastcomp::plan {
namespace {

// One product with at most a bias added (F.linear's), not yet in a group.
bool plain_product(const MatmulStep& s) {
  return s.batch == Size(1) && s.b_next.empty() &&
         (s.epilogue == MatmulStep::Epilogue::None || s.epilogue == MatmulStep::Epilogue::Bias);
}

bool input(const Program& p, int buffer) { return p.buffers[p.buffers[buffer].root].kind == Buffer::Kind::Input; }

// Whether `buffer` holds its final value before step `position`: a graph input, or written only by kernels and
// products before it (a weight cast to the region's dtype under autocast, hoisted by combine_kernels.h).
bool ready_before(const Program& p, int buffer, size_t position) {
  if (input(p, buffer)) return true;
  const int root = p.buffers[buffer].root;
  if (p.buffers[root].kind != Buffer::Kind::Alloc) return false;
  bool written = false;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    for (int b : written_buffers(p, p.steps[i])) {
      if (p.buffers[b].root != root) continue;
      if (i >= position) return false;
      written = true;
    }
  }
  return written;
}

// Whether `other` may run as another batch of `first` (at step `position`): the same product of the same A by
// another B.
bool groupable(const Program& p, const MatmulStep& first, const MatmulStep& other, size_t position) {
  if (!plain_product(first) || !plain_product(other) || first.dtype != other.dtype ||
      first.epilogue != other.epilogue)
    return false;
  if (!(first.m == other.m && first.n == other.n && first.k == other.k)) return false;
  const Buffer &a1 = p.buffers[first.a], &a2 = p.buffers[other.a];
  if (a1.root != a2.root || !(a1.offset == a2.offset) || !(first.a_row_stride == other.a_row_stride) ||
      !(first.a_col_stride == other.a_col_stride))
    return false;
  if (!(first.b_row_stride == other.b_row_stride && first.b_col_stride == other.b_col_stride)) return false;
  if (!ready_before(p, first.b, position) || !ready_before(p, other.b, position)) return false;
  // Biases (F.linear's, contiguous: lower_matmul.cpp) must be ready before the first product runs too.
  if (first.bias >= 0 && (!ready_before(p, first.bias, position) || !ready_before(p, other.bias, position)))
    return false;
  for (const MatmulStep* s : {&first, &other}) {
    const Buffer& out = p.buffers[s->d];
    if (out.kind != Buffer::Kind::Alloc || !(s->d_row_stride == s->n)) return false;
    if (out.node >= 0 && p.node_object[out.node]) return false;
  }
  return first.m.hint() * first.n.hint() <= kGroupMaxOutputElements;
}

// Runs the products at positions `group` (ascending; the first stays) as batches of the first one.
void fuse(Program& p, const std::vector<size_t>& group) {
  MatmulStep& first = p.matmul_steps[p.steps[group[0]].index];
  const Size slot = first.m * first.n;
  const int n = static_cast<int>(group.size());
  Buffer all;
  all.kind = Buffer::Kind::Alloc;
  all.dtype = first.dtype;
  all.sizes = {Size(n), first.m, first.n};
  all.strides = {slot, first.n, Size(1)};
  const int root = static_cast<int>(p.buffers.size());
  all.root = root;
  p.buffers.push_back(all);
  make_view_of(p, first.d, root, Size(0));
  for (int i = 1; i < n; ++i) {
    const MatmulStep& other = p.matmul_steps[p.steps[group[i]].index];
    make_view_of(p, other.d, root, slot * Size(i));
    first.b_next.push_back(other.b);
    if (other.bias >= 0) first.bias_next.push_back(other.bias);
  }
  first.batch = n;
  first.a_batch_stride = 0;
  first.b_batch_stride = 0;
  first.d_batch_stride = slot;
  for (int i = n - 1; i >= 1; --i) {  // last first, so that earlier positions and indices stay valid
    const int index = p.steps[group[i]].index;
    p.steps.erase(p.steps.begin() + group[i]);
    p.matmul_steps.erase(p.matmul_steps.begin() + index);
    for (Step& s : p.steps)
      if (s.kind == Step::Kind::Matmul && s.index > index) --s.index;
  }
}

}  // namespace

void group_shared_operand_products(Program& program) {
  for (size_t i = 0; i < program.steps.size(); ++i) {
    if (program.steps[i].kind != Step::Kind::Matmul) continue;
    std::vector<size_t> group = {i};
    for (size_t j = i + 1; j < program.steps.size() && group.size() < size_t(kMaxGroupedProducts); ++j) {
      // An extern step may write anything (an in-place op on a later weight); kernels and products write only
      // buffers of their own, so later products may move up past them.
      if (program.steps[j].kind == Step::Kind::Extern) break;
      if (program.steps[j].kind != Step::Kind::Matmul) continue;
      if (groupable(program, program.matmul_steps[program.steps[i].index],
                    program.matmul_steps[program.steps[j].index], i))
        group.push_back(j);
    }
    if (group.size() > 1) fuse(program, group);
  }
}

}  // namespace fastcomp::plan
