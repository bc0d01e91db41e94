// Row-reduce kernels: the last dimension is a row of length R; one warp (R <= 512) or one block per row, in a
// grid-stride loop over rows. R and the row count may be symbolic (kernel parameters); a symbolic R is streamed.
//
// The expression DAG is evaluated in passes over the row: pass L computes every Reduce whose inputs need only
// reductions of earlier passes (softmax: max, then sum of exp(x - max); layer_norm: mean, then variance), and a
// last pass writes the per-element outputs. Values that are the same for the whole row ("uniform": reductions,
// constants, per-row inputs and what is computed from them only) are computed once per row between passes.
//
// Each thread owns chunks of `vec` consecutive elements of the row, chunk s starting at (s * threads + t) * vec,
// so warps read whole 16-byte vectors, coalesced. When the thread's share of the row fits in registers
// (at most 16 elements per input), inputs read by several passes are loaded once at the start of the row
// ("cached"), inputs the same for every row (a layer_norm weight) are loaded once before the row loop
// ("hoisted", when a thread sees several rows) while registers allow, and the rest are read in the one pass
// that needs them. Longer rows are streamed: every pass reads what it needs again (from L2 for all but the
// first).
//
// A gather whose index is the same for the whole row (an embedding: the row is a row of the table) reads its
// input as a Load does, from a row base moved by index * stride: the index is loaded and checked once per row,
// before the first read of the gathered row. Each gathered input is read by its gather only (lowering keeps it
// so), since its row base depends on that gather's index.
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "codegen/emit_internal.h"
#include "codegen/expr_emitter.h"
#include "codegen/layout.h"

namespace fastcomp::codegen::detail {
namespace {

constexpr int64_t kWarpRowMax = 512;      // rows up to this length get one warp (16 elements per lane at most)
constexpr int kElementsPerThread = 16;    // block size aims for this many elements per thread
constexpr int kMaxCachedPerInput = 16;    // registers per thread for one input's share of a row
constexpr int kMaxCachedTotal = 32;       // ... and for all cached and hoisted inputs together
constexpr int kWarpsPerBlockWarpMode = 8;
// Grid sizes, in waves of resident blocks. Short rows (warp mode) run best on one persistent wave; a block's
// row is long enough that measured H200 rates rise with more blocks up to one block per row (2 resident waves:
// 85-88% of copy rate, a block per row: 87-97%), since the scheduler then overlaps one block's reduction
// barriers with another's loads.
constexpr int kWarpModeWaves = 1;
constexpr int kBlockModeWaves = 16;

enum class Residence : uint8_t {
  Unused,    // no pass reads it per element
  Streamed,  // read in the pass that needs it
  Cached,    // read once per row into registers
  Hoisted,   // read once per thread into registers, before the row loop
};

struct RowPlan {
  Size rows = 0, len = 0;            // len: R, elements per row
  SizeParams* params = nullptr;      // the kernel's size parameters (dynamic shapes)
  Collapsed outer;                   // rows: outer dimensions, operands inputs then outputs
  Sizes row_stride;                  // per operand
  std::vector<bool> live, uniform;   // per expression
  std::vector<int> level;            // per expression: passes it must wait for
  int passes = 0;                    // reduction passes (the highest level)
  bool warp_mode = false;
  int threads = 32;                  // threads per row
  int block = 32;
  int64_t grid = 1;                  // at the hint; per call up to grid_cap when rows are symbolic
  int64_t grid_cap = 1;
  int vec = 1;                       // elements per chunk
  int chunks = 1;                    // chunks per thread (cached mode)
  bool cached = false;
  std::vector<bool> vector_ok;       // per operand: chunks are vector-aligned in the row (pointer aside)
  std::vector<Residence> residence;  // per input
  std::vector<bool> touched;         // per operand: read or written by the kernel
  std::vector<int> gathers;          // live Gather expressions
  std::vector<bool> gathered;        // per input: read by a gather (its row base depends on the gather's index)
  std::vector<std::vector<int>> pass_exprs;  // per pass (reductions 1..passes, then outputs): element exprs
};

// Expressions reading an input element: a Load, or a Gather from its row base.
bool reads_input(ExprOp op) { return op == ExprOp::Load || op == ExprOp::Gather; }

// Expressions a pass evaluates per element to get `targets`: the non-uniform ones they depend on, in order.
std::vector<int> element_exprs(const Kernel& k, const RowPlan& p, const std::vector<int>& targets) {
  std::vector<bool> need(k.exprs.size(), false);
  for (int t : targets)
    if (!p.uniform[t]) need[t] = true;
  for (size_t i = k.exprs.size(); i-- > 0;)
    if (need[i])
      for (int a : k.exprs[i].args)
        if (!p.uniform[a]) need[a] = true;
  std::vector<int> out;
  for (size_t i = 0; i < need.size(); ++i)
    if (need[i]) out.push_back(static_cast<int>(i));
  return out;
}

// Per pass (1..passes, then the output pass): the element expressions it evaluates.
std::vector<std::vector<int>> pass_exprs(const Kernel& k, const RowPlan& p) {
  std::vector<std::vector<int>> targets(p.passes + 1);
  for (size_t i = 0; i < k.exprs.size(); ++i)
    if (p.live[i] && is_reduce(k.exprs[i].op)) targets[p.level[i] - 1].push_back(k.exprs[i].args[0]);
  for (const Store& s : k.stores)
    if (p.row_stride[k.inputs.size() + s.output] != 0) targets[p.passes].push_back(s.expr);
  std::vector<std::vector<int>> out;
  for (const auto& t : targets) out.push_back(element_exprs(k, p, t));
  return out;
}

// Decides warp/block mode, vector width, chunks and where each input lives.
void choose_shape(const Kernel& k, const DeviceLimits& limits, RowPlan& p) {
  const size_t n_in = k.inputs.size(), n_ops = n_in + k.outputs.size();
  // Operands read once per row (an embedding's i64 index) do not narrow the chunks.
  int widest = 1;
  for (size_t o = 0; o < n_ops; ++o)
    if (p.row_stride[o] != 0) widest = std::max(widest, dtype_size(operand(k, o).dtype));
  // Vector chunks need every row length to be a multiple of the vector width: for a symbolic length, every
  // coefficient of it.
  p.vec = known_multiple(p.len, 16 / widest) ? 16 / widest : 1;
  p.vector_ok.assign(n_ops, false);
  for (size_t o = 0; o < n_ops; ++o) {
    bool ok = p.row_stride[o] == 1;
    for (const Size& s : p.outer.strides[o]) ok = ok && known_multiple(s, p.vec);
    // A gathered row starts at a multiple of its gather's stride.
    for (int g : p.gathers)
      ok = ok && (k.exprs[g].operand != int(o) || known_multiple(k.exprs[g].gather.stride, p.vec));
    p.vector_ok[o] = ok;
  }

  // A symbolic row length picks warp or block mode from its hint (a launch heuristic; both are correct for any
  // length) and is always streamed: the cached mode unrolls over a compile-time chunk count.
  const int64_t len = p.len.hint();
  p.warp_mode = len <= kWarpRowMax;
  const int64_t wanted = ceil_div(ceil_div(len, kElementsPerThread), 32) * 32;
  p.threads = p.warp_mode ? 32 : static_cast<int>(std::clamp<int64_t>(wanted, 32, limits.max_threads_per_block));
  p.chunks = static_cast<int>(std::min<int64_t>(ceil_div(len, int64_t{p.threads} * p.vec), INT32_MAX));
  const int64_t rows = p.rows.is_static() ? p.rows.hint() : kWarpsPerBlockWarpMode;
  p.block = p.warp_mode ? 32 * static_cast<int>(std::clamp<int64_t>(rows, 1, kWarpsPerBlockWarpMode)) : p.threads;
  const int64_t resident = int64_t{limits.sm_count} * std::max(1, limits.max_threads_per_sm / p.block);
  const int64_t waves = p.warp_mode ? kWarpModeWaves : kBlockModeWaves;
  p.grid_cap = resident * waves;
  p.grid = std::max<int64_t>(1, std::min(ceil_div(p.rows.hint(), p.block / p.threads), p.grid_cap));

  // Inputs read per element by more than one pass are worth keeping in registers for the whole row.
  std::vector<int> passes_reading(n_in, 0);
  for (const auto& exprs : p.pass_exprs) {
    std::vector<bool> reads(n_in, false);
    for (int i : exprs)
      if (reads_input(k.exprs[i].op)) reads[k.exprs[i].operand] = true;
    for (size_t o = 0; o < n_in; ++o) passes_reading[o] += reads[o];
  }
  const int per_input = p.chunks * p.vec;
  int reused = 0;
  for (int n : passes_reading) reused += n > 1;
  p.cached = p.len.is_static() && per_input <= kMaxCachedPerInput && reused * per_input <= kMaxCachedTotal;
  p.residence.assign(n_in, Residence::Unused);
  int budget = kMaxCachedTotal - reused * per_input;
  for (size_t o = 0; o < n_in; ++o) {
    if (passes_reading[o] == 0) continue;
    p.residence[o] = p.cached && passes_reading[o] > 1 ? Residence::Cached : Residence::Streamed;
    // Hoisting pays only when a thread sees several rows; a symbolic row count is taken to be large.
    const bool many_rows = !p.rows.is_static() || p.rows.hint() > p.grid * (p.block / p.threads);
    // A gathered input's row moves with its index, though its strides over the rows are 0.
    const bool row_invariant = many_rows && !p.gathered[o] && classify(p.outer, o) == Access::Broadcast;
    if (p.cached && row_invariant && (p.residence[o] == Residence::Cached || budget >= per_input)) {
      if (p.residence[o] == Residence::Streamed) budget -= per_input;
      p.residence[o] = Residence::Hoisted;
    }
  }
}

// The loop over this thread's chunks of the row; `body` sees `j`, the chunk's first column (declared only when
// `body_uses_j`), and `s`, the chunk's number (cached mode only). `body` is indented two levels below `indent`.
std::string chunk_loop(const RowPlan& p, const std::string& body, const std::string& indent, bool body_uses_j) {
  const int64_t step = int64_t{p.threads} * p.vec;
  if (!p.cached)
    return fmt::format("{0}for (idx_t j = t * {1}; j < {2}; j += {3}) {{\n{4}{0}}}\n", indent, p.vec,
                       p.params->text(p.len), index_literal(step), body);
  // Chunks past the row's end exist only when the threads' chunks overshoot it.
  const bool guard = p.chunks * step > p.len.hint();  // cached mode: the length is static
  std::string out = fmt::format("#pragma unroll\n{}for (int s = 0; s < {}; ++s) {{\n", indent, p.chunks);
  if (guard || body_uses_j) out += fmt::format("{}  const idx_t j = (s * {} + t) * {};\n", indent, p.threads, p.vec);
  if (guard)
    return out + fmt::format("{0}  if (j < {1}) {{\n{2}{0}  }}\n{0}}}\n", indent, p.params->text(p.len), body);
  // No guard: the body moves up one level.
  std::string shifted;
  for (size_t at = 0; at < body.size();) {
    const size_t newline = body.find('\n', at);
    const size_t end = newline == std::string::npos ? body.size() : newline + 1;
    shifted += body.compare(at, 2, "  ") == 0 ? body.substr(at + 2, end - at - 2) : body.substr(at, end - at);
    at = end;
  }
  return out + shifted + indent + "}\n";
}

// Loads `vec` elements of input o at column j of the row starting at `base` into `dst` (an array of vec).
std::string load_chunk(const Kernel& k, const RowPlan& p, size_t o, const std::string& base, const std::string& dst,
                       const std::string& indent) {
  const std::string at = base == "0" ? "" : base + " + ";  // a hoisted input of storage offset 0
  if (p.vector_ok[o]) return fmt::format("{}fc_load<{}, kVector>(in{} + {}j, {});\n", indent, p.vec, o, at, dst);
  const Size& rs = p.row_stride[o];
  return fmt::format("{}for (int u = 0; u < {}; ++u) {}[u] = in{}[{}(j + u){}];\n", indent, p.vec, dst, o, at,
                     rs == 1 ? "" : " * " + p.params->text(rs));
}

std::string row_base(const Kernel& k, const RowPlan& p, size_t o) {
  return offset_text(p.outer, o, "row", "r", operand(k, o).storage_offset, *p.params);
}

// One pass over the row: stream in what it reads, evaluate `exprs` per element, then `per_element` (stores when
// `writes`, else accumulation); `vector_outputs` are written as whole chunks.
std::string pass_text(const Kernel& k, const RowPlan& p, const std::vector<int>& exprs,
                      const std::string& per_element, bool writes, const std::vector<int>& vector_outputs) {
  const std::string in = "        ";
  std::string body;
  std::vector<bool> streamed(k.inputs.size(), false);
  bool uses_j = writes;
  for (int i : exprs) {
    const Expr& e = k.exprs[i];
    if (reads_input(e.op) && p.residence[e.operand] == Residence::Streamed) uses_j = streamed[e.operand] = true;
    if (e.op == ExprOp::RowIndex) uses_j = true;
  }
  for (size_t o = 0; o < streamed.size(); ++o)
    if (streamed[o]) {
      body += fmt::format("{}{} y{}[{}];\n", in, dtype_c_type(k.inputs[o].dtype), o, p.vec);
      body += load_chunk(k, p, o, "b" + std::to_string(o), "y" + std::to_string(o), in);
    }
  for (int out : vector_outputs)
    body += fmt::format("{}{} z{}[{}];\n", in, dtype_c_type(k.outputs[out].dtype), out, p.vec);
  body += fmt::format("#pragma unroll\n{}for (int u = 0; u < {}; ++u) {{\n", in, p.vec);
  auto load = [&](int o) {
    return p.residence[o] == Residence::Streamed ? fmt::format("y{}[u]", o) : fmt::format("x{}[s][u]", o);
  };
  for (int i : exprs) {
    const ExprOp op = k.exprs[i].op;
    const std::string leaf = reads_input(op)          ? load(k.exprs[i].operand)
                             : op == ExprOp::RowIndex ? "(int64_t)(j + u)"
                                                      : "";
    body += in + "  " + expr_statement(k, i, leaf) + "\n";
  }
  body += per_element + in + "}\n";
  const size_t n_in = k.inputs.size();
  for (int out : vector_outputs)
    body += fmt::format("{}fc_store<{}, kVector>(out{} + b{} + j, z{});\n", in, p.vec, out, n_in + out, out);
  return chunk_loop(p, body, "    ", uses_j);
}

std::string rows_function(const Kernel& k, const RowPlan& p, const std::string& idx_decl) {
  const size_t n_in = k.inputs.size(), n_ops = n_in + k.outputs.size();
  const int warps = p.threads / 32;
  const auto& passes = p.pass_exprs;
  std::string f = fmt::format("template <bool kVector>\n__device__ __forceinline__ void {}_rows({}) {{\n  {}\n",
                              k.name, kernel_params(k), idx_decl);
  for (size_t i = 0; i < k.exprs.size(); ++i)
    if (p.live[i] && is_reduce(k.exprs[i].op) && warps > 1)
      f += fmt::format("  __shared__ {} s{}[2][{}];  // per warp, double-buffered by row parity\n",
                       value_type(accumulator(k.exprs[i].dtype)), i, warps);
  f += p.warp_mode ? "  const int t = threadIdx.x & 31;\n" : "  const int t = threadIdx.x;\n";
  // Registers x<o>[chunk][element] for inputs kept across passes; a hoisted input's row is every row.
  auto declare_cache = [&](Residence r, const std::string& indent) {
    std::string out;
    for (size_t o = 0; o < n_in; ++o) {
      if (p.residence[o] != r) continue;
      const std::string base =
          r == Residence::Hoisted ? p.params->text(k.inputs[o].storage_offset) : fmt::format("b{}", o);
      out += fmt::format("{}{} x{}[{}][{}];\n", indent, dtype_c_type(k.inputs[o].dtype), o, p.chunks, p.vec);
      out += chunk_loop(p, load_chunk(k, p, o, base, fmt::format("x{}[s]", o), indent + "    "), indent, true);
    }
    return out;
  };
  f += declare_cache(Residence::Hoisted, "  ");
  const bool parity = warps > 1 && p.passes > 0;
  if (parity) f += "  int parity = 0;\n";
  if (p.warp_mode)
    f += fmt::format("  for (idx_t row = blockIdx.x * {0} + (threadIdx.x >> 5); row < {1}; "
                     "row += gridDim.x * {0}) {{\n", p.block / 32, p.params->text(p.rows));
  else
    f += fmt::format("  for (idx_t row = blockIdx.x; row < {}; row += gridDim.x) {{\n", p.params->text(p.rows));
  f += coordinate_decls(p.outer, p.touched, "row", "r", "    ", *p.params);
  for (size_t o = 0; o < n_ops; ++o)
    if (p.touched[o] && (o >= n_in || (p.residence[o] != Residence::Hoisted && !p.gathered[o])))
      f += fmt::format("    const idx_t b{} = {};\n", o, row_base(k, p, o));
  // Each gather's index (a per-row load) is loaded and checked before its row is read, and moves the row base.
  std::vector<bool> done(k.exprs.size(), false);
  for (int g : p.gathers) {
    const Expr& e = k.exprs[g];
    const int index = e.args[0], io = k.exprs[index].operand;
    if (!done[index]) f += "    " + expr_statement(k, index, fmt::format("in{}[b{}]", io, io)) + "\n";
    done[index] = true;
    f += "    " + gather_check(k, g, p.params->text(e.gather.size)) + "\n";
    const std::string base = row_base(k, p, e.operand);
    f += fmt::format("    const idx_t b{} = {}(idx_t){} * {};\n", e.operand, base == "0" ? "" : base + " + ",
                     value_name(index), p.params->text(e.gather.stride));
  }
  f += declare_cache(Residence::Cached, "    ");
  auto uniform_values = [&](int level) {
    std::string out;
    for (size_t i = 0; i < k.exprs.size(); ++i) {
      const Expr& e = k.exprs[i];
      if (!p.live[i] || !p.uniform[i] || p.level[i] != level || is_reduce(e.op) || done[i]) continue;
      const std::string loaded = reads_input(e.op) ? fmt::format("in{}[b{}]", e.operand, e.operand) : "";
      out += "    " + expr_statement(k, static_cast<int>(i), loaded) + "\n";
    }
    return out;
  };
  f += uniform_values(0);
  for (int level = 1; level <= p.passes; ++level) {
    std::string per_element, reduce, finish;
    for (size_t i = 0; i < k.exprs.size(); ++i) {
      const Expr& e = k.exprs[i];
      if (!p.live[i] || !is_reduce(e.op) || p.level[i] != level) continue;
      const DType acc = accumulator(e.dtype);
      const std::string a = "a" + std::to_string(i);
      const std::string arg =
          convert(e.dtype, acc, convert(k.exprs[e.args[0]].dtype, e.dtype, value_name(e.args[0])));
      f += fmt::format("    {} {} = {};\n", value_type(acc), a, reduce_init(e.op, e.dtype));
      per_element += fmt::format("          {} = {}({}, {});\n", a, reduce_functor(e.op), a, arg);
      reduce += fmt::format("    {} = fc_warp_reduce({}, {});\n", a, a, reduce_functor(e.op));
      if (warps > 1) {
        reduce += fmt::format("    if ((t & 31) == 0) s{}[parity][t >> 5] = {};\n", i, a);
        finish += fmt::format("    {} = fc_slots_reduce<{}>(s{}[parity], {});\n", a, warps, i, reduce_functor(e.op));
      }
      finish += fmt::format("    const {} {} = {};\n", value_type(e.dtype), value_name(static_cast<int>(i)),
                            convert(acc, e.dtype, a));
    }
    f += pass_text(k, p, passes[level - 1], per_element, false, {}) + reduce;
    if (warps > 1) f += "    __syncthreads();\n";
    f += finish + uniform_values(level);
  }
  std::string per_element, per_row;
  std::vector<int> vector_outputs;
  for (const Store& s : k.stores) {
    const size_t o = n_in + s.output;
    if (p.row_stride[o] == 0) {
      per_row += fmt::format("    if (t == 0) out{}[b{}] = {};\n", s.output, o, stored_value(k, s));
    } else if (p.vector_ok[o]) {
      vector_outputs.push_back(s.output);
      per_element += fmt::format("          z{}[u] = {};\n", s.output, stored_value(k, s));
    } else {
      const Size& rs = p.row_stride[o];
      per_element += fmt::format("          out{}[b{} + (j + u){}] = {};\n", s.output, o,
                                 rs == 1 ? "" : " * " + p.params->text(rs), stored_value(k, s));
    }
  }
  if (!passes[p.passes].empty() || !per_element.empty())
    f += pass_text(k, p, passes[p.passes], per_element, true, vector_outputs);
  f += per_row;
  if (parity) f += "    parity ^= 1;\n";
  return f + "  }\n}\n\n";
}

}  // namespace

KernelSource emit_row_reduce(const Kernel& k, const DeviceLimits& limits) {
  RowPlan p;
  SizeParams params;
  p.params = &params;
  p.len = k.shape.back();
  const Sizes outer_shape(k.shape.begin(), k.shape.end() - 1);
  p.rows = numel(outer_shape);
  std::vector<Strides> outer_strides, strides;
  for (size_t o = 0; o < k.inputs.size() + k.outputs.size(); ++o) {
    const Strides& s = operand(k, o).strides;
    strides.push_back(s);
    outer_strides.emplace_back(s.begin(), s.end() - 1);
    p.row_stride.push_back(s.back());
  }
  p.outer = collapse(outer_shape, outer_strides);
  p.live = live_exprs(k);
  std::vector<bool> along_row(k.inputs.size());
  for (size_t o = 0; o < k.inputs.size(); ++o) along_row[o] = p.row_stride[o] != 0;
  ReductionLevels levels = reduction_levels(k, along_row);
  p.uniform = std::move(levels.uniform);
  p.level = std::move(levels.level);
  for (size_t i = 0; i < k.exprs.size(); ++i)
    if (p.live[i]) p.passes = std::max(p.passes, p.level[i]);
  for (const Store& s : k.stores)
    if (p.row_stride[k.inputs.size() + s.output] == 0 && !p.uniform[s.expr])
      throw std::invalid_argument(fmt::format("emit_cuda: kernel '{}': out{} holds one value per row but e{} varies "
                                              "along the row", k.name, s.output, s.expr));
  p.gathered.assign(k.inputs.size(), false);
  for (size_t i = 0; i < k.exprs.size(); ++i)
    if (p.live[i] && k.exprs[i].op == ExprOp::Gather) {
      p.gathers.push_back(static_cast<int>(i));
      p.gathered[k.exprs[i].operand] = true;
    }
  for (int g : p.gathers) {
    const Expr& index = k.exprs[k.exprs[g].args[0]];
    if (index.op != ExprOp::Load || p.row_stride[index.operand] != 0)
      throw std::invalid_argument(fmt::format("emit_cuda: kernel '{}': e{} gathers with an index that is not one "
                                              "load per row", k.name, g));
    for (size_t i = 0; i < k.exprs.size(); ++i)
      if (p.live[i] && int(i) != g && reads_input(k.exprs[i].op) && k.exprs[i].operand == k.exprs[g].operand)
        throw std::invalid_argument(fmt::format("emit_cuda: kernel '{}': in{} is gathered by e{} and read by e{} too",
                                                k.name, k.exprs[g].operand, g, i));
  }
  p.pass_exprs = pass_exprs(k, p);
  choose_shape(k, limits, p);
  p.touched.assign(strides.size(), false);
  for (size_t i = 0; i < k.exprs.size(); ++i)
    if (p.live[i] && reads_input(k.exprs[i].op)) p.touched[k.exprs[i].operand] = true;
  for (const Store& s : k.stores) p.touched[k.inputs.size() + s.output] = true;

  const int rows_per_block = p.block / p.threads;
  const int64_t grid = p.grid;
  const bool dynamic_grid = !p.rows.is_static();
  KernelSource src = source_for(k, p.block, dynamic_grid ? p.grid_cap : grid);
  if (dynamic_grid) {
    src.grid_items = p.rows.sym();
    src.items_per_block = rows_per_block;
  }

  const bool wide = wide_indices(
      k, std::max(p.rows.hint() + 2 * grid * rows_per_block, p.len.hint() + 2 * int64_t{p.threads} * p.vec));
  const std::string idx_decl = index_type_decl(wide);

  std::string& code = src.code;
  code = fmt::format("// {}: row reduce over [{}], {} rows of {}, one {} of {} threads per row, {} x {} elements per "
                     "thread {}, {} pass{}, {} indices\n",
                     k.name, join(k.shape), p.rows.to_string(), p.len.to_string(), p.warp_mode ? "warp" : "block",
                     p.threads,
                     p.cached ? std::to_string(p.chunks)
                     : p.len.is_static() ? std::to_string(ceil_div(p.len.hint(), int64_t{p.threads} * p.vec))
                                         : "(" + p.len.to_string() + ")/" + std::to_string(p.threads * p.vec),
                     p.vec,
                     p.cached ? "in registers" : "streamed", p.passes + 1, p.passes ? "es" : "",
                     wide ? "64-bit" : "32-bit");
  code += rows_function(k, p, idx_decl);
  code += fmt::format("extern \"C\" __global__ void __launch_bounds__({}) {}({}) {{\n", p.block, k.name,
                      kernel_params(k));
  for (size_t o = 0; o < strides.size(); ++o) {
    const bool per_element = o < k.inputs.size() ? p.residence[o] != Residence::Unused : p.row_stride[o] != 0;
    if (p.touched[o] && per_element && p.vector_ok[o] && p.vec > 1) add_vector_operand(src, k, o, p.vec);
  }
  code += fmt::format("  {}_rows<{}>({});\n", k.name, src.vector_operands.empty() ? "false" : "kVectorAccess",
                      kernel_args(k));
  code += "}\n";
  src.size_params = params.exprs();
  return src;
}

}  // namespace fastcomp::codegen::detail
