// torch.cat and torch.stack as index arithmetic. The result is an expression of its consumer's kernel that picks,
// by the coordinate along the cat dimension, the piece covering it (InRange); each piece is read in place,
// addressed over the result's space with a validity range (kernel_ir.h's Operand), so its offset may point before
// it. A piece that is still a lazy pointwise expression (-x2 in a rotary embedding) is copied into the kernel with
// its loads moved the same way, so it is never written to memory either. The cat has no kernel of its own and
// is copied nowhere, unless something needs it as a tensor: then the kernel computing it writes it (materialize).
#include "plan/lowering.h"

namespace fastcomp::plan::detail {
namespace {

// More pieces than this run as torch's cat: each is a kernel parameter and a select in every element.
constexpr size_t kMaxPieces = 64;

struct Piece {
  graph::NodeId node = -1;
  Size begin = 0, end = 0;  // its coordinates along the cat dimension of the result
  const Cluster* source = nullptr;  // the open cluster whose expression it is, when that is copied
  int buffer = -1;                  // else the buffer read
};

// Where the cat puts one piece: along `dim`, at [begin, end) of the result's `space`; `stack` adds the dimension.
struct Placement {
  int dim = 0;
  bool stack = false;
  Size begin = 0, end = 0;
  Sizes space;

  // `strides` and `offset` address the piece over its own space; over the result's, coordinate `begin` along
  // `dim` is the piece's first element, and the operand is read only inside [begin, end) unless its address
  // does not move along `dim` (stack's new dimension, a piece of size 1, a broadcast): then every coordinate
  // reads an element of the piece, and InRange alone picks it.
  MovedLoad place(const Sizes& strides, const Size& offset) const {
    MovedLoad a{strides, offset, {}};
    if (stack) a.strides.insert(a.strides.begin() + dim, Size(0));
    const Size& s = a.strides[dim];
    if (s == 0) return a;
    a.offset = offset - begin * s;
    if (!(begin == 0 && end == space[dim])) a.valid = {dim, begin, end};
    return a;
  }
};

// Reads piece buffer `b` placed by `at`.
int load_placed(Cluster& c, const Buffer& b, const Placement& at) {
  Sizes strides = b.strides;
  for (size_t d = 0; d < strides.size(); ++d)
    if (b.sizes[d] == 1) strides[d] = 0;  // one coordinate: the stride says nothing, and 0 needs no range
  const MovedLoad a = at.place(strides, b.offset);
  return c.load(b.root, b.dtype, a.strides, a.offset, a.valid);
}

bool is_cat(const graph::Node& n, const std::string& op, bool* stack) {
  if (n.target_name.rfind("torch.", 0) != 0) return false;  // torch.cat, torch.concat, ...: not a user's `cat`
  *stack = op == "stack";
  return *stack || op == "cat" || op == "concat" || op == "concatenate";
}

}  // namespace

bool lower_cat_op(Lowerer& L, const graph::Node& n, const std::string& op) {
  bool stack = false;
  if (!is_cat(n, op, &stack) || n.type != graph::ValueType::Tensor) return false;
  CallArgs args(n);
  if (!args.only_keywords({"tensors", "dim", "axis"})) return false;  // out=, or a named dimension
  const graph::Arg* tensors = args.get(0, "tensors");
  const graph::Arg* dim_arg = args.get(1, "dim");
  if (!dim_arg) dim_arg = args.get(1, "axis");
  if (!tensors || (tensors->kind != graph::Arg::Kind::Tuple && tensors->kind != graph::Arg::Kind::List)) return false;
  const std::optional<int64_t> dim = dim_arg ? const_int(dim_arg) : 0;
  const Sizes out = meta_sizes(n.meta);
  const int64_t rank = static_cast<int64_t>(out.size());
  if (!dim || rank == 0 || *dim < -rank || *dim >= rank || tensors->items.size() > kMaxPieces) return false;

  Placement at;
  at.dim = static_cast<int>(*dim < 0 ? *dim + rank : *dim);
  at.stack = stack;
  at.space = out;
  std::vector<Piece> pieces;
  Size end = 0;
  for (const graph::Arg& item : tensors->items) {
    if (item.kind != graph::Arg::Kind::Node || !L.value(item.node).tensor) return false;
    Sizes sizes = meta_sizes(L.node(item.node).meta);
    if (stack) sizes.insert(sizes.begin() + at.dim, Size(1));
    // torch skips empty pieces, including a 1-D one of size 0 whatever the other pieces' rank (legacy)
    if (sizes.size() == 1 && sizes[0] == 0) continue;
    if (static_cast<int64_t>(sizes.size()) != rank) return false;
    for (int64_t d = 0; d < rank; ++d)
      if (d != at.dim && sizes[d] != out[d]) return L.decline("a cat of pieces whose sizes are not provably equal");
    if (sizes[at.dim] == 0) continue;
    pieces.push_back({item.node, end, end + sizes[at.dim]});
    end = pieces.back().end;
  }
  if (end != out[at.dim]) return L.decline("a cat whose pieces do not provably add up to its size");
  if (codegen::product(out) == 0) pieces.clear();  // an empty result: no element is ever computed

  // Which pieces are copied is decided before any buffer is read: reading one seals its producer.
  for (Piece& p : pieces) {
    const Cluster* c = L.lazy_cluster(p.node);
    if (c && c->space() == meta_sizes(L.node(p.node).meta) && movable_expression(*c, L.value(p.node).expr)) p.source = c;
  }
  for (Piece& p : pieces)
    if (!p.source) p.buffer = L.buffer_for(p.node);

  const DType dtype = L.node_dtype(n.id);  // torch promotes the pieces to it
  L.value_in_space(n, out, [&](Cluster& c) {
    if (pieces.empty()) return c.constant(dtype, 0);
    std::vector<int> values;
    for (const Piece& p : pieces) {
      Placement piece_at = at;
      piece_at.begin = p.begin;
      piece_at.end = p.end;
      const int v = p.source ? copy_moved(*p.source, L.value(p.node).expr, c,
                                          [&](const Sizes& st, const Size& o) { return piece_at.place(st, o); })
                             : load_placed(c, L.buffer(p.buffer), piece_at);
      values.push_back(c.cast(v, dtype));
    }
    int value = values.back();
    for (size_t i = pieces.size() - 1; i-- > 0;)
      value = c.op(ExprOp::Where, dtype, {c.in_range({at.dim, 0, pieces[i].end}), values[i], value});
    return value;
  });
  return true;
}

}  // namespace fastcomp::plan::detail
