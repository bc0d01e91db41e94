// Pointwise kernels: a grid-stride loop over the flattened (collapsed) iteration space.
//
// When every operand keeps groups of `vec` consecutive elements together (contiguous over the space, fully
// broadcast, or contiguous/broadcast along an innermost dimension that `vec` divides), each thread handles
// 16 bytes of the widest dtype per group: one vector load per operand, `vec` scalar evaluations, one vector
// store (and one or two groups per step, loads first). The group's offsets don't depend on pointer
// alignment, so the same loop is instantiated twice, with vector or scalar memory accesses, and the kernel picks
// one from its pointers (a uniform branch).
// Leftover elements (when `vec` does not divide the element count) go through the scalar loop.
//
// Ranges (inputs readable in part of the space, InRange; see kernel_ir.h) keep their dimension apart in the
// collapsed space and are tested on its coordinate. The vector loop tests them once per group, so it is used only
// where every group lies wholly inside or outside each range: groups never cross a row of the innermost dimension,
// and a range on that dimension starts and ends at multiples of `vec`. Otherwise the scalar loop does everything.
//
// Gathers (indirect loads, embedding's weight[idx[...], d]) read their element only after their index is checked.
// The vector loop takes a kernel with gathers only where each gather's index is a plain load that is the same for
// the whole group (embedding's index along a row of the table): the group's index is loaded and checked, then
// the gathered operand's group read with one vector load from the row it picks. Otherwise (an index varying
// within a group, as x.gather(1, idx) along the last dimension, or computed) the scalar loop does everything,
// computing and checking each element's index before reading its element.
#include <fmt/format.h>

#include <algorithm>
#include <functional>

#include "codegen/emit_internal.h"
#include "codegen/expr_emitter.h"
#include "codegen/layout.h"

namespace fastcomp::codegen::detail {
namespace {

constexpr int kBlock = 256;
// Each thread loads kElementsPerStep elements per step: kElementsPerStep / vec groups (1 or 2), loads first.
// Measured on an H200 with 8 waves: f32 (vec 4) runs best with 2 groups (W2: 35.8 µs against 37.5 with one),
// f16/bf16 (vec 8) with 1 (W4's gelu+residual 14.2 against 16.0 µs, W9's silu*up 9.6 against 10.4), and every
// group is another inlined copy of the expression, which NVVM and ptxas pay for: one group instead of two took
// W4's and W9's programs from 179 and 225 to 152 and 142 ms on the H200's host.
constexpr int kElementsPerStep = 8;
constexpr int kMaxGroupsPerThread = 2;
constexpr int kWaves = 8;  // grid size in resident waves

// How an operand is read or written in the vector loop.
enum class Lane : uint8_t {
  Vector,  // `vec` consecutive elements
  Shared,  // one element for the whole group
};

struct Plan {
  Collapsed space;              // operands: inputs then outputs
  std::vector<bool> live;       // expressions some store needs
  std::vector<bool> used;       // operands the kernel touches (inputs read by a live Load or Gather, stored outputs)
  std::vector<bool> loaded;     // inputs read by a live Load
  std::vector<DimRange> ranges; // of used inputs and live InRange expressions, where they restrict anything
  std::vector<bool> range_dims; // per dimension of space.shape: one a range is on
  std::vector<int> gathers;     // live Gather expressions
  int vec = 1;                  // elements per vector step; 1 = scalar loop only
  int groups = 1;               // vector groups a thread takes per step
  std::vector<Lane> lanes;      // per operand, when vec > 1
  Size n = 0;                   // elements
  SizeParams* params = nullptr; // the kernel's size parameters (dynamic shapes)
  // The block's index in the grid and the grid's size as the loops read them: CUDA's own, or a combo part's
  // parameters (its blocks are a range of the combo's grid).
  std::string block_index = "blockIdx.x", grid_size = "gridDim.x";
  std::string part_params, part_args;  // ", const unsigned fc_block, const unsigned fc_grid" for a part
};

// Whether every group of `vec` elements lies wholly inside or outside each range, for every size.
bool groups_respect_ranges(const Kernel& k, const Plan& p, int vec) {
  const Sizes& shape = p.space.shape;
  if (p.ranges.empty()) return true;
  if (shape.size() > 1 && !known_multiple(shape.back(), vec)) return false;  // a group would cross rows
  for (const DimRange& r : p.ranges) {
    if (p.space.dim_of[r.dim] != static_cast<int>(shape.size()) - 1) continue;  // constant over a group
    // The space's start and end are group boundaries already (a 1-D tail goes to the scalar loop).
    if ((r.begin != 0 && !known_multiple(r.begin, vec)) || (r.end != k.shape[r.dim] && !known_multiple(r.end, vec)))
      return false;
  }
  return true;
}

// Groups of `vec` elements, when every used operand allows them: sets the lane each operand takes (and p.vec when
// some lane is a vector) and returns true; false when some operand does not.
bool try_vector(const Kernel& k, Plan& p, int vec) {
  const Sizes& shape = p.space.shape;
  if (vec == 1 || (p.n.is_static() && p.n.hint() < vec) || !groups_respect_ranges(k, p, vec)) return false;
  p.lanes.assign(p.used.size(), Lane::Shared);
  for (size_t o = 0; o < p.used.size(); ++o) {
    if (!p.used[o]) continue;
    switch (classify(p.space, o)) {
      case Access::Contiguous: p.lanes[o] = Lane::Vector; break;
      case Access::Broadcast: p.lanes[o] = Lane::Shared; break;
      case Access::Strided: {
        const Strides& s = p.space.strides[o];
        // Only facts true for every size: a symbolic innermost dimension vectorises when it is a multiple of vec.
        if (!known_multiple(shape.back(), vec) || (s.back() != 0 && s.back() != 1)) return false;
        for (size_t d = 0; d + 1 < s.size(); ++d)
          if (s.back() == 1 && !known_multiple(s[d], vec)) return false;  // a group's start must stay vector-aligned
        p.lanes[o] = s.back() == 1 ? Lane::Vector : Lane::Shared;
      }
    }
    // The alignment test reads the pointer at the first valid element: a group's start must be vector-aligned
    // from there.
    const DimRange& valid = operand(k, o).valid;
    if (p.lanes[o] == Lane::Vector && valid.dim >= 0 &&
        !known_multiple(valid.begin * operand(k, o).strides[valid.dim], vec))
      return false;
  }
  // A gather joins the vector loop when its index is one plain load for the whole group and its rows start at
  // group boundaries (see the top of the file).
  for (int g : p.gathers) {
    const Expr& e = k.exprs[g];
    const Expr& index = k.exprs[e.args[0]];
    if (index.op != ExprOp::Load || index.dtype != k.inputs[index.operand].dtype ||
        k.inputs[index.operand].valid.dim >= 0 || p.lanes[index.operand] != Lane::Shared)
      return false;
    if (p.lanes[e.operand] == Lane::Vector && !known_multiple(e.gather.stride, vec)) return false;
  }
  // Groups pay off only through vector accesses; with none (everything broadcast) stay scalar.
  if (std::find(p.lanes.begin(), p.lanes.end(), Lane::Vector) != p.lanes.end()) p.vec = vec;
  p.groups = std::clamp(kElementsPerStep / p.vec, 1, kMaxGroupsPerThread);
  return true;
}

// The widest group size every used operand allows, with the lane each operand takes; vec = 1 when none does.
// Groups are 16 bytes of the widest operand that varies along the innermost dimension: one that does not (a
// broadcast, an embedding's i64 index along a row of the table) is one element per group whatever its width.
// Where those groups do not fit (a row length of 6 and groups of 4), 16 bytes of the widest operand of all.
void choose_vector(const Kernel& k, Plan& p) {
  int widest_varying = 1, widest = 1;
  for (size_t o = 0; o < p.used.size(); ++o) {
    if (!p.used[o]) continue;
    const Access a = classify(p.space, o);
    const bool shared = a == Access::Broadcast || (a == Access::Strided && p.space.strides[o].back() == 0);
    widest = std::max(widest, dtype_size(operand(k, o).dtype));
    if (!shared) widest_varying = std::max(widest_varying, dtype_size(operand(k, o).dtype));
  }
  if (!try_vector(k, p, 16 / widest_varying) && widest != widest_varying) try_vector(k, p, 16 / widest);
}

// The condition under which input o may be read, on the coordinates named c<d>; "" for everywhere.
std::string guard(const Kernel& k, const Plan& p, size_t o) {
  return range_condition(p.space, k.inputs[o].valid, k.shape, "c", *p.params);
}

// Statements computing every live expression of one element, given the text of each input's element and, in the
// vector loop, of each Gather's (`gathered`; empty: the scalar loop reads and checks them here).
template <typename LoadText>
std::string element_statements(const Kernel& k, const Plan& p, LoadText load, const std::string& row_index,
                               const std::string& indent,
                               const std::function<std::string(int)>& gathered = nullptr) {
  // In the vector loop a gather's index was used by its group's loads already: what only it needs is not computed.
  std::vector<bool> live = p.live;
  if (gathered) {
    std::fill(live.begin(), live.end(), false);
    for (const Store& s : k.stores) live[s.expr] = true;
    for (size_t i = k.exprs.size(); i-- > 0;)
      if (live[i] && k.exprs[i].op != ExprOp::Gather)
        for (int a : k.exprs[i].args) live[a] = p.live[a];
  }
  std::string out;
  for (size_t i = 0; i < k.exprs.size(); ++i) {
    if (!live[i]) continue;
    const Expr& e = k.exprs[i];
    std::string leaf, when;
    if (e.op == ExprOp::Load) {
      leaf = load(e.operand);
      when = guard(k, p, e.operand);
    }
    if (e.op == ExprOp::Gather && gathered) {
      leaf = gathered(static_cast<int>(i));  // loaded (and its index checked) with the group's loads
    } else if (e.op == ExprOp::Gather) {
      // The scalar loop: the element is linear index i.
      const std::string at =
          offset_text(p.space, e.operand, "i", "c", k.inputs[e.operand].storage_offset, *p.params);
      leaf = fmt::format("in{}[{} + (idx_t){} * {}]", e.operand, at, value_name(e.args[0]),
                         p.params->text(e.gather.stride));
      out += indent + gather_check(k, static_cast<int>(i), p.params->text(e.gather.size)) + "\n";
    }
    if (e.op == ExprOp::RowIndex) leaf = row_index;
    if (e.op == ExprOp::InRange) leaf = range_condition(p.space, e.range, k.shape, "c", *p.params);
    out += indent + expr_statement(k, static_cast<int>(i), leaf, when) + "\n";
  }
  return out;
}

// Per input, the register array its vector groups are loaded into: its own, or an earlier input's when both are
// pieces of a cat -- loaded inputs with ranges over the same dimension (which no group straddles) that are
// disjoint, so that each group reads one of them at most, and each is used only inside its own range. A cat of
// n pieces then holds one group in registers, read by one load from the piece whose range the group is in: W9's
// rotary line (x's halves swapped) took 47 registers a thread with an array and a load per half, 32 with one of
// each, the difference between 5 and 8 resident blocks of 256 threads.
struct RegisterArrays {
  std::vector<int> of;                     // per input: the input whose array it uses (itself, or an earlier one)
  std::vector<std::vector<size_t>> pieces; // per input that owns an array: the inputs loaded into it, in order
};
RegisterArrays register_arrays(const Kernel& k, const Plan& p) {
  const size_t n_in = k.inputs.size();
  RegisterArrays a{std::vector<int>(n_in), std::vector<std::vector<size_t>>(n_in)};
  auto disjoint = [](const DimRange& x, const DimRange& y) {
    return known_ge(y.begin, x.end) || known_ge(x.begin, y.end);
  };
  for (size_t o = 0; o < n_in; ++o) {
    a.of[o] = static_cast<int>(o);
    if (!p.loaded[o] || p.lanes[o] != Lane::Vector) continue;
    const DimRange& r = k.inputs[o].valid;
    if (!guard(k, p, o).empty())
      for (size_t j = 0; j < o; ++j) {
        const std::vector<size_t>& pieces = a.pieces[j];
        if (pieces.empty() || guard(k, p, j).empty() || k.inputs[j].dtype != k.inputs[o].dtype) continue;
        bool fits = true;
        for (size_t m : pieces) fits = fits && k.inputs[m].valid.dim == r.dim && disjoint(k.inputs[m].valid, r);
        if (fits) {
          a.of[o] = static_cast<int>(j);
          break;
        }
      }
    a.pieces[a.of[o]].push_back(o);
  }
  return a;
}

// The loop over groups of p.vec elements, as a template on whether the pointers allow vector accesses. Each
// thread takes p.groups groups one grid apart per step and issues all their loads before computing, so
// several 16-byte loads per thread are in flight.
std::string vector_function(const Kernel& k, const Plan& p, const std::string& idx_decl) {
  const size_t n_in = k.inputs.size();
  const std::string v = std::to_string(p.vec), groups = std::to_string(p.groups);
  const std::string n_groups = p.params->text(floordiv(p.n, p.vec));
  // The loop over this step's groups, with the first element's index and coordinates where `operands` need them.
  auto each_group = [&](const std::vector<bool>& operands, const std::vector<bool>& dims, bool needs_index) {
    for (size_t o = 0; o < operands.size(); ++o)
      needs_index |= operands[o] && classify(p.space, o) != Access::Broadcast;
    for (bool d : dims) needs_index |= d;
    return fmt::format("#pragma unroll\n    for (int w = 0; w < {}; ++w) {{\n"
                       "      const idx_t v = v0 + w * step;\n      if (v < {}) {{\n", groups, n_groups) +
           (needs_index ? fmt::format("        const idx_t i = v * {};\n", v) : "") +
           coordinate_decls(p.space, operands, "i", "c", "        ", *p.params, dims);
  };
  std::vector<bool> inputs = p.used, outputs = p.used;
  std::fill(inputs.begin() + n_in, inputs.end(), false);
  std::fill(outputs.begin(), outputs.begin() + n_in, false);
  bool row_index = false;
  for (size_t i = 0; i < k.exprs.size(); ++i) row_index |= p.live[i] && k.exprs[i].op == ExprOp::RowIndex;
  // Coordinates the loads' guards test; the computing loop needs every range's (guarded values, InRange).
  std::vector<bool> guard_dims(p.space.shape.size(), false);
  for (size_t o = 0; o < n_in; ++o) {
    const int d = k.inputs[o].valid.dim;
    if (p.used[o] && d >= 0 && p.space.dim_of[d] >= 0 && p.range_dims[p.space.dim_of[d]])
      guard_dims[p.space.dim_of[d]] = true;
  }
  std::string body = fmt::format(
      "template <bool kVector>\n"
      "__device__ __forceinline__ void {}_groups({}{}) {{\n"
      "  {}\n"
      "  const idx_t step = {} * blockDim.x;\n"
      "  for (idx_t v0 = {} * blockDim.x + threadIdx.x; v0 < {}; v0 += {} * step) {{\n",
      k.name, kernel_params(k), p.part_params, idx_decl, p.grid_size, p.block_index, n_groups, groups);
  auto offset = [&](size_t o) {
    return offset_text(p.space, o, "i", "c", operand(k, o).storage_offset, *p.params);
  };
  std::string loads;
  const RegisterArrays arrays = register_arrays(k, p);
  for (size_t o = 0; o < n_in; ++o) {
    if (!p.loaded[o]) continue;  // a gathered-only operand is read below
    const char* t = dtype_c_type(k.inputs[o].dtype);
    // Outside its range an input is not read; its value there is 0 (expr_statement), so the registers stay unset.
    const std::string when = guard(k, p, o);
    const std::string at = when.empty() ? "        " : "        if " + when + " ";
    if (p.lanes[o] == Lane::Vector) {
      const std::vector<size_t>& pieces = arrays.pieces[o];
      if (pieces.empty()) continue;  // loaded into an earlier piece's array
      body += fmt::format("    {} a{}[{}][{}];\n", t, o, groups, v);
      if (pieces.size() == 1) {
        loads += fmt::format("{}fc_load<{}, kVector>(in{} + {}, a{}[w]);\n", at, v, o, offset(o), o);
        continue;
      }
      // A cat's pieces: one load, when some piece's range holds the group, from that piece (the ranges are
      // tested in order; past the others only the last piece is left, so its pointer needs no test).
      std::string any, from = fmt::format("in{} + {}", pieces.back(), offset(pieces.back()));
      for (size_t i = pieces.size(); i-- > 0;) {
        any = guard(k, p, pieces[i]) + (any.empty() ? "" : " || " + any);
        if (i + 1 < pieces.size())
          from = fmt::format("{} ? in{} + {} : {}", guard(k, p, pieces[i]), pieces[i], offset(pieces[i]), from);
      }
      loads += fmt::format("        if ({}) fc_load<{}, kVector>({}, a{}[w]);\n", any, v, from, o);
    } else {
      body += fmt::format("    {} a{}[{}];\n", t, o, groups);
      loads += fmt::format("{}a{}[w] = in{}[{}];\n", at, o, o, offset(o));
    }
  }
  // Each gather's group: its index (a shared plain load, choose_vector) checked, then its row's elements.
  for (int g : p.gathers) {
    const Expr& e = k.exprs[g];
    const int o = e.operand;
    const std::string index = fmt::format("a{}[w]", k.exprs[e.args[0]].operand);
    const std::string at = fmt::format("in{} + {} + (idx_t){} * {}", o, offset(o), index,
                                       p.params->text(e.gather.stride));
    loads += fmt::format("        if ({0} < 0 || {0} >= {1}) __trap();\n", index, p.params->text(e.gather.size));
    const char* t = dtype_c_type(k.inputs[o].dtype);
    if (p.lanes[o] == Lane::Vector) {
      body += fmt::format("    {} g{}[{}][{}];\n", t, g, groups, v);
      loads += fmt::format("        fc_load<{}, kVector>({}, g{}[w]);\n", v, at, g);
    } else {
      body += fmt::format("    {} g{}[{}];\n", t, g, groups);
      loads += fmt::format("        g{}[w] = *({});\n", g, at);
    }
  }
  body += each_group(inputs, guard_dims, false) + loads + "      }\n    }\n" +
          each_group(outputs, p.range_dims, row_index);
  for (const Store& s : k.stores)
    body += fmt::format("        {} r{}[{}];\n", dtype_c_type(k.outputs[s.output].dtype), s.output, v);
  body += fmt::format("#pragma unroll\n        for (int u = 0; u < {}; ++u) {{\n", v);
  auto load = [&](int o) {
    return "a" + std::to_string(arrays.of[o]) + (p.lanes[o] == Lane::Vector ? "[w][u]" : "[w]");
  };
  auto gathered = [&](int g) {
    return "g" + std::to_string(g) + (p.lanes[k.exprs[g].operand] == Lane::Vector ? "[w][u]" : "[w]");
  };
  body += element_statements(k, p, load, "(int64_t)(i + u)", "          ", gathered);
  for (const Store& s : k.stores) body += fmt::format("          r{}[u] = {};\n", s.output, stored_value(k, s));
  body += "        }\n";
  for (const Store& s : k.stores)
    body += fmt::format("        fc_store<{}, kVector>(out{} + {}, r{});\n", v, s.output, offset(n_in + s.output),
                        s.output);
  return body + "      }\n    }\n  }\n}\n\n";
}

// A grid-stride loop over elements [first, n), one at a time.
std::string scalar_loop(const Kernel& k, const Plan& p, const Size& first) {
  std::string out = fmt::format(
      "  for (idx_t i = {}{} * blockDim.x + threadIdx.x; i < {}; i += {} * blockDim.x) {{\n",
      first != 0 ? p.params->text(first) + " + " : "", p.block_index, p.params->text(p.n), p.grid_size);
  out += coordinate_decls(p.space, p.used, "i", "c", "    ", *p.params, p.range_dims);
  const size_t n_in = k.inputs.size();
  auto load = [&](int o) {
    return fmt::format("in{}[{}]", o, offset_text(p.space, o, "i", "c", k.inputs[o].storage_offset, *p.params));
  };
  out += element_statements(k, p, load, "(int64_t)i", "    ");
  for (const Store& s : k.stores)
    out += fmt::format("    out{}[{}] = {};\n", s.output,
                       offset_text(p.space, n_in + s.output, "i", "c", k.outputs[s.output].storage_offset,
                                   *p.params),
                       stored_value(k, s));
  return out + "  }\n";
}

// The order to walk the space in: its dimensions by the first output's strides, largest first, so that
// consecutive threads touch consecutive memory when every tensor is laid out alike but not row-major (a
// channels-last [N, C, H, W]: C innermost, where row-major order would step by C). Only for kernels whose
// expressions do not depend on the order (no flat index, range or gather) and static strides; the identity
// otherwise, and where the output is row-major already.
std::vector<size_t> memory_order(const Kernel& k) {
  std::vector<size_t> order(k.shape.size());
  for (size_t d = 0; d < order.size(); ++d) order[d] = d;
  if (k.outputs.empty()) return order;
  for (const Expr& e : k.exprs)
    if (e.op == ExprOp::RowIndex || e.op == ExprOp::InRange || e.op == ExprOp::Gather) return order;
  for (const Operand& o : k.inputs)
    if (o.valid.dim >= 0) return order;
  const Strides& out = k.outputs[0].strides;
  for (const Size& s : out)
    if (!s.is_static()) return order;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const bool a_one = k.shape[a] == 1, b_one = k.shape[b] == 1;  // size-1 dimensions are dropped anyway
    return !a_one && !b_one && out[a].hint() > out[b].hint();
  });
  return order;
}

template <class T>
std::vector<T> permuted(const std::vector<T>& v, const std::vector<size_t>& order) {
  std::vector<T> out;
  for (size_t d : order) out.push_back(v[d]);
  return out;
}

}  // namespace

KernelSource emit_pointwise(const Kernel& original, const DeviceLimits& limits, bool as_combo_part) {
  const std::vector<size_t> order = memory_order(original);
  Kernel walked = original;
  walked.shape = permuted(original.shape, order);
  for (Operand& o : walked.inputs) o.strides = permuted(o.strides, order);
  for (Operand& o : walked.outputs) o.strides = permuted(o.strides, order);
  const Kernel& k = walked;
  if (!as_combo_part)
    if (std::optional<KernelSource> tiled = emit_transposing_pointwise(k, limits)) return *std::move(tiled);
  Plan p;
  if (as_combo_part) {
    p.block_index = "fc_block";
    p.grid_size = "fc_grid";
    p.part_params = ", const unsigned fc_block, const unsigned fc_grid";
    p.part_args = ", fc_block, fc_grid";
  }
  SizeParams params;
  p.params = &params;
  std::vector<Strides> strides;
  for (const Operand& o : k.inputs) strides.push_back(o.strides);
  for (const Operand& o : k.outputs) strides.push_back(o.strides);
  p.n = numel(k.shape);
  p.live = live_exprs(k);
  p.used.assign(strides.size(), false);
  p.loaded.assign(k.inputs.size(), false);
  for (size_t i = 0; i < k.exprs.size(); ++i) {
    if (!p.live[i]) continue;
    const Expr& e = k.exprs[i];
    if (e.op == ExprOp::Load || e.op == ExprOp::Gather) p.used[e.operand] = true;
    if (e.op == ExprOp::Load) p.loaded[e.operand] = true;
    if (e.op == ExprOp::Gather) p.gathers.push_back(static_cast<int>(i));
    if (e.op == ExprOp::InRange && restricts(e.range, k.shape)) p.ranges.push_back(e.range);
  }
  for (size_t o = 0; o < k.inputs.size(); ++o)
    if (p.used[o] && restricts(k.inputs[o].valid, k.shape)) p.ranges.push_back(k.inputs[o].valid);
  for (const Store& s : k.stores) p.used[k.inputs.size() + s.output] = true;
  std::vector<bool> kept(k.shape.size(), false);
  for (const DimRange& r : p.ranges) kept[r.dim] = true;
  p.space = collapse(k.shape, strides, kept);
  p.range_dims.assign(p.space.shape.size(), false);
  for (const DimRange& r : p.ranges)
    if (p.space.dim_of[r.dim] >= 0) p.range_dims[p.space.dim_of[r.dim]] = true;
  choose_vector(k, p);

  // A grid-stride loop over a few waves of resident blocks (fewer when the work is small): enough blocks that
  // the block scheduler evens out the tail, few enough that each thread streams several steps. With a symbolic
  // element count the block is full size and the grid is sized per call by the same rule.
  const bool dynamic = !p.n.is_static();
  const int64_t items = ceil_div(p.n.hint(), p.vec);
  // A combo's parts run in blocks of the combo's one size.
  const int block = dynamic || as_combo_part
                        ? kBlock
                        : static_cast<int>(std::min<int64_t>(kBlock, std::max<int64_t>(32, ceil_div(items, 32) * 32)));
  const int64_t resident = int64_t{limits.sm_count} * std::max(1, limits.max_threads_per_sm / block);
  const int64_t blocks_needed = ceil_div(items, int64_t{block} * p.groups);
  const int64_t grid = dynamic ? resident * kWaves : std::max<int64_t>(1, std::min(blocks_needed, resident * kWaves));
  KernelSource src = source_for(k, block, grid);
  if (dynamic) {
    src.grid_items = floordiv(p.n + (p.vec - 1), p.vec).sym();
    src.items_per_block = int64_t{block} * p.groups;
  }

  // Loop variables overshoot n by one step of the grid at most.
  const bool wide = wide_indices(k, p.n.hint() + 2 * grid * block * p.vec * p.groups);
  const std::string idx_decl = index_type_decl(wide);

  std::string& code = src.code;
  code = fmt::format("// {}: pointwise over [{}] (iteration space [{}]), {}, {} indices\n", k.name,
                     join(p.space.shape), join(k.shape),
                     p.vec > 1 ? fmt::format("groups of {} elements, {} per thread and step", p.vec, p.groups)
                               : std::string("one element per thread and step"),
                     wide ? "64-bit" : "32-bit");
  if (p.vec > 1) code += vector_function(k, p, idx_decl);
  if (as_combo_part)
    // Not inlined: the combo calls it once a block, and parts of one code (every layer's cast) share one copy of
    // its machine code, as kernels of one code do (NVRTC's time grows with the code it compiles).
    code += fmt::format("__device__ __noinline__ void {}({}{}) {{\n  {}\n", k.name, kernel_params(k),
                        p.part_params, idx_decl);
  else
    code += fmt::format("extern \"C\" __global__ void __launch_bounds__({}) {}({}) {{\n  {}\n", block, k.name,
                        kernel_params(k), idx_decl);
  if (p.vec > 1) {
    for (size_t o = 0; o < p.used.size(); ++o)
      if (p.used[o] && p.lanes[o] == Lane::Vector) add_vector_operand(src, k, o, p.vec);
    code += fmt::format("  {}_groups<kVectorAccess>({}{});\n", k.name, kernel_args(k), p.part_args);
  }
  const Size first_scalar = p.vec > 1 ? floordiv(p.n, p.vec) * p.vec : Size(0);
  if (first_scalar != p.n) code += scalar_loop(k, p, first_scalar);
  code += "}\n";
  src.size_params = params.exprs();
  return src;
}

}  // namespace fastcomp::codegen::detail
