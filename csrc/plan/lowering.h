// The lowering state shared by lower.cpp (the driver: values, materialisation, extern steps) and the op
// families (lower_pointwise.cpp, lower_reduce.cpp, lower_column_reduce.cpp, lower_matmul.cpp, lower_views.cpp,
// lower_cat.cpp, lower_gather.cpp, lower_pooling.cpp).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "plan/cluster.h"
#include "plan/lower.h"

namespace fastcomp::plan::detail {

// What a graph node's value is while lowering.
struct Value {
  bool tensor = false;
  // The value as an expression of an unsealed-or-sealed cluster (-1: none).
  int cluster = -1, expr = -1;
  bool row = false;    // a per-row (per-column) value of a row-reduce (column-reduce) cluster, else per element
  int buffer = -1;     // a buffer holding it (-1: not materialised yet)
  int view_base = -1;  // a split/chunk/unbind result: the buffer its items view
  // A tuple lowering built item by item (multi_head_attention_forward): each item's buffer, -1 for an item that
  // never exists at run time (lowering made sure nothing reads it).
  std::vector<int> items;
  // `expr` is over its cluster's space, which is another shape of the same elements in row-major order (a view
  // that reshapes a lazy value, or an op on such a view alone): defer_reshape. Only pointwise ops with no other
  // tensor operand extend it; everything else reads its buffer.
  bool reshaped = false;
  // A reshaped view: the node it views, whose buffer its own buffer views (torch's aliasing kept); -1 otherwise.
  graph::NodeId reshape_of = -1;
};

// One argument of a pointwise op as lowering sees it.
struct Operand {
  enum class Kind : uint8_t { Scalar, Node } kind = Kind::Scalar;
  double scalar = 0;
  DType scalar_dtype = DType::F32;  // F64 for Python float, I64 for int, Bool for bool
  graph::NodeId node = -1;
  // A 1-d tensor lined up with this dimension of the result rather than its last (batch_norm's per-channel
  // statistics against [N, C, ...]); -1: torch's broadcasting.
  int broadcast_dim = -1;
};

// A tensor's sizes and strides as the plan holds them: expressions over the graph's symbols where the graph is
// dynamic, else constants. meta_strides throws NotLowerable when a dynamic tensor's strides have no expressions.
Sizes meta_sizes(const graph::TensorMeta& m);
Sizes meta_strides(const graph::TensorMeta& m);

// Non-overlapping and without gaps in some dimension order (checked symbolically, ordered by the hints): a layout
// a kernel writes in full, e.g. a permuted contiguous tensor.
bool is_dense(const Sizes& sizes, const Sizes& strides);

// A run of dimensions [begin, end) of `sizes` over which `strides` step uniformly: their element count and the
// stride of one step. Size-1 dimensions never break a run. nullopt when the run does not collapse.
std::optional<std::pair<Size, Size>> collapse(const Sizes& sizes, const Sizes& strides, size_t begin, size_t end);

// The lowered name of a call target: "torch.nn.functional.gelu" -> "gelu", "Tensor.__add__" -> "add".
std::string op_name(const std::string& target_name);

// Named/positional access to a node's arguments.
class CallArgs {
 public:
  explicit CallArgs(const graph::Node& node) : node_(node) {}
  // The argument at `position` or keyword `name`, or null when absent.
  const graph::Arg* get(size_t position, const char* name) const;
  size_t positional() const { return node_.args.size(); }
  // The argument slot (ExternStep::passed) of `a`, an argument get() returned: its position, or for a keyword
  // argument the positional count plus its index among the keywords.
  size_t slot_of(const graph::Arg* a) const;
  // Keyword names other than `allowed` present on the call.
  bool only_keywords(std::initializer_list<const char*> allowed) const;

 private:
  const graph::Node& node_;
};

// A constant argument as a C++ value; nullopt when it is not a constant of that kind.
std::optional<double> const_number(const graph::Arg* a);
std::optional<int64_t> const_int(const graph::Arg* a);
std::optional<bool> const_bool(const graph::Arg* a);
bool is_none(const graph::Arg* a);
std::optional<std::vector<int64_t>> const_int_list(const graph::Arg* a);  // an int or a list/tuple of ints

// Whether two traced tensors are on one device (false where either device is unknown).
bool same_device(const graph::TensorMeta& a, const graph::TensorMeta& b);

// The codegen element type of a torch.dtype, or nullopt (complex, float8, ...).
std::optional<DType> dtype_of(PyObject* torch_dtype);
bool is_floating(DType t);
// Where torch computes an op whose result is `t`: f16/bf16 in f32 ("opmath"), others in themselves.
DType opmath(DType t);

class Lowerer {
 public:
  // `planned_strides`: per node, strides to plan its value with instead of the traced ones (channels_last.h);
  // empty: the traced layouts throughout.
  Lowerer(const graph::Graph& graph, const LowerOptions& options,
          std::vector<std::vector<int64_t>> planned_strides = {});
  Program run();

  // ---- used by the op families ------------------------------------------------------------------------
  const graph::Graph& graph() const { return graph_; }
  const LowerOptions& options() const { return options_; }
  const graph::Node& node(graph::NodeId id) const { return graph_.nodes[id]; }
  Value& value(graph::NodeId id) { return values_[id]; }
  DType node_dtype(graph::NodeId id) const;
  // The strides node `id`'s own value is planned with: its traced ones unless channels_last.h chose others.
  Sizes node_strides(graph::NodeId id) const;

  // Pointwise: the result of node `n` is fn(cluster, operand expressions), an expression over n's shape. Each
  // operand expression has its own dtype (a scalar: its Python type's; a tensor: its element type).
  using PointwiseFn = std::function<int(Cluster&, const std::vector<int>&)>;
  void pointwise(const graph::Node& n, const std::vector<Operand>& operands, const PointwiseFn& fn);

  // Row reduction over the last dimension of `x`: fn(cluster, x's expression, the `extra` operands'
  // expressions) returns the result expression and whether it is per row (sum, mean) or per element (softmax,
  // layer_norm). False when it does not fit (the caller makes the node an extern call).
  // With `row_dims` > 1 the row is x's last `row_dims` dimensions read as one (x.mean((2, 3))): x is then
  // materialised (no prologue fusion) and the result must be per row; with `extra` operands it does not fit.
  // With `splittable` (fn's reductions depend on none other: sum, mean, amax, amin), a few long rows are split
  // across blocks in two kernels (split_reduce.h); otherwise such a reduction does not fit.
  using RowFn = std::function<std::pair<int, bool>(Cluster&, int, const std::vector<int>&)>;
  bool row_reduce(const graph::Node& n, graph::NodeId x, const std::vector<Operand>& extra, const RowFn& fn,
                  int row_dims = 1, bool splittable = false);

  // Reduction of `x` over the dimensions flagged in `reduced` (x's last dimension is kept) in a column-reduce
  // kernel: fn(cluster, x's expression, {}) returns the result expression, which must be per column. x's
  // pointwise prologue joins the kernel when x is lazy over its own shape; the result is a per-column value
  // (Value::row) that ops over its own shape (the epilogue) extend. False when it does not fit or torch's kernel
  // is the better choice (the caller makes the node an extern call).
  // `splittable` as for row_reduce: few long columns are then split across blocks.
  bool column_reduce(const graph::Node& n, graph::NodeId x, const std::vector<bool>& reduced, const RowFn& fn,
                     bool splittable = false);
  // A reduction computed in parts of equal length, in two kernels (lower_two_stage_reduce.cpp): build(cluster,
  // x's expression, the part length) gives each part's values (each stored in `acc` to a buffer of its own);
  // combine(cluster, those values of all parts of a row or column, the part length) gives the result (a sum of
  // sums; mean divides by the whole count; var/std apply Chan et al.'s update). `splittable`: build's and
  // combine's reductions depend on no other (sum, mean, amax, amin), so the generic split (split_reduce.h) takes
  // their few long rows or columns, and long rows may be split in the first kernel.
  struct PartialsFn {
    std::function<std::vector<int>(Cluster&, int, int64_t)> build;
    std::function<int(Cluster&, const std::vector<int>&, int64_t)> combine;
    bool splittable = false;
  };
  // Reduces x over the dimensions flagged in `reduced` (the trailing k of them when k > 0) in parts when one
  // kernel cannot: the last dimension with others that are not trailing (x.mean((0, 2, 3)) of NCHW: each row's
  // parts, then a column reduction over the others), or, for reductions that are not splittable, a few long rows
  // or columns (x.var(), x.var(0) of [8192, 3]: equal pieces of a row or of a reduced dimension, then a row or
  // column reduction over the pieces). nullopt when one kernel is the way; else whether it was lowered.
  std::optional<bool> reduce_in_parts(const graph::Node& n, graph::NodeId x, int k, const std::vector<bool>& reduced,
                                      DType acc, const PartialsFn& partials);

  // The open cluster whose expression (value(id).expr) node `id`'s per-element value is, or null.
  const Cluster* lazy_cluster(graph::NodeId id);
  // Node `n`'s value is build(cluster), an expression over `space` that may use ranges (lower_cat.cpp) or gathers
  // (lower_gather.cpp): in an open pointwise cluster over that space (one kernel then reads what both need), the
  // one `prefer` is lazy in when it is one, else in a new one.
  void value_in_space(const graph::Node& n, const Sizes& space, const std::function<int(Cluster&)>& build,
                      graph::NodeId prefer = -1);

  // The value of node `id` in a buffer of its own (materialising it if needed); for a consumer outside its
  // cluster, so the producing cluster is sealed.
  int buffer_for(graph::NodeId id);
  // Adds `b` to the plan (a non-view is its own root) and returns its id.
  int add_buffer(Buffer b);
  // A buffer of `kind` with node n's dtype, sizes and strides, as n's value (`input`: its position, for an input).
  void add_node_buffer(const graph::Node& n, Buffer::Kind kind, int input = -1);
  const Buffer& buffer(int id) const { return program_.buffers[id]; }
  // Copies buffer `source` into a new contiguous Alloc buffer (a pointwise kernel) and returns it.
  int contiguous_copy(int source);
  // ... into a new Alloc buffer of `strides`.
  int layout_copy(int source, const Sizes& strides);
  // A kernel of lowering's own, for no graph node: `build` fills a fresh cluster over `space` with loads of
  // `inputs` (buffer ids; their producers run first), expressions and stores to Alloc buffers, and the kernel
  // takes its place among the steps at once.
  void add_kernel(const Sizes& space, const std::vector<int>& inputs,
                  const std::function<void(Cluster&)>& build);
  void add_matmul(MatmulStep step);
  // The torch objects extern step `step` of node `n` passes: its arguments', except those it passes otherwise (a
  // convolution's bias as None, its input as a channels-last copy).
  void ensure_argument_objects(const graph::Node& n, const ExternStep& step);
  // Appends `step` to the program's extern steps and its place among the steps (the one way extern steps are added).
  void add_extern_step(ExternStep step);
  // Node `n` runs as a call into torch (the catch-all for everything without a lowering).
  void add_extern(const graph::Node& n);
  // Why the node being lowered is declined, when the reason is worth telling the user (a case dynamic shapes
  // do not cover yet); the extern step that runs it carries it. Returns false, for `return L.decline(...)`.
  bool decline(std::string why);
  // `n` is a view of `base`'s buffer with n's own meta layout.
  void add_view(const graph::Node& n, int base_buffer);
  // View `n` of `input` reshapes a lazy contiguous value of an open cluster into another contiguous shape of its
  // elements (GPT-2's `x.view(-1, x.size(-1))` of a layer norm or GELU before the cast autocast puts in front of
  // its product): n stays an expression of that cluster (Value::reshaped) rather than a view of a buffer, so the
  // ops on n alone join the kernel that computes `input`. False (nothing done) where it does not apply.
  bool defer_reshape(const graph::Node& n, graph::NodeId input);
  // The expression loading `buffer` into cluster `c` for an op of shape `out_shape` (broadcast: trailing
  // dimensions line up, size-1 ones read at stride 0; row: a per-row op).
  int load_buffer(Cluster& c, int buffer, const Sizes& out_shape, bool row) const;

 private:
  void lower_node(const graph::Node& n);
  // reduce_in_parts' three forms: see there.
  bool mixed_reduce(const graph::Node& n, graph::NodeId x, int k, const std::vector<bool>& reduced, DType acc,
                    const PartialsFn& partials);
  bool pieces_reduce(const graph::Node& n, graph::NodeId x, int k, int64_t pieces, DType acc,
                     const PartialsFn& partials);
  bool column_pieces_reduce(const graph::Node& n, graph::NodeId x, const std::vector<bool>& reduced,
                            const ReductionSplit& split, DType acc, const PartialsFn& partials);
  // Stores each of `exprs` (per coordinate of `sizes`, addressed by `in_space` over the cluster's space) cast to
  // `acc` to a contiguous buffer of its own, one the cluster already stores the same expression to if any; seals
  // the cluster and returns the buffers.
  std::vector<int> store_partials(int cluster, const std::vector<int>& exprs, DType acc, const Sizes& sizes,
                                  const Sizes& in_space);
  // Per-row partials of row-reduce cluster `rows` (x's expression x_expr, rows of `part_length`), stored.
  std::vector<int> store_row_partials(int rows, int x_expr, DType acc, const PartialsFn& partials,
                                      int64_t part_length);
  // column_reduce_of for the second kernel of a reduction in parts: the partials `parts` over `reduced`.
  bool combine_columns(const graph::Node& n, const std::vector<int>& parts, const std::vector<bool>& reduced,
                       const PartialsFn& partials, int64_t part_length);
  // keepdim=True for a reduction whose lazy result does not have the node's rank: the result is stored at once in
  // its own shape (its cluster sealed); out_dims gives, per dimension of the cluster's space, the result dimension
  // it walks, or -1 for none (stride 0).
  void store_keepdim_result(const graph::Node& n, const std::vector<int>& out_dims);
  // column_reduce of node x's value, or of buffer x_buffer's when it is >= 0 (x unused).
  // fn's third argument: loads of `extra_buffers` (the shape of x_buffer's).
  bool column_reduce_of(const graph::Node& n, graph::NodeId x, int x_buffer, const std::vector<bool>& reduced,
                        const RowFn& fn, bool splittable, const std::vector<int>& extra_buffers = {});
  bool lower_call(const graph::Node& n);  // false: no lowering, use an extern step
  // Throws LayoutConflict when extern `n` would hand torch a value planned in another layout than traced while
  // n's own result is not planned alike (channels_last.h).
  void check_planned_layouts(const graph::Node& n) const;
  // An in-place pointwise op on a value only the graph holds, as its functional op (lower_in_place.cpp).
  bool lower_in_place(const graph::Node& n);
  // A convolution with a bias: torch's call without it, the bias added by a kernel (lower_convolution.cpp).
  bool lower_convolution_bias(const graph::Node& n, const std::string& op);
  // Convolution `n`'s step reads NHWC copies of its input and weight when n is planned channels-last and they are
  // not (lower_convolution.cpp).
  void copy_operands_channels_last(const graph::Node& n, ExternStep* step);
  // Attention call `n` left to torch passes a bias made by a kernel of the plan for its boolean mask, where torch
  // would convert the mask for cuDNN on every call (lower_attention.cpp).
  void pass_attention_bias(const graph::Node& n, ExternStep* step);
  // Whether node x's value can be replaced by another from node `at` on: nothing else shares its memory.
  bool only_the_graph_holds(graph::NodeId x, graph::NodeId at) const;
  bool trailing_reduce(const graph::Node& n, graph::NodeId x, const RowFn& fn, int k,
                       bool splittable);  // row_reduce, k > 1
  // A new row-reduce cluster over x's shape with its trailing k dimensions read as one row ([outer..., len]),
  // split as reduction_split says; *x_expr is x's value in it. -1 when it does not fit. With `pieces` > 1 each
  // row is cut into that many rows of len / pieces instead ([outer..., pieces, len / pieces]; the caller
  // combines them).
  int trailing_rows(graph::NodeId x, int k, bool splittable, int* x_expr, int64_t pieces = 1);
  // A copy of `src`'s expression `expr` in `dst`, whose space is src's with dimensions `from`.. collapsed into one:
  // each load read with one stride over them. -1 when a load does not collapse or the expression depends on the
  // shape (a range, a gather, a flat index). `copied` maps src's expressions already copied.
  int collapsed_copy(const Cluster& src, int expr, Cluster& dst, size_t from, std::map<int, int>* copied);
  // The split a reduction over `space` gets (nullopt: one kernel), or false when it does not fit: few long rows
  // (columns) that cannot be split. `target` is the cluster it would join (-1: a new one), whose split it keeps.
  bool reduction_split(const Sizes& space, const std::vector<bool>& reduced, DType x_dtype, bool splittable,
                       int* target, std::optional<ReductionSplit>* split) const;
  // Emits cluster `c`'s kernel step(s) into the program: two kernels and their partial buffers when it is split.
  void emit_kernels(int c, std::vector<Step>* steps);
  int materialize(graph::NodeId id);      // a buffer holding the value; the cluster is not sealed
  void seal(int cluster);
  void ensure_object(graph::NodeId id);   // the value exists as a torch object at run time
  void ensure_objects(const graph::Arg& a);
  bool touches_the_cpu(const graph::Node& n) const;  // a CPU tensor among its result and arguments
  void roots_read_to_make(graph::NodeId id, std::vector<int>& roots) const;
  void flush_live_values(graph::NodeId at);  // before a mutating extern: every lazy value still needed
  void materialize_live_views_of(const graph::Node& n);  // before a mutating extern: its args' live views as objects
  int cluster_of(int id);                     // follows merges
  int new_cluster(const Sizes& space);
  // Node n's value is `expr` of cluster `cluster` (cast to n's dtype), per element or, with `per_row`, one per row
  // (column) of a reduction.
  void bind_lazy(const graph::Node& n, int cluster, int expr, bool per_row);
  void merge(int into, int from);
  Sizes strides_in_space(const Sizes& sizes, const Sizes& strides, const Sizes& out_shape, bool row,
                         const Cluster& c) const;
  bool lazy_fits(const Value& v, graph::NodeId id, const Sizes& out_shape, bool* row) const;
  // pointwise() of node n whose tensor operands are all one reshaped value with an open cluster: n is computed
  // there and is reshaped too. False when that does not apply.
  bool pointwise_on_reshaped(const graph::Node& n, const std::vector<Operand>& operands, const PointwiseFn& fn);
  // Clusters a and b may become one kernel (ranges need a pointwise one; reductions of one kind and dimensions).
  bool can_merge(int a, int b) const;

  const graph::Graph& graph_;
  LowerOptions options_;
  std::vector<std::vector<int64_t>> planned_strides_;  // per node, or empty
  Program program_;
  std::vector<Value> values_;
  std::vector<std::unique_ptr<Cluster>> clusters_;
  std::vector<int> merged_into_;       // per cluster: -1, or the cluster it was merged into
  std::vector<int> kernel_step_of_;    // per cluster: its index in program_.kernel_steps once sealed
  std::vector<int> buffer_producer_;   // per buffer: the cluster that stores it, or -1
  std::vector<int> last_use_;          // per node: the last node using it (graph size: the output)
  bool writes_arguments_ = false;      // some node writes an argument in place (no reshape is deferred then)
  std::string declined_;               // decline()'s reason for the node being lowered
  // mixed_reduce's first kernels: (x, trailing dims) -> (cluster, x's expression in it)
  std::map<std::pair<graph::NodeId, int>, std::pair<int, int>> mixed_rows_;
  // store_partials' buffers: (cluster, expression) -> the buffer holding it
  std::map<std::pair<int, int>, int> stored_partials_;
};

// The node of an in-place op's functional op: `Tensor.add_` -> `Tensor.add`, `operator.iadd` -> `operator.add`, and
// for torch.nn.functional's ops, the `inplace` argument (keyword or positional) left out.
graph::Node functional_form(const graph::Node& n);
// Whether the call passes `inplace=` by keyword (F.relu(x, inplace=False) is F.relu(x)).
bool has_inplace_keyword(const graph::Node& n);

// An op whose result's element i depends only on its operands' elements at i (broadcast), whatever their memory
// layouts: arithmetic, math, activations, comparisons, casts, clamp/where, dropout, batch norm (per channel).
// `op` is op_name of the node's functional form.
bool is_elementwise_op(const graph::Node& n, const std::string& op);

// A lazy expression copied into another cluster with its loads moved (moved_expression.cpp). A load of the copy
// reads the same buffer with the strides, offset and validity range `move` gives for the original's strides and
// offset.
struct MovedLoad {
  Sizes strides;
  Size offset = 0;
  codegen::DimRange valid;
};
using MoveLoad = std::function<MovedLoad(const Sizes& strides, const Size& offset)>;
// Whether expression `root` of `c` means the same wherever its loads are moved: only loads (without ranges),
// constants and element ops, nothing that depends on the position in the space (an index, a range), on a
// whole row (a reduction) or on loaded indices (a gather).
bool movable_expression(const Cluster& c, int root);
// The buffers movable expression `root` of `c` loads.
std::vector<int> loaded_buffers(const Cluster& c, int root);
// Copies movable expression `root` of `from` into `to` (which may be `from`); returns the copy's expression.
int copy_moved(const Cluster& from, int root, Cluster& to, const MoveLoad& move);

// The name of the op node `n` calls: op_name of its target, or the callable's __name__ where the target is a
// wrapper (F.max_pool2d is torch's boolean_dispatch "fn").
std::string called_op_name(const graph::Node& n);

// The op families. Each returns false when it has no lowering for `n` (an extern step is used).
bool lower_pointwise_op(Lowerer& L, const graph::Node& n, const std::string& op);
bool lower_reduction_op(Lowerer& L, const graph::Node& n, const std::string& op);
bool lower_matmul_op(Lowerer& L, const graph::Node& n, const std::string& op);
bool lower_view_op(Lowerer& L, const graph::Node& n, const std::string& op);
bool lower_cat_op(Lowerer& L, const graph::Node& n, const std::string& op);
bool lower_attention_op(Lowerer& L, const graph::Node& n, const std::string& op);
bool lower_gather_op(Lowerer& L, const graph::Node& n, const std::string& op);
bool lower_factory_op(Lowerer& L, const graph::Node& n, const std::string& op);
bool lower_pooling_op(Lowerer& L, const graph::Node& n, const std::string& op);

// A pointwise operand from an argument: a tensor node lowering holds, or a Python number as a scalar of its own
// kind (bool, int as I64, float as F64). Clears *ok for anything else.
Operand operand_of(Lowerer& L, const graph::Arg* a, bool* ok);

// F.linear's D = A @ W^T (+ bias) as lowering has it: A [m, k] and W [n, k] addressed by their strides from their
// buffers (ids), the bias (-1 for none) and D (row-major [m, n]) buffers.
struct LinearOperands {
  DType dtype = DType::F32;
  int a = -1, w = -1, bias = -1, d = -1;
  Size m = 0, n = 0, k = 0;
  Size a_row_stride = 0, a_col_stride = 0, w_row_stride = 0, w_col_stride = 0;
};
// The product (F.linear, addmm, multi-head attention's projections) as a small-matmul kernel when lowering may
// make one and it is that small (static sizes, at most 32 rows, under kSmallMatmulMaxTerms multiply-adds, A and W
// contiguous along k), else as a cuBLASLt call with the bias as its epilogue.
void linear_product(Lowerer& L, const LinearOperands& p, graph::NodeId node);

// store_keepdim_result's out_dims for a result over [outer..., row] of a rank-`rank` x reduced over its last k.
std::vector<int> keepdim_rows(size_t rank, int k);

// Softmax (log_softmax when `log`) of row-reduce expression `x` along its row, computed in `acc`; per element.
int softmax_expr(Cluster& c, int x, DType acc, bool log);

}  // namespace fastcomp::plan::detail
