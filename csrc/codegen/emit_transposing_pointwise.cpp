// Pointwise kernels that read some input across its memory order: its unit-stride dimension is not the output's
// (a weight copied from NCHW to NHWC for a channels-last convolution, x.t().contiguous(), a permute before a
// layer norm). The grid-stride loop walks the output's order, so such an input is read one element per 32-byte
// sector: ResNet-18's 17 NHWC weight copies took about 65 us a call on an H200 this way, against 20 us for
// torch.compile's tiled Triton kernels.
//
// Here each block takes a tile of TA x TB elements over two dimensions of the collapsed space: A, the transposed
// inputs' unit-stride dimension, and B, the outputs' (the last one, as the space is walked in the output's
// order), at one coordinate of every other dimension. It first reads the tile of each transposed input with
// consecutive threads along A into shared memory, then computes and stores every element with consecutive threads
// along B, taking those inputs' elements from shared memory and reading the others where they are (along B, or
// broadcast). Both global passes are coalesced; the tile's rows are padded by one element so that the column walk
// of the second pass does not hit one bank.
//
// Each element is read before it is written by the block that owns it, so an output aliasing an input element for
// element (an in-place op) stays correct.
#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "codegen/emit_internal.h"
#include "codegen/expr_emitter.h"
#include "codegen/layout.h"

namespace fastcomp::codegen::detail {
namespace {

constexpr int kMaxBlock = 256;
constexpr int64_t kTileElements = 1024;  // 4 elements a thread per pass
constexpr int kMaxTiledInputs = 4;       // static shared memory stays far below 48 KB (f64: 4 x 8.4 KB)

// The tile's extent along a dimension of `size` when the other extent is `other`: 32 (a warp's worth), fewer for
// a smaller dimension, more (whole warps) when the other one is short, so that a tile holds about
// kTileElements elements.
int64_t tile_extent(int64_t size, int64_t other) {
  const int64_t other_extent = std::min<int64_t>(other, 32);
  const int64_t wanted = std::max<int64_t>(32, kTileElements / other_extent / 32 * 32);
  return std::min(size, wanted);
}

struct Transpose {
  Collapsed space;                 // operands: inputs then outputs
  int a = -1, b = -1;              // the tile's dimensions of space.shape
  int64_t ta = 0, tb = 0;          // its extents
  std::vector<bool> tiled;         // per input: read through shared memory
  std::vector<bool> loaded;        // per input: read by a live Load
};

// The plan when `k` (walked in its output's order, static) reads a loaded input across the outputs' unit-stride
// dimension; nothing otherwise.
std::optional<Transpose> plan(const Kernel& k, const std::vector<bool>& live) {
  if (k.outputs.empty() || !all_static(k.shape)) return std::nullopt;
  Transpose t;
  t.loaded.assign(k.inputs.size(), false);
  for (size_t i = 0; i < k.exprs.size(); ++i) {
    if (!live[i]) continue;
    const Expr& e = k.exprs[i];
    if (e.op == ExprOp::Gather || e.op == ExprOp::RowIndex || e.op == ExprOp::InRange) return std::nullopt;
    if (e.op == ExprOp::Load) t.loaded[e.operand] = true;
  }
  std::vector<Strides> strides;
  for (size_t o = 0; o < k.inputs.size() + k.outputs.size(); ++o) {
    const Operand& op = operand(k, o);
    if (!all_static(op.strides) || !op.storage_offset.is_static() || op.valid.dim >= 0) return std::nullopt;
    strides.push_back(op.strides);
  }
  t.space = collapse(k.shape, strides);
  const Sizes& shape = t.space.shape;
  if (shape.size() < 2) return std::nullopt;
  t.b = static_cast<int>(shape.size()) - 1;
  const size_t n_in = k.inputs.size();
  for (const Store& s : k.stores)
    if (t.space.strides[n_in + s.output][t.b] != 1) return std::nullopt;
  // A: the unit-stride dimension of the first input read across B.
  for (size_t o = 0; o < n_in && t.a < 0; ++o) {
    const Strides& s = t.space.strides[o];
    if (!t.loaded[o] || s[t.b] == 0 || s[t.b] == 1) continue;
    for (int d = 0; d < t.b; ++d)
      if (s[d] == 1) t.a = d;
  }
  if (t.a < 0) return std::nullopt;
  t.tiled.assign(n_in, false);
  int n_tiled = 0;
  for (size_t o = 0; o < n_in; ++o) {
    const Strides& s = t.space.strides[o];
    t.tiled[o] = t.loaded[o] && s[t.a] == 1 && s[t.b] != 0 && s[t.b] != 1 && n_tiled < kMaxTiledInputs;
    n_tiled += t.tiled[o];
  }
  const int64_t size_a = shape[t.a].hint(), size_b = shape[t.b].hint();
  t.ta = tile_extent(size_a, size_b);
  t.tb = tile_extent(size_b, t.ta);
  return t;
}

}  // namespace

std::optional<KernelSource> emit_transposing_pointwise(const Kernel& k, const DeviceLimits&) {
  const std::vector<bool> live = live_exprs(k);
  const std::optional<Transpose> found = plan(k, live);
  if (!found) return std::nullopt;
  const Transpose& t = *found;
  const Sizes& shape = t.space.shape;
  const size_t n_in = k.inputs.size(), n_ops = n_in + k.outputs.size();
  const int64_t size_a = shape[t.a].hint(), size_b = shape[t.b].hint();
  const int64_t tiles_a = ceil_div(size_a, t.ta), tiles_b = ceil_div(size_b, t.tb);
  int64_t grid = tiles_a * tiles_b;
  for (size_t d = 0; d < shape.size(); ++d)
    if (static_cast<int>(d) != t.a && static_cast<int>(d) != t.b) grid *= shape[d].hint();
  if (grid > INT32_MAX) return std::nullopt;
  const bool wide = wide_indices(k, numel(k.shape).hint());
  const int block = static_cast<int>(std::clamp<int64_t>(ceil_div(t.ta * t.tb, 32) * 32, 32, kMaxBlock));
  KernelSource src = source_for(k, block, grid);
  SizeParams params;  // static kernel: only literals

  // Per operand: the offset of the tile's first element (from the other dimensions' coordinates), then of an
  // element (a, b) of the tile.
  auto stride = [&](size_t o, int d) { return t.space.strides[o][d].hint(); };
  auto base = [&](size_t o) {
    std::string s = index_literal(operand(k, o).storage_offset.hint());
    for (size_t d = 0; d < shape.size(); ++d)
      if (static_cast<int>(d) != t.a && static_cast<int>(d) != t.b && stride(o, d) != 0)
        s += fmt::format(" + c{} * {}", d, index_literal(stride(o, d)));
    return s;
  };
  auto at = [&](size_t o) {
    return fmt::format("in{0}_base + (a0 + a) * {1} + (b0 + b) * {2}", o, index_literal(stride(o, t.a)),
                       index_literal(stride(o, t.b)));
  };

  std::string& code = src.code;
  code = fmt::format(
      "// {}: pointwise over [{}] (iteration space [{}]), tiles of {} x {} over dimensions {} and {} through shared "
      "memory, {} indices\n",
      k.name, join(shape), join(k.shape), t.ta, t.tb, t.a, t.b, wide ? "64-bit" : "32-bit");
  code += fmt::format("extern \"C\" __global__ void __launch_bounds__({}) {}({}) {{\n  {}\n", block, k.name,
                      kernel_params(k), index_type_decl(wide));
  constexpr const char* tile_decl = "  __shared__ {} tile{}[{}][{} + 1];\n";
  for (size_t o = 0; o < n_in; ++o)
    if (t.tiled[o]) code += fmt::format(tile_decl, dtype_c_type(k.inputs[o].dtype), o, t.tb, t.ta);
  // The block's tile: B fastest, then A, then the other dimensions, innermost first.
  code += fmt::format("  idx_t block = blockIdx.x;\n  const idx_t b0 = block % {0} * {1};\n  block /= {0};\n"
                      "  const idx_t a0 = block % {2} * {3};\n  block /= {2};\n",
                      index_literal(tiles_b), index_literal(t.tb), index_literal(tiles_a), index_literal(t.ta));
  for (size_t d = shape.size(); d-- > 0;) {
    if (static_cast<int>(d) == t.a || static_cast<int>(d) == t.b) continue;
    code += fmt::format("  const idx_t c{0} = block % {1};\n  block /= {1};\n", d, index_literal(shape[d].hint()));
  }
  for (size_t o = 0; o < n_ops; ++o) {
    const bool used = o < n_in ? static_cast<bool>(t.loaded[o]) : true;
    if (used) code += fmt::format("  const idx_t {}{}_base = {};\n", o < n_in ? "in" : "out",
                                  o < n_in ? o : o - n_in, base(o));
  }
  const std::string in_tile = fmt::format("a0 + a < {} && b0 + b < {}", index_literal(size_a), index_literal(size_b));
  // Pass 1: the transposed inputs' tiles, A fastest.
  code += fmt::format("  for (int e = threadIdx.x; e < {} * {}; e += {}) {{\n    const int a = e % {}, b = e / {};\n"
                      "    if ({}) {{\n",
                      t.ta, t.tb, block, t.ta, t.ta, in_tile);
  for (size_t o = 0; o < n_in; ++o)
    if (t.tiled[o]) code += fmt::format("      tile{0}[b][a] = in{0}[{1}];\n", o, at(o));
  code += "    }\n  }\n  __syncthreads();\n";
  // Pass 2: every element, B fastest.
  code += fmt::format("  for (int e = threadIdx.x; e < {} * {}; e += {}) {{\n    const int b = e % {}, a = e / {};\n"
                      "    if ({}) {{\n",
                      t.ta, t.tb, block, t.tb, t.tb, in_tile);
  for (size_t i = 0; i < k.exprs.size(); ++i) {
    if (!live[i]) continue;
    const Expr& e = k.exprs[i];
    std::string leaf;
    if (e.op == ExprOp::Load)
      leaf = t.tiled[e.operand] ? fmt::format("tile{}[b][a]", e.operand)
                                : fmt::format("in{}[{}]", e.operand, at(e.operand));
    code += "      " + expr_statement(k, static_cast<int>(i), leaf) + "\n";
  }
  for (const Store& s : k.stores)
    code += fmt::format("      out{0}[out{0}_base + (a0 + a) * {1} + (b0 + b)] = {2};\n", s.output,
                        index_literal(stride(n_in + s.output, t.a)), stored_value(k, s));
  code += "    }\n  }\n}\n";
  src.size_params = params.exprs();
  return src;
}

}  // namespace fastcomp::codegen::detail
