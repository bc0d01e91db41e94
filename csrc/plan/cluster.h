// A cluster is one fused kernel while lowering builds it: an iteration space, the buffers it loads, and an
// expression DAG with common subexpressions shared. Values of a cluster are either per element of the space
// ("full") or per row (RowReduce clusters: the same for every element of a row, e.g. a row's sum; ColumnReduce
// clusters: the same along every reduced dimension, e.g. x.sum(0)'s value of a column).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "codegen/kernel_ir.h"
#include "plan/split_reduce.h"

namespace fastcomp::plan {

using codegen::DType;
using codegen::ExprOp;

class Cluster {
 public:
  explicit Cluster(codegen::Sizes space) : space_(std::move(space)) {}

  const codegen::Sizes& space() const { return space_; }
  bool row_reduce() const { return row_reduce_; }
  void make_row_reduce() { row_reduce_ = true; }
  // A column-reduce kernel (kernel_ir.h) reducing the dimensions of the space flagged in `reduced`.
  void make_column_reduce(std::vector<bool> reduced) { reduced_dims_ = std::move(reduced); }
  bool column_reduce() const { return !reduced_dims_.empty(); }
  const std::vector<bool>& reduced_dims() const { return reduced_dims_; }
  bool reduces() const { return row_reduce_ || column_reduce(); }
  // A reduction whose kernel is split in two (split_reduce.h): its per-row (per-column) values may only be
  // combined with each other, never used per element.
  void set_split(std::optional<ReductionSplit> split) { split_ = split; }
  const std::optional<ReductionSplit>& split() const { return split_; }
  // An attention kernel (kernel_ir.h) over a [B, H, T, D] space: q, k and v (and a mask, or -1) are Load
  // expressions of the cluster (one load may serve several, e.g. attention(x, x, x)); k and v span `keys` keys
  // (0: T) of `kv_heads` heads (0: H), the mask [B, H, T, keys]. Its one store names o's buffer and layout (the
  // stored expression is not used: the kernel computes o).
  void make_attention(int q, int k, int v, double scale, bool causal, codegen::Kernel::AttentionRounding rounding,
                      int64_t keys = 0, int64_t kv_heads = 0, int mask = -1) {
    hand_written_ = codegen::Kernel::Kind::Attention, role_loads_ = {q, k, v};
    if (mask >= 0) role_loads_.push_back(mask);
    attention_scale_ = scale, attention_causal_ = causal, attention_rounding_ = rounding;
    attention_keys_ = keys, attention_kv_heads_ = kv_heads;
  }
  // A small-matmul kernel (kernel_ir.h) over an [M, N, K] space: a and w are Load expressions of the cluster, bias
  // one too or -1, and its one store names D's buffer and layout (the stored expression is not used).
  void make_small_matmul(int a, int w, int bias) {
    hand_written_ = codegen::Kernel::Kind::SmallMatmul, role_loads_ = {a, w};
    if (bias >= 0) role_loads_.push_back(bias);
  }
  // A sealed cluster has its place among the steps: it may gain outputs but no new loads (a buffer written
  // later would be read too early).
  bool sealed() const { return sealed_; }
  void seal() { sealed_ = true; }

  // The expression loading `buffer` with `strides` over the space (0 broadcasts), deduplicated; with a `valid`
  // range it is read only there (kernel_ir.h's Operand), and 0 elsewhere.
  int load(int buffer, DType dtype, const codegen::Sizes& strides, const codegen::Size& offset,
           const codegen::DimRange& valid = {});
  // The element of `buffer` gathered along one of its dimensions (kernel_ir.h's Gather): addressed by `strides`
  // over the space (0 along the gathered dimension) plus `index`'s value (an i32/i64 expression) times
  // `axis.stride`, the index checked against `axis.size`.
  int gather(int buffer, DType dtype, const codegen::Sizes& strides, const codegen::Size& offset, int index,
             const codegen::GatherAxis& axis);
  int constant(DType dtype, double value);
  int in_range(const codegen::DimRange& range);  // bool: the element lies in `range`
  int op(ExprOp op, DType dtype, std::vector<int> args);
  int cast(int expr, DType dtype);  // `expr` itself when it already has that dtype
  DType dtype_of(int expr) const { return exprs_[expr].dtype; }
  const codegen::Expr& expr(int id) const { return exprs_[id]; }
  // What Load expression `id` reads: its buffer and how it is addressed.
  int load_buffer(int id) const { return loads_[exprs_[id].operand].buffer; }
  const codegen::Operand& load_operand(int id) const { return loads_[exprs_[id].operand].operand; }
  // Some load has a validity range or some expression is an InRange or a Gather: reduction kernels take none.
  bool pointwise_only() const;
  // pointwise_only, but for gathers a row-reduce kernel takes (kernel_ir.h's Gather): ones whose index is one plain
  // load per row of the space (an embedding's row of the table) and whose input no other expression reads.
  bool row_reduce_excluded() const;

  // Writes `expr` to `buffer` with `strides` over the space; returns whether it was new (a value stored once).
  bool store(int expr, int buffer, DType dtype, const codegen::Sizes& strides, const codegen::Size& offset);
  bool has_stores() const { return !stores_.empty(); }

  // Cuts the space's last dimension into [pieces, length / pieces] (row-major), every load reading the same
  // elements as before. Only while the cluster has no stores and no ranges or gathers.
  void split_last(int64_t pieces);

  // Appends `other`'s loads, expressions and stores; returns the index each of its expressions now has.
  std::vector<int> absorb(const Cluster& other);

  // The kernel, named `name`, and its arguments (buffer ids: inputs then outputs).
  codegen::Kernel kernel(const std::string& name, std::vector<int>* args) const;

 private:
  // The index of the input reading `buffer` so, adding it if there is none. Gathers and loads never share an
  // input: a row-reduce kernel moves a gathered input's row by the gather's index.
  int operand(int buffer, DType dtype, const codegen::Sizes& strides, const codegen::Size& offset,
              const codegen::DimRange& valid, bool gathered = false);
  // The index of an expression equal to `e`, adding it if there is none (common subexpressions are shared).
  int intern(codegen::Expr e);

  struct Load {
    int buffer;
    codegen::Operand operand;
    bool gathered = false;  // read by gathers
  };
  struct Store {
    int expr, buffer;
    codegen::Operand operand;
  };
  codegen::Sizes space_;
  bool row_reduce_ = false;
  std::vector<bool> reduced_dims_;  // a column reduce's; empty otherwise
  std::optional<ReductionSplit> split_;
  // Attention or SmallMatmul: a kernel whose code is written by hand (no expressions), its inputs role_loads_.
  std::optional<codegen::Kernel::Kind> hand_written_;
  std::vector<int> role_loads_;  // the loads in the kernel's input order: q, k, v (attention); a, w, bias (small matmul)
  double attention_scale_ = 1;
  bool attention_causal_ = false;
  int64_t attention_keys_ = 0, attention_kv_heads_ = 0;
  codegen::Kernel::AttentionRounding attention_rounding_ = codegen::Kernel::AttentionRounding::EveryStep;
  bool sealed_ = false;
  std::vector<Load> loads_;
  std::vector<codegen::Expr> exprs_;
  std::vector<Store> stores_;
  // (op, dtype, args, operand, constant, range's or gathered axis's text)
  std::map<std::tuple<int, int, std::vector<int>, int, double, std::string>, int> cse_;
};

}  // namespace fastcomp::plan
