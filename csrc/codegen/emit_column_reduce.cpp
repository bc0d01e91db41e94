// Column-reduce kernels: the kernel's dimensions fall in three groups, each collapsed on its own (layout.h): the
// reduced ones R, the trailing run of kept ones I (the last dimension is always kept) and the other kept ones O,
// so a column is one (o, i) coordinate and its elements lie along R. Reduced dimensions that are not adjacent
// (dims 0 and 2 of [A, B, C, D]) are indexed as several dimensions of R, a division per element.
//
// Consecutive threads take consecutive columns along I, so a warp's loads at one r are one coalesced stretch of
// memory, and each thread accumulates its column over R. With `vec` > 1 a thread takes `vec` consecutive columns
// and reads them as one 16-byte vector (when every operand is contiguous or broadcast along I's innermost
// dimension, which `vec` divides). When there are few columns for the GPU (fewer than kSplitWaves waves of
// resident threads) R is split across `ry` threads of a block too: thread (tx, ty) of a block of bx * ry takes
// every ry-th r, and the partial results meet in shared memory through a fixed tree (one kernel, no atomics,
// the same order on every run).
//
// As in the row reduce, the expression DAG is evaluated in passes over R: pass L accumulates the reductions
// whose inputs need only reductions of earlier passes (var: the sum, then the sum of squared deviations from the
// mean) and writes the per-element stores that are ready; values the same along R ("uniform": reductions,
// constants, inputs with stride 0 along R and what is computed from them only) are computed once per column
// between passes, `vec` at a time in arrays v<i>[vec]. Per-column outputs are written after the last pass.
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "codegen/emit_internal.h"
#include "codegen/expr_emitter.h"
#include "codegen/layout.h"

namespace fastcomp::codegen::detail {
namespace {

constexpr int kLineBytes = 128;        // a warp's reads at one r should cover whole 128-byte lines
constexpr int kTargetBlock = 256;      // threads per block when columns alone fill it
constexpr int kSplitWaves = 2;         // columns below this many waves of resident threads split R ...
constexpr int kMinSliceLength = 8;     // ... into slices of at least this many elements (a tree step costs a barrier)
constexpr int kGridWaves = 8;          // the grid's cap in waves of resident blocks; a grid-stride loop beyond
constexpr int64_t kMaxSharedBytes = 32 * 1024;  // the combine's slots, under the 48 KiB of static shared memory

// How an operand is read or written, `vec` columns at a time.
enum class Lane : uint8_t {
  Vector,  // `vec` consecutive elements
  Shared,  // one element for all `vec` columns (stride 0 along I's innermost dimension)
};

struct ColumnPlan {
  SizeParams* params = nullptr;
  Collapsed outer, reduced, inner;   // O, R, I; operands inputs then outputs
  Size n_inner = 1, n_reduced = 1, groups = 1;  // I, R, and (O * I) / vec thread columns
  std::vector<bool> live, uniform;   // per expression
  std::vector<int> level;            // per expression: reduction passes it must wait for
  int reduce_levels = 0;             // the highest level of a live reduction
  int passes = 0;                    // loops over R (reduce_levels, or one more for late per-element stores)
  std::vector<bool> touched;         // per operand: read by a live load or written
  std::vector<bool> varies;          // per operand: its address moves along R
  std::vector<int> store_pass;       // per store: the pass writing it per element, or 0 (once per column, after)
  int vec = 1;
  std::vector<Lane> lanes;           // per operand
  int bx = 32, ry = 1;               // threads per block along columns and along R
  int64_t grid = 1, grid_cap = 1;
};

bool any_nonzero(const Strides& s) {
  for (const Size& x : s)
    if (x != 0) return true;
  return false;
}

int64_t next_pow2(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// The widest vector every touched operand allows along I, with each operand's lane; vec = 1 when none does.
void choose_vector(const Kernel& k, ColumnPlan& p) {
  const size_t n_ops = p.touched.size();
  p.lanes.assign(n_ops, Lane::Shared);
  int widest = 1;
  for (size_t o = 0; o < n_ops; ++o)
    if (p.touched[o]) widest = std::max(widest, dtype_size(operand(k, o).dtype));
  const int vec = 16 / widest;
  if (vec == 1 || p.inner.shape.empty() || !known_multiple(p.inner.shape.back(), vec)) return;
  std::vector<Lane> lanes(n_ops, Lane::Shared);
  for (size_t o = 0; o < n_ops; ++o) {
    if (!p.touched[o]) continue;
    const Size& along = p.inner.strides[o].back();
    if (along == 0 && o < k.inputs.size()) continue;
    if (along != 1) return;  // strided along I: scalar accesses
    // Every group's first element must be vector-aligned from the operand's first one.
    for (const Collapsed* c : {&p.outer, &p.reduced, &p.inner})
      for (size_t d = 0; d < c->shape.size(); ++d)
        if (!(c == &p.inner && d + 1 == c->shape.size()) && !known_multiple(c->strides[o][d], vec)) return;
    lanes[o] = Lane::Vector;
  }
  if (std::find(lanes.begin(), lanes.end(), Lane::Vector) == lanes.end()) return;
  p.vec = vec;
  p.lanes = lanes;
}

// Threads per block along columns (bx) and along R (ry), and the grid. A warp covers at least a 128-byte line of
// a row of columns where there are that many; R is split while the columns leave the GPU short of kSplitWaves
// waves of threads, as far as R (kMinSliceLength), the block size and the combine's shared memory allow; then the
// block grows along the columns to kTargetBlock threads.
void choose_launch(const Kernel& k, const DeviceLimits& limits, ColumnPlan& p, int reductions) {
  int widest = 1;
  for (size_t o = 0; o < p.touched.size(); ++o)
    if (p.touched[o]) widest = std::max(widest, dtype_size(operand(k, o).dtype));
  const int64_t groups = std::max<int64_t>(1, p.groups.hint());
  const int64_t r_len = p.n_reduced.hint();
  const int64_t columns_pow2 = next_pow2(groups);
  p.bx = static_cast<int>(std::min<int64_t>(std::max(1, kLineBytes / (p.vec * widest)), columns_pow2));
  const int64_t acc_bytes = 8;  // the widest accumulator, for the shared-memory bound
  auto shared_fits = [&](int64_t bx, int64_t ry) {
    return ry == 1 || reductions * ry * bx * p.vec * acc_bytes <= kMaxSharedBytes;
  };
  const int64_t wanted = int64_t{kSplitWaves} * limits.sm_count * limits.max_threads_per_sm;
  p.ry = 1;
  auto split_again = [&] {
    const int64_t ry = int64_t{p.ry} * 2;
    return reductions > 0 && ry * p.bx <= limits.max_threads_per_block && ry * kMinSliceLength <= r_len &&
           groups * ry <= wanted && shared_fits(p.bx, ry);
  };
  while (split_again()) p.ry *= 2;
  while (p.bx * p.ry < kTargetBlock && p.bx * 2 <= columns_pow2 && shared_fits(p.bx * 2, p.ry)) p.bx *= 2;
  const int block = p.bx * p.ry;
  const int64_t resident = int64_t{limits.sm_count} * std::max(1, limits.max_threads_per_sm / block);
  p.grid_cap = resident * kGridWaves;
  p.grid = std::clamp<int64_t>(ceil_div(groups, p.bx), 1, p.grid_cap);
}

// The C type and name of a per-column array: v<i>[vec] holds expression i's value for the thread's columns.
std::string array_decl(const Kernel& k, int i, int vec) {
  return fmt::format("{} v{}[{}];", value_type(k.exprs[i].dtype), i, vec);
}

// Statements that bring the uniform values `exprs` refer to (and `refs` themselves) into scope for column u:
// constants are written out, the rest read from their arrays. `local` marks values already declared there.
std::string uniform_values_in_scope(const Kernel& k, const ColumnPlan& p, const std::vector<int>& exprs,
                                    const std::vector<int>& refs, const std::vector<bool>& local,
                                    const std::string& indent) {
  std::vector<bool> need(k.exprs.size(), false);
  auto want = [&](int a) {
    if (p.live[a] && p.uniform[a] && !local[a]) need[a] = true;
  };
  for (int i : exprs)
    for (int a : k.exprs[i].args) want(a);
  for (int r : refs) want(r);
  std::string out;
  for (size_t a = 0; a < need.size(); ++a) {
    if (!need[a]) continue;
    const Expr& e = k.exprs[a];
    out += indent + (e.op == ExprOp::Constant ? expr_statement(k, static_cast<int>(a), "")
                                              : fmt::format("const {} e{} = v{}[u];", value_type(e.dtype), a, a)) +
           "\n";
  }
  return out;
}

// Expressions a pass evaluates per element to get `targets`: the non-uniform ones they depend on, in order.
std::vector<int> element_exprs(const Kernel& k, const ColumnPlan& p, const std::vector<int>& targets) {
  std::vector<bool> need(k.exprs.size(), false);
  for (int t : targets)
    if (!p.uniform[t]) need[t] = true;
  for (size_t i = k.exprs.size(); i-- > 0;)
    if (need[i])
      for (int a : k.exprs[i].args)
        if (p.live[a] && !p.uniform[a]) need[a] = true;
  std::vector<int> out;
  for (size_t i = 0; i < need.size(); ++i)
    if (need[i]) out.push_back(static_cast<int>(i));
  return out;
}

// The element of input o for column u of this thread at the current r, once the pass has loaded it.
std::string element_leaf(const ColumnPlan& p, int o) {
  return p.vec > 1 && p.lanes[o] == Lane::Vector ? fmt::format("y{}[u]", o) : fmt::format("y{}", o);
}

// Offset text of operand o over one group, "" when it does not move there.
std::string group_offset(const Collapsed& c, size_t o, const std::string& index, const std::string& prefix,
                         SizeParams& params) {
  if (c.shape.empty() || !any_nonzero(c.strides[o])) return "";
  return offset_text(c, o, index, prefix, 0, params);
}

std::string sum_text(const std::vector<std::string>& terms) {
  std::string out;
  for (const std::string& t : terms)
    if (!t.empty() && t != "0") out += (out.empty() ? "" : " + ") + t;
  return out.empty() ? "0" : out;
}

// One loop over this thread's share of R for column group g: loads what `exprs` read, evaluates them for each of
// the `vec` columns, accumulates `reductions` and writes the stores `stores`.
std::string pass_text(const Kernel& k, const ColumnPlan& p, int pass) {
  const size_t n_in = k.inputs.size();
  std::vector<int> reductions, targets, stores;
  for (size_t i = 0; i < k.exprs.size(); ++i)
    if (p.live[i] && is_reduce(k.exprs[i].op) && p.level[i] == pass) {
      reductions.push_back(static_cast<int>(i));
      targets.push_back(k.exprs[i].args[0]);
    }
  for (size_t s = 0; s < k.stores.size(); ++s)
    if (p.store_pass[s] == pass) {
      stores.push_back(static_cast<int>(s));
      targets.push_back(k.stores[s].expr);
    }
  const std::vector<int> exprs = element_exprs(k, p, targets);
  std::vector<bool> local(k.exprs.size(), false), operands(p.touched.size(), false);
  for (int i : exprs) {
    local[i] = true;
    if (k.exprs[i].op == ExprOp::Load) operands[k.exprs[i].operand] = true;
  }
  for (int s : stores) operands[n_in + k.stores[s].output] = true;

  const std::string in = "      ";
  std::string out;
  for (int i : reductions)
    out += fmt::format("    {} a{}[{}];\n    for (int u = 0; u < {}; ++u) a{}[u] = {};\n",
                       value_type(accumulator(k.exprs[i].dtype)), i, p.vec, p.vec, i,
                       reduce_init(k.exprs[i].op, k.exprs[i].dtype));
  out += fmt::format("#pragma unroll 4\n    for (idx_t r = {}; active && r < {}; r += {}) {{\n",
                     p.ry > 1 ? "ty" : "0", p.params->text(p.n_reduced), p.ry);
  out += coordinate_decls(p.reduced, operands, "r", "q", in, *p.params);
  auto address = [&](size_t o) { return sum_text({fmt::format("b{}", o), group_offset(p.reduced, o, "r", "q", *p.params)}); };
  for (size_t o = 0; o < n_in; ++o) {
    if (!operands[o]) continue;
    const char* t = dtype_c_type(k.inputs[o].dtype);
    if (p.vec > 1 && p.lanes[o] == Lane::Vector)
      out += fmt::format("{0}{1} y{2}[{3}];\n{0}fc_load<{3}, kVector>(in{2} + {4}, y{2});\n", in, t, o, p.vec,
                         address(o));
    else
      out += fmt::format("{}const {} y{} = in{}[{}];\n", in, t, o, o, address(o));
  }
  for (int s : stores)
    if (p.vec > 1) out += fmt::format("{}{} z{}[{}];\n", in, dtype_c_type(k.outputs[k.stores[s].output].dtype),
                                      k.stores[s].output, p.vec);
  out += fmt::format("#pragma unroll\n{}for (int u = 0; u < {}; ++u) {{\n", in, p.vec);
  std::vector<int> refs;
  for (int i : reductions) refs.push_back(k.exprs[i].args[0]);
  for (int s : stores) refs.push_back(k.stores[s].expr);
  out += uniform_values_in_scope(k, p, exprs, refs, local, in + "  ");
  for (int i : exprs) {
    const Expr& e = k.exprs[i];
    out += in + "  " + expr_statement(k, i, e.op == ExprOp::Load ? element_leaf(p, e.operand) : "") + "\n";
  }
  for (int i : reductions) {
    const Expr& e = k.exprs[i];
    const DType acc = accumulator(e.dtype);
    out += fmt::format("{}  a{}[u] = {}(a{}[u], {});\n", in, i, reduce_functor(e.op), i,
                       convert(e.dtype, acc, convert(k.exprs[e.args[0]].dtype, e.dtype, value_name(e.args[0]))));
  }
  for (int s : stores) {
    const Store& st = k.stores[s];
    if (p.vec > 1) out += fmt::format("{}  z{}[u] = {};\n", in, st.output, stored_value(k, st));
    else out += fmt::format("{}  out{}[{}] = {};\n", in, st.output, address(n_in + st.output), stored_value(k, st));
  }
  out += in + "}\n";
  if (p.vec > 1)
    for (int s : stores)
      out += fmt::format("{}fc_store<{}, kVector>(out{} + {}, z{});\n", in, p.vec, k.stores[s].output,
                         address(n_in + k.stores[s].output), k.stores[s].output);
  out += "    }\n";

  // Combine the ry partial results of each column through shared memory, then keep them as uniform values.
  const bool later_reductions = pass < p.reduce_levels;
  const bool needed_by_all = pass < p.passes;  // a later pass of every thread reads them
  if (p.ry > 1 && !reductions.empty()) {
    std::string write, step, read;
    for (int i : reductions) {
      write += fmt::format("    for (int u = 0; u < {}; ++u) s{}[ty][u][tx] = a{}[u];\n", p.vec, i, i);
      step += fmt::format("        for (int u = 0; u < {0}; ++u) {{\n"
                          "          a{1}[u] = {2}(a{1}[u], s{1}[ty + h][u][tx]);\n"
                          "          s{1}[ty][u][tx] = a{1}[u];\n        }}\n",
                          p.vec, i, reduce_functor(k.exprs[i].op));
      read += fmt::format("    for (int u = 0; u < {}; ++u) a{}[u] = s{}[0][u][tx];\n", p.vec, i, i);
    }
    out += write + "    __syncthreads();\n";
    out += fmt::format("    for (int h = {} / 2; h > 0; h >>= 1) {{\n      if (ty < h) {{\n{}      }}\n"
                       "      __syncthreads();\n    }}\n", p.ry, step);
    // Thread ty 0 ends with the whole result; the others read it when a later pass needs it. Before the slots
    // are written again (the next column group) every thread must have read them: a later pass's combine
    // barrier sees to that, else one here.
    if (needed_by_all) out += read + (later_reductions ? "" : "    __syncthreads();\n");
  }
  for (int i : reductions)
    out += fmt::format("    {}\n    for (int u = 0; u < {}; ++u) v{}[u] = {};\n", array_decl(k, i, p.vec), p.vec,
                       i, convert(accumulator(k.exprs[i].dtype), k.exprs[i].dtype, fmt::format("a{}[u]", i)));
  return out;
}

// The uniform values of `level` (after that pass's reductions; level 0: before any pass), column by column.
std::string uniform_text(const Kernel& k, const ColumnPlan& p, int level) {
  std::vector<int> exprs;
  std::vector<bool> local(k.exprs.size(), false);
  for (size_t i = 0; i < k.exprs.size(); ++i) {
    const Expr& e = k.exprs[i];
    if (!p.live[i] || !p.uniform[i] || p.level[i] != level || is_reduce(e.op) || e.op == ExprOp::Constant) continue;
    exprs.push_back(static_cast<int>(i));
    local[i] = true;
  }
  if (exprs.empty()) return "";
  std::string out, loads;
  std::vector<bool> loaded(k.inputs.size(), false);  // an input two loads read is loaded once
  for (int i : exprs) {
    out += "    " + array_decl(k, i, p.vec) + "\n";
    const Expr& e = k.exprs[i];
    if (e.op == ExprOp::Load && p.vec > 1 && p.lanes[e.operand] == Lane::Vector && !loaded[e.operand]) {
      loaded[e.operand] = true;
      loads += fmt::format("    {0} w{1}[{2}];\n    fc_load<{2}, kVector>(in{1} + b{1}, w{1});\n",
                           dtype_c_type(k.inputs[e.operand].dtype), e.operand, p.vec);
    }
  }
  out += loads + fmt::format("#pragma unroll\n    for (int u = 0; u < {}; ++u) {{\n", p.vec);
  out += uniform_values_in_scope(k, p, exprs, {}, local, "      ");
  for (int i : exprs) {
    const Expr& e = k.exprs[i];
    std::string leaf;
    if (e.op == ExprOp::Load)
      leaf = p.vec > 1 && p.lanes[e.operand] == Lane::Vector ? fmt::format("w{}[u]", e.operand)
                                                             : fmt::format("in{}[b{}]", e.operand, e.operand);
    out += "      " + expr_statement(k, i, leaf) + fmt::format("\n      v{}[u] = e{};\n", i, i);
  }
  return out + "    }\n";
}

// Per-column outputs, written by the thread holding the column's result (ty 0) after the last pass.
std::string column_stores(const Kernel& k, const ColumnPlan& p) {
  std::vector<int> stores;
  std::vector<int> refs;
  for (size_t s = 0; s < k.stores.size(); ++s)
    if (p.store_pass[s] == 0) {
      stores.push_back(static_cast<int>(s));
      refs.push_back(k.stores[s].expr);
    }
  if (stores.empty()) return "";
  const size_t n_in = k.inputs.size();
  std::string out = fmt::format("    if (active{}) {{\n", p.ry > 1 ? " && ty == 0" : "");
  for (int s : stores)
    if (p.vec > 1) out += fmt::format("      {} z{}[{}];\n", dtype_c_type(k.outputs[k.stores[s].output].dtype),
                                      k.stores[s].output, p.vec);
  out += fmt::format("#pragma unroll\n      for (int u = 0; u < {}; ++u) {{\n", p.vec);
  out += uniform_values_in_scope(k, p, {}, refs, std::vector<bool>(k.exprs.size(), false), "        ");
  for (int s : stores) {
    const Store& st = k.stores[s];
    out += p.vec > 1 ? fmt::format("        z{}[u] = {};\n", st.output, stored_value(k, st))
                     : fmt::format("        out{}[b{}] = {};\n", st.output, n_in + st.output, stored_value(k, st));
  }
  out += "      }\n";
  if (p.vec > 1)
    for (int s : stores)
      out += fmt::format("      fc_store<{}, kVector>(out{} + b{}, z{});\n", p.vec, k.stores[s].output,
                         n_in + k.stores[s].output, k.stores[s].output);
  return out + "    }\n";
}

std::string columns_function(const Kernel& k, const ColumnPlan& p, const std::string& idx_decl) {
  std::string f = fmt::format("template <bool kVector>\n__device__ __forceinline__ void {}_columns({}) {{\n  {}\n",
                              k.name, kernel_params(k), idx_decl);
  if (p.ry > 1) {
    for (size_t i = 0; i < k.exprs.size(); ++i)
      if (p.live[i] && is_reduce(k.exprs[i].op))
        f += fmt::format("  __shared__ {} s{}[{}][{}][{}];  // partial results per R-slice, column\n",
                         value_type(accumulator(k.exprs[i].dtype)), i, p.ry, p.vec, p.bx);
    f += fmt::format("  const int tx = threadIdx.x % {0}, ty = threadIdx.x / {0};\n", p.bx);
  } else {
    f += "  const int tx = threadIdx.x;\n";
  }
  // Every thread of a block runs the same iterations (the barriers), whether or not it has a column.
  f += fmt::format("  for (idx_t g0 = blockIdx.x * {0}; g0 < {1}; g0 += gridDim.x * {0}) {{\n", p.bx,
                   p.params->text(p.groups));
  f += fmt::format("    const idx_t g = g0 + tx;\n    const bool active = g < {};\n", p.params->text(p.groups));
  // The first column's coordinates o (over O) and i (over I), where some operand's address needs them.
  std::string bases;
  bool need_o = false, need_i = false;
  for (size_t o = 0; o < p.touched.size(); ++o) {
    if (!p.touched[o]) continue;
    const std::string along_o = group_offset(p.outer, o, "o", "co", *p.params);
    const std::string along_i = group_offset(p.inner, o, "i", "ci", *p.params);
    need_o = need_o || !along_o.empty();
    need_i = need_i || !along_i.empty();
    bases += fmt::format("    const idx_t b{} = {};\n", o,
                         sum_text({along_o, along_i, p.params->text(operand(k, o).storage_offset)}));
  }
  const std::string column = p.vec > 1 ? fmt::format("g * {}", p.vec) : "g";
  const std::string n_inner = p.params->text(p.n_inner);
  if (need_o) f += fmt::format("    const idx_t o = {} / {};\n", column, n_inner);
  if (need_i)
    f += p.outer.shape.empty() ? fmt::format("    const idx_t i = {};\n", column)
         : need_o              ? fmt::format("    const idx_t i = {} - o * {};\n", column, n_inner)
                               : fmt::format("    const idx_t i = {} % {};\n", column, n_inner);
  f += coordinate_decls(p.outer, p.touched, "o", "co", "    ", *p.params);
  f += coordinate_decls(p.inner, p.touched, "i", "ci", "    ", *p.params);
  f += bases;
  f += uniform_text(k, p, 0);
  for (int pass = 1; pass <= p.passes; ++pass) f += pass_text(k, p, pass) + uniform_text(k, p, pass);
  f += column_stores(k, p);
  return f + "  }\n}\n\n";
}

}  // namespace

KernelSource emit_column_reduce(const Kernel& k, const DeviceLimits& limits) {
  ColumnPlan p;
  SizeParams params;
  p.params = &params;
  const size_t n_in = k.inputs.size(), n_ops = n_in + k.outputs.size();
  // The groups: R, the trailing run of kept dimensions I, the other kept ones O.
  size_t inner_begin = k.shape.size();
  while (inner_begin > 0 && !k.reduced_dims[inner_begin - 1]) --inner_begin;
  Sizes o_shape, r_shape, i_shape;
  std::vector<Strides> o_strides(n_ops), r_strides(n_ops), i_strides(n_ops);
  for (size_t d = 0; d < k.shape.size(); ++d) {
    Sizes& shape = k.reduced_dims[d] ? r_shape : d >= inner_begin ? i_shape : o_shape;
    std::vector<Strides>& strides = k.reduced_dims[d] ? r_strides : d >= inner_begin ? i_strides : o_strides;
    shape.push_back(k.shape[d]);
    for (size_t o = 0; o < n_ops; ++o) strides[o].push_back(operand(k, o).strides[d]);
  }
  p.outer = collapse(o_shape, o_strides);
  p.reduced = collapse(r_shape, r_strides);
  p.inner = collapse(i_shape, i_strides);
  p.n_inner = numel(i_shape);
  p.n_reduced = numel(r_shape);

  p.varies.assign(n_ops, false);
  for (size_t o = 0; o < n_ops; ++o) p.varies[o] = !p.reduced.shape.empty() && any_nonzero(p.reduced.strides[o]);
  p.live = live_exprs(k);
  ReductionLevels levels = reduction_levels(k, p.varies);
  p.uniform = std::move(levels.uniform);
  p.level = std::move(levels.level);
  p.touched.assign(n_ops, false);
  int reductions = 0;
  for (size_t i = 0; i < k.exprs.size(); ++i) {
    if (!p.live[i]) continue;
    if (k.exprs[i].op == ExprOp::Load) p.touched[k.exprs[i].operand] = true;
    if (is_reduce(k.exprs[i].op)) ++reductions;
    p.reduce_levels = std::max(p.reduce_levels, p.level[i]);
  }
  p.passes = p.reduce_levels;
  for (const Store& s : k.stores) {
    const size_t o = n_in + s.output;
    p.touched[o] = true;
    if (!p.varies[o] && !p.uniform[s.expr])
      throw std::invalid_argument(fmt::format("emit_cuda: kernel '{}': out{} holds one value per column but e{} "
                                              "varies along the reduced dimensions", k.name, s.output, s.expr));
    // A value along R is written in the pass after the reductions it needs; a per-column one after the last.
    p.store_pass.push_back(p.varies[o] ? p.level[s.expr] + 1 : 0);
    p.passes = std::max(p.passes, p.store_pass.back());
  }
  choose_vector(k, p);
  if (p.passes == 0) reductions = 0;  // nothing reads R: one slice
  p.groups = numel(o_shape) * (p.vec > 1 ? floordiv(p.n_inner, p.vec) : p.n_inner);
  choose_launch(k, limits, p, reductions);

  const int block = p.bx * p.ry;
  const bool dynamic_grid = !p.groups.is_static();
  KernelSource src = source_for(k, block, dynamic_grid ? p.grid_cap : p.grid);
  if (dynamic_grid) {
    src.grid_items = p.groups.sym();
    src.items_per_block = p.bx;
  }
  // Loop variables overshoot their bounds by a grid step (columns) or ry (R) at most.
  const bool wide = wide_indices(k, std::max((p.groups.hint() + 2 * p.grid * p.bx) * p.vec,
                                             p.n_reduced.hint() + 2 * int64_t{p.ry}));

  std::string& code = src.code;
  code = fmt::format("// {}: column reduce over [{}], [{}] x [{}] columns of [{}], {} x {} threads per block "
                     "(columns x R-slices), {} column{} per thread, {} pass{}, {} indices\n",
                     k.name, join(k.shape), join(p.outer.shape), join(p.inner.shape), join(p.reduced.shape), p.bx,
                     p.ry, p.vec, p.vec > 1 ? "s" : "", p.passes, p.passes == 1 ? "" : "es",
                     wide ? "64-bit" : "32-bit");
  code += columns_function(k, p, index_type_decl(wide));
  code += fmt::format("extern \"C\" __global__ void __launch_bounds__({}) {}({}) {{\n", block, k.name,
                      kernel_params(k));
  if (p.vec > 1)
    for (size_t o = 0; o < n_ops; ++o)
      if (p.touched[o] && p.lanes[o] == Lane::Vector) add_vector_operand(src, k, o, p.vec);
  code += fmt::format("  {}_columns<{}>({});\n}}\n", k.name, src.vector_operands.empty() ? "false" : "kVectorAccess",
                      kernel_args(k));
  src.size_params = params.exprs();
  return src;
}

}  // namespace fastcomp::codegen::detail
