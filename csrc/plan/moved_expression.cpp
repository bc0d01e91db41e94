// A lazy pointwise expression copied into another kernel with its loads re-addressed: a cat's piece read over the
// cat's space (lower_cat.cpp), a pooling window's taps read at shifted coordinates (lower_pooling.cpp). The copy
// recomputes the expression where its consumer needs it, so the value is never written to memory for it.
#include "plan/lowering.h"

namespace fastcomp::plan::detail {
namespace {

// The expressions `root` of `c` depends on, itself included.
std::vector<bool> needed(const Cluster& c, int root) {
  std::vector<bool> need(root + 1, false);
  need[root] = true;
  for (int i = root; i >= 0; --i)
    if (need[i])
      for (int a : c.expr(i).args) need[a] = true;
  return need;
}

}  // namespace

bool movable_expression(const Cluster& c, int root) {
  const std::vector<bool> need = needed(c, root);
  for (int i = 0; i <= root; ++i) {
    if (!need[i]) continue;
    const codegen::Expr& e = c.expr(i);
    if (e.op == ExprOp::Load && c.load_operand(i).valid.dim >= 0) return false;
    if (e.op == ExprOp::RowIndex || e.op == ExprOp::InRange || e.op == ExprOp::Gather || e.op == ExprOp::ReduceSum ||
        e.op == ExprOp::ReduceMax || e.op == ExprOp::ReduceMin)
      return false;
  }
  return true;
}

std::vector<int> loaded_buffers(const Cluster& c, int root) {
  const std::vector<bool> need = needed(c, root);
  std::vector<int> out;
  for (int i = 0; i <= root; ++i)
    if (need[i] && c.expr(i).op == ExprOp::Load) out.push_back(c.load_buffer(i));
  return out;
}

int copy_moved(const Cluster& from, int root, Cluster& to, const MoveLoad& move) {
  const std::vector<bool> need = needed(from, root);
  std::vector<int> copied(root + 1, -1);
  for (int i = 0; i <= root; ++i) {
    if (!need[i]) continue;
    const codegen::Expr e = from.expr(i);  // copies: `to` may grow `from`'s storage
    if (e.op == ExprOp::Load) {
      const codegen::Operand o = from.load_operand(i);
      const MovedLoad a = move(o.strides, o.storage_offset);
      copied[i] = to.load(from.load_buffer(i), e.dtype, a.strides, a.offset, a.valid);
    } else if (e.op == ExprOp::Constant) {
      copied[i] = to.constant(e.dtype, e.constant);
    } else {
      std::vector<int> args;
      for (int a : e.args) args.push_back(copied[a]);
      copied[i] = to.op(e.op, e.dtype, std::move(args));
    }
  }
  return copied[root];
}

}  // namespace fastcomp::plan::detail
