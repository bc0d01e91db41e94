#include "plan/cluster.h"

#include <stdexcept>

namespace fastcomp::plan {
namespace {

bool same_range(const codegen::DimRange& a, const codegen::DimRange& b) {
  return a.dim == b.dim && (a.dim < 0 || (a.begin == b.begin && a.end == b.end));
}

std::string range_key(const codegen::DimRange& r) {
  return r.dim < 0 ? std::string() : std::to_string(r.dim) + ":" + r.begin.to_string() + ":" + r.end.to_string();
}

std::string gather_key(const codegen::Expr& e) {
  return e.op != ExprOp::Gather ? std::string() : e.gather.size.to_string() + "*" + e.gather.stride.to_string();
}

}  // namespace

int Cluster::operand(int buffer, DType dtype, const codegen::Sizes& strides, const codegen::Size& offset,
                     const codegen::DimRange& valid, bool gathered) {
  if (sealed_) throw std::logic_error("Cluster::load: the cluster is sealed");
  for (size_t i = 0; i < loads_.size(); ++i)
    if (loads_[i].buffer == buffer && loads_[i].operand.strides == strides &&
        loads_[i].operand.storage_offset == offset && same_range(loads_[i].operand.valid, valid) &&
        loads_[i].gathered == gathered)
      return static_cast<int>(i);
  loads_.push_back({buffer, codegen::Operand{dtype, strides, offset, valid}, gathered});
  return static_cast<int>(loads_.size()) - 1;
}

int Cluster::load(int buffer, DType dtype, const codegen::Sizes& strides, const codegen::Size& offset,
                  const codegen::DimRange& valid) {
  codegen::Expr e;
  e.op = ExprOp::Load;
  e.dtype = dtype;
  e.operand = operand(buffer, dtype, strides, offset, valid);
  return intern(std::move(e));
}

int Cluster::gather(int buffer, DType dtype, const codegen::Sizes& strides, const codegen::Size& offset, int index,
                    const codegen::GatherAxis& axis) {
  codegen::Expr e;
  e.op = ExprOp::Gather;
  e.dtype = dtype;
  e.args = {index};
  e.operand = operand(buffer, dtype, strides, offset, {}, true);
  e.gather = axis;
  return intern(std::move(e));
}

int Cluster::constant(DType dtype, double value) {
  codegen::Expr e;
  e.op = ExprOp::Constant;
  e.dtype = dtype;
  e.constant = value;
  return intern(std::move(e));
}

int Cluster::in_range(const codegen::DimRange& range) {
  codegen::Expr e;
  e.op = ExprOp::InRange;
  e.dtype = DType::Bool;
  e.range = range;
  return intern(std::move(e));
}

bool Cluster::row_reduce_excluded() const {
  for (const Load& l : loads_)
    if (l.operand.valid.dim >= 0) return true;
  std::vector<int> readers(loads_.size(), 0);
  for (const codegen::Expr& e : exprs_)
    if (e.op == ExprOp::Load || e.op == ExprOp::Gather) ++readers[e.operand];
  for (const codegen::Expr& e : exprs_) {
    if (e.op == ExprOp::InRange) return true;
    if (e.op != ExprOp::Gather) continue;
    const codegen::Expr& index = exprs_[e.args[0]];
    const codegen::Sizes& index_strides = loads_[index.operand].operand.strides;
    if (index.op != ExprOp::Load || index_strides.empty() || index_strides.back() != 0 || readers[e.operand] > 1)
      return true;
  }
  return false;
}

bool Cluster::pointwise_only() const {
  for (const Load& l : loads_)
    if (l.operand.valid.dim >= 0) return true;
  for (const codegen::Expr& e : exprs_)
    if (e.op == ExprOp::InRange || e.op == ExprOp::Gather) return true;
  return false;
}

int Cluster::op(ExprOp op, DType dtype, std::vector<int> args) {
  codegen::Expr e;
  e.op = op;
  e.dtype = dtype;
  e.args = std::move(args);
  return intern(std::move(e));
}

int Cluster::intern(codegen::Expr e) {
  auto key = std::make_tuple(static_cast<int>(e.op), static_cast<int>(e.dtype), e.args, e.operand, e.constant,
                             range_key(e.range) + gather_key(e));
  if (auto it = cse_.find(key); it != cse_.end()) return it->second;
  exprs_.push_back(std::move(e));
  return cse_[key] = static_cast<int>(exprs_.size() - 1);
}

int Cluster::cast(int expr, DType dtype) { return exprs_[expr].dtype == dtype ? expr : op(ExprOp::Cast, dtype, {expr}); }

bool Cluster::store(int expr, int buffer, DType dtype, const codegen::Sizes& strides,
                    const codegen::Size& offset) {
  for (const Store& s : stores_)
    if (s.expr == expr && s.buffer == buffer) return false;
  stores_.push_back({expr, buffer, codegen::Operand{dtype, strides, offset}});
  return true;
}

void Cluster::split_last(int64_t pieces) {
  if (sealed_ || !stores_.empty() || pointwise_only() || space_.empty() || !space_.back().is_static() ||
      pieces < 1 || space_.back().hint() % pieces != 0)
    throw std::logic_error("Cluster::split_last: only a fresh cluster's static last dimension splits evenly");
  const int64_t piece = space_.back().hint() / pieces;
  space_.back() = pieces;
  space_.push_back(piece);
  for (Load& l : loads_) {
    const codegen::Size stride = l.operand.strides.back();
    l.operand.strides.back() = stride * codegen::Size(piece);
    l.operand.strides.push_back(stride);
  }
}

std::vector<int> Cluster::absorb(const Cluster& other) {
  if (sealed_ || other.sealed_) throw std::logic_error("Cluster::absorb: a sealed cluster cannot merge");
  row_reduce_ |= other.row_reduce_;
  if (other.column_reduce()) reduced_dims_ = other.reduced_dims_;  // the lowering merges like reductions only
  if (other.split_) split_ = other.split_;                            // ... and like splits
  std::vector<int> remap(other.exprs_.size(), -1);
  for (size_t i = 0; i < other.exprs_.size(); ++i) {
    const codegen::Expr& e = other.exprs_[i];
    switch (e.op) {
      case ExprOp::Load: {
        const Load& l = other.loads_[e.operand];
        remap[i] = load(l.buffer, e.dtype, l.operand.strides, l.operand.storage_offset, l.operand.valid);
        break;
      }
      case ExprOp::Constant: remap[i] = constant(e.dtype, e.constant); break;
      case ExprOp::InRange: remap[i] = in_range(e.range); break;
      case ExprOp::Gather: {
        const Load& l = other.loads_[e.operand];
        remap[i] = gather(l.buffer, e.dtype, l.operand.strides, l.operand.storage_offset, remap[e.args[0]], e.gather);
        break;
      }
      default: {
        std::vector<int> args;
        for (int a : e.args) args.push_back(remap[a]);
        remap[i] = op(e.op, e.dtype, std::move(args));
      }
    }
  }
  for (const Store& s : other.stores_) store(remap[s.expr], s.buffer, s.operand.dtype, s.operand.strides,
                                             s.operand.storage_offset);
  return remap;
}

codegen::Kernel Cluster::kernel(const std::string& name, std::vector<int>* args) const {
  codegen::Kernel k;
  k.kind = row_reduce_        ? codegen::Kernel::Kind::RowReduce
           : column_reduce() ? codegen::Kernel::Kind::ColumnReduce
                             : codegen::Kernel::Kind::Pointwise;
  k.reduced_dims = reduced_dims_;
  k.name = name;
  k.shape = space_;
  k.exprs = exprs_;
  args->clear();
  for (const Load& l : loads_) {
    k.inputs.push_back(l.operand);
    args->push_back(l.buffer);
  }
  for (const Store& s : stores_) {
    k.stores.push_back({s.expr, static_cast<int>(k.outputs.size())});
    k.outputs.push_back(s.operand);
    args->push_back(s.buffer);
  }
  if (hand_written_) {
    // One input per role, in the kernel's order, even where a load serves several.
    k.inputs.clear();
    std::vector<int> outputs(args->end() - static_cast<std::ptrdiff_t>(stores_.size()), args->end());
    args->clear();
    for (int e : role_loads_) {
      const Load& l = loads_[exprs_[e].operand];
      k.inputs.push_back(l.operand);
      args->push_back(l.buffer);
    }
    args->insert(args->end(), outputs.begin(), outputs.end());
    k.exprs.clear();
    k.stores.clear();
    k.kind = *hand_written_;
  }
  if (k.kind == codegen::Kernel::Kind::Attention) {
    k.attention_scale = attention_scale_;
    k.attention_causal = attention_causal_;
    k.attention_keys = attention_keys_;
    k.attention_kv_heads = attention_kv_heads_;
    k.attention_rounding = attention_rounding_;
  }
  return k;
}

}  // namespace fastcomp::plan
