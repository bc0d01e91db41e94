// Symbolic output shapes of a torch call by probing: the call's meta function runs again with every free symbol
// scaled to other values (multiples of its size while tracing, so divisibility the code relies on still holds),
// and each output size and stride is matched to an expression that agrees at every point: a constant, a size,
// stride or int argument of the inputs, the input's element count over the other output sizes (reshapes), or the
// dense layout of the output's own sizes. When no expression fits or a probe raises, the call needs sizes to be
// related: symbols with equal sizes are tried as one (broadcasting `x + y`), then each symbol on its own, and the
// ones the call cannot vary are specialised. The solution is then checked where the growing probes never went
// (size 1, small sizes, a far larger size, the symbols in another order): a size the call clamps holds only
// from some size on, which becomes the symbol's bound; what no bound explains is specialised.
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <optional>

#include "frontend/trace/meta.h"
#include "frontend/trace/torch_refs.h"
#include "frontend/trace/tracer.h"
#include "frontend/trace/unsupported.h"

namespace fastcomp::frontend {
namespace {

using graph::Sym;
using Point = std::vector<int64_t>;  // a value per symbol

struct Observed {  // the tensor outputs of one meta call
  std::vector<std::vector<int64_t>> sizes, strides;
  PyRef rest;  // the non-tensor part, compared between points
};


std::vector<int64_t> ints(PyObject* seq) {
  std::vector<int64_t> out;
  PyRef t = PyRef::steal(PySequence_Tuple(seq));
  if (!t) {
    PyErr_Clear();
    return out;
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t.get()); ++i) out.push_back(PyLong_AsLongLong(PyTuple_GET_ITEM(t.get(), i)));
  return out;
}

std::optional<Observed> observe(PyObject* out) {
  const auto& T = torch_refs();
  Observed o;
  auto add = [&](PyObject* t) {
    PyRef size = PyRef::steal(PyObject_GetAttrString(t, "shape"));
    PyRef stride = PyRef::steal(PyObject_CallMethod(t, "stride", nullptr));
    if (!size || !stride) return false;
    o.sizes.push_back(ints(size.get()));
    o.strides.push_back(ints(stride.get()));
    return true;
  };
  if (T.is_tensor(out)) {
    if (!add(out)) return std::nullopt;
    return o;
  }
  if (PyTuple_Check(out) || PyList_Check(out)) {
    PyRef rest = PyRef::steal(PyList_New(0));
    for (Py_ssize_t i = 0; i < PySequence_Size(out); ++i) {
      PyRef item = PyRef::steal(PySequence_GetItem(out, i));
      if (T.is_tensor(item.get())) {
        if (!add(item.get())) return std::nullopt;
      } else {
        PyList_Append(rest.get(), item.get());
      }
    }
    o.rest = rest;
    return o;
  }
  o.rest = PyRef::borrow(out);
  return o;
}

const int64_t kPrimes[] = {3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41};

}  // namespace

bool has_sym(const ValueRef& v) {
  if (v->is(VKind::SymInt) || (v->is(VKind::Tensor) && !v->shape.empty())) return true;
  if (v->is(VKind::Tuple) || v->is(VKind::List) || v->is(VKind::Slice))
    for (const auto& item : v->items)
      if (has_sym(item)) return true;
  return false;
}

// A meta object for `v` at `point`; `at_hint` is the one the call got while tracing. `fresh`: static tensors are
// new meta tensors too, with the metadata their node had before the call (an in-place op changed `at_hint`).
PyRef Tracer::probe_meta(const ValueRef& v, PyObject* at_hint, const std::vector<int64_t>& point, bool fresh) {
  if (fresh && v->is(VKind::Tensor) && v->shape.empty()) return make_meta_tensor(graph_.nodes[v->node].meta);
  if (!has_sym(v)) return PyRef::borrow(at_hint);
  if (v->is(VKind::SymInt)) return PyRef::steal(PyLong_FromLongLong(graph::sym_eval(shapes_.resolve(v->sym), point)));
  if (v->is(VKind::Tensor)) {
    graph::TensorMeta m;
    m.dtype = PyRef::steal(PyObject_GetAttrString(v->meta.get(), "dtype"));
    SymShape shape = shapes_.resolve(v->shape);
    for (const Sym& e : shape.sizes) m.sizes.push_back(graph::sym_eval(e, point));
    for (const Sym& e : shape.strides) m.strides.push_back(graph::sym_eval(e, point));
    return make_meta_tensor(m);
  }
  if (v->is(VKind::Slice)) {
    PyRef parts[3];
    for (int i = 0; i < 3; ++i) {
      static const char* kParts[] = {"start", "stop", "step"};
      PyRef hint = PyRef::steal(PyObject_GetAttrString(at_hint, kParts[i]));
      parts[i] = probe_meta(v->items[i], hint.get(), point);
    }
    return PyRef::steal(PySlice_New(parts[0].get(), parts[1].get(), parts[2].get()));
  }
  const bool tuple = v->is(VKind::Tuple);
  PyRef out = PyRef::steal(tuple ? PyTuple_New(v->items.size()) : PyList_New(v->items.size()));
  for (size_t i = 0; i < v->items.size(); ++i) {
    PyRef item = probe_meta(v->items[i], PySequence_Fast_GET_ITEM(at_hint, i), point);
    if (tuple) PyTuple_SET_ITEM(out.get(), i, item.release());
    else PyList_SET_ITEM(out.get(), i, item.release());
  }
  return out;
}

std::vector<SymShape> Tracer::infer_shapes(const ProbeCall& call, PyObject* meta_out) {
  // The expressions the outputs may take, from the inputs (sizes first, then strides and int arguments).
  std::vector<Sym> candidates;
  std::vector<std::pair<Sym, int>> numels;  // element count of each dynamic tensor input
  std::vector<std::vector<Sym>> later;       // strides of each dynamic tensor input, for candidates tried last
  struct Bounds {
    Sym start, stop, step;
  };
  std::vector<Bounds> slices;  // each slice's bounds: lengths are differences of bounds and sizes (over the step)
  std::function<void(const ValueRef&)> collect = [&](const ValueRef& v) {
    if (v->is(VKind::SymInt)) candidates.push_back(shapes_.resolve(v->sym));
    if (v->is(VKind::Tensor) && !v->shape.empty()) {
      SymShape s = shapes_.resolve(v->shape);
      Sym numel = graph::sym_const(1);
      for (const Sym& e : s.sizes) candidates.push_back(e), numel = graph::sym_mul(numel, e);
      for (const Sym& e : s.strides) candidates.push_back(e);
      numels.emplace_back(numel, 0);
      later.push_back(s.strides);
    }
    if (v->is(VKind::Slice)) {
      for (const auto& item : v->items) collect(item);
      slices.push_back({sym_of(v->items[0]), sym_of(v->items[1]), sym_of(v->items[2])});
    }
    if (v->is(VKind::Const) && v->obj && PySlice_Check(v->obj.get())) {  // x[:, 1:], x[:, :-1]: constant bounds
      auto* slice = reinterpret_cast<PySliceObject*>(v->obj.get());
      slices.push_back({int_sym(slice->start), int_sym(slice->stop), int_sym(slice->step)});
    }
    if (v->is(VKind::Tuple) || v->is(VKind::List)) {
      for (const auto& item : v->items) collect(item);
      // A list of tensors of one rank, some dynamic (torch.cat's: a cache grown by one step's static keys): each
      // dimension's sum over them, tried after the items' own sizes.
      std::vector<std::vector<Sym>> sizes;
      bool dynamic = false;
      for (const auto& item : v->items) {
        if (!item->is(VKind::Tensor) || !item->meta) break;
        dynamic |= !item->shape.empty();
        std::vector<Sym> its;
        if (!item->shape.empty()) {
          its = shapes_.resolve(item->shape).sizes;
        } else {
          for (int64_t n : meta_of_tensor(item->meta.get(), nullptr).sizes) its.push_back(graph::sym_const(n));
        }
        if (!sizes.empty() && its.size() != sizes[0].size()) break;
        sizes.push_back(std::move(its));
      }
      const bool same_rank = dynamic && !sizes.empty() && sizes.size() == v->items.size();
      for (size_t d = 0; same_rank && d < sizes[0].size(); ++d) {
        Sym sum = graph::sym_const(0);
        for (const auto& its : sizes) sum = graph::sym_add(sum, its[d]);
        candidates.push_back(sum);
      }
    }
  };
  for (const auto& a : call.args) collect(a);
  for (const auto& kw : call.kwargs) collect(kw.second);
  const std::vector<Sym> sizes_and_zero = [&] {
    std::vector<Sym> out(candidates.begin(), candidates.end());
    out.push_back(graph::sym_const(0));
    return out;
  }();
  for (const auto& [start, stop, step] : slices) {
    auto minus = [](const Sym& a, const Sym& b) { return graph::sym_add(a, graph::sym_mul(graph::sym_const(-1), b)); };
    std::vector<Sym> lengths;
    for (const Sym& end : sizes_and_zero) {  // x[:, a:], x[:, -a:], x[:, :-b], x[:, a:-b]: a size (or 0) and bounds
      // A size alone only without bounds (x[:, ::2]): with one, it agrees with the true length wherever the probes
      // went (multiples of an even size: (n + 1) // 2 for x[1::2], whose length is n // 2) and nowhere else.
      if (!start && !stop) lengths.push_back(end);
      if (start) lengths.push_back(minus(end, start));
      if (stop) lengths.push_back(graph::sym_add(end, stop));
      if (start && stop) lengths.push_back(minus(graph::sym_add(end, stop), start));
    }
    if (start && stop) lengths.push_back(minus(stop, start));
    // x[:, ::k]: the length over the step, rounded up.
    const int64_t k = step && step->is_const() ? step->const_value() : 1;
    for (const Sym& length : lengths)
      candidates.push_back(k > 1 ? graph::sym_floordiv(graph::sym_add(length, graph::sym_const(k - 1)), step) : length);
  }
  for (const auto& strides : later)  // a diagonal's stride: the sum of two of its input's strides
    for (size_t i = 0; i < strides.size(); ++i)
      for (size_t j = i + 1; j < strides.size(); ++j) candidates.push_back(graph::sym_add(strides[i], strides[j]));
  std::vector<int> free;
  for (const Sym& c : candidates)
    for (int s : shapes_.free_symbols(c)) free.push_back(s);
  std::sort(free.begin(), free.end());
  free.erase(std::unique(free.begin(), free.end()), free.end());
  if (free.empty()) return {};
  std::optional<Observed> at_hint = observe(meta_out);
  if (!at_hint) {  // no shapes to read off the result: keep the inputs as they were traced
    PyErr_Clear();
    for (int s : free) shapes_.specialize(s, fmt::format("{} at {} returns something fastcomp cannot probe", call.name, user_loc()));
    return {};
  }

  // Runs the call at `point`; null when it raises there, or when its inputs or result are too large to describe
  // (a size far larger in a symbol several dimensions share overflows the number of elements).
  auto run_at = [&](const Point& point) -> std::optional<Observed> {
    try {
      PyRef args = PyRef::steal(PyTuple_New(call.args.size()));
      for (size_t i = 0; i < call.args.size(); ++i)
        PyTuple_SET_ITEM(args.get(), i,
                         probe_meta(call.args[i], PyTuple_GET_ITEM(call.meta_args, i), point, call.writes).release());
      PyRef kwargs = PyRef::steal(PyDict_Copy(call.meta_kwargs));
      for (const auto& [key, value] : call.kwargs)
        if (has_sym(value) || call.writes) {
          PyObject* hint = PyDict_GetItemString(call.meta_kwargs, key.c_str());
          if (hint) PyDict_SetItemString(kwargs.get(), key.c_str(), probe_meta(value, hint, point, call.writes).get());
        }
      PyRef out = call.run(args.get(), kwargs.get());
      if (!out) {
        PyErr_Clear();
        return std::nullopt;
      }
      auto o = observe(out.get());
      if (!o) PyErr_Clear();
      return o;
    } catch (const Unsupported&) {
      throw;
    } catch (const std::runtime_error&) {
      PyErr_Clear();
      return std::nullopt;
    } catch (const std::invalid_argument&) {  // an input's size has no value at this point (a divisor of 0)
      PyErr_Clear();
      return std::nullopt;
    }
  };

  // Whether the inputs at `point` can be described at all (a size far larger in a symbol several dimensions
  // share overflows the number of elements).
  auto fits = [&](const Point& point) {
    try {
      for (size_t i = 0; i < call.args.size(); ++i) probe_meta(call.args[i], PyTuple_GET_ITEM(call.meta_args, i), point, false);
      for (const auto& [key, value] : call.kwargs)
        if (PyObject* hint = PyDict_GetItemString(call.meta_kwargs, key.c_str())) probe_meta(value, hint, point, false);
      return true;
    } catch (const std::runtime_error&) {
      return false;
    }
  };

  // Solves every output size and stride over `points` (hint first); null when one has no expression.
  auto solve = [&](const std::vector<Point>& points, const std::vector<Observed>& seen) -> std::optional<std::vector<SymShape>> {
    for (size_t k = 1; k < seen.size(); ++k) {
      if (seen[k].sizes.size() != seen[0].sizes.size()) return std::nullopt;
      for (size_t j = 0; j < seen[0].sizes.size(); ++j)
        if (seen[k].sizes[j].size() != seen[0].sizes[j].size()) return std::nullopt;
      if (seen[0].rest) {
        int eq = PyObject_RichCompareBool(seen[0].rest.get(), seen[k].rest.get(), Py_EQ);
        if (eq != 1) {
          PyErr_Clear();
          return std::nullopt;
        }
      }
    }
    auto matches = [&](const Sym& e, auto value_at) {
      for (size_t k = 0; k < points.size(); ++k)
        if (graph::sym_try_eval(e, points[k]) != value_at(k)) return false;  // no value there: no match
      return true;
    };
    auto find = [&](auto value_at) -> Sym {
      bool constant = true;
      for (size_t k = 1; k < points.size(); ++k) constant &= value_at(k) == value_at(0);
      if (constant) return graph::sym_const(value_at(0));
      for (const Sym& c : candidates)
        if (matches(c, value_at)) return c;
      return nullptr;
    };
    std::vector<SymShape> out;
    for (size_t j = 0; j < seen[0].sizes.size(); ++j) {
      const size_t rank = seen[0].sizes[j].size();
      SymShape shape;
      int unsolved = -1;
      for (size_t d = 0; d < rank; ++d) {
        Sym e = find([&](size_t k) { return seen[k].sizes[j][d]; });
        if (!e) {
          if (unsolved >= 0) return std::nullopt;
          unsolved = static_cast<int>(d);
        }
        shape.sizes.push_back(e);
      }
      if (unsolved >= 0) {  // a reshape's inferred dimension: an input's element count over the other sizes
        Sym others = graph::sym_const(1);
        for (size_t d = 0; d < rank; ++d)
          if (static_cast<int>(d) != unsolved) others = graph::sym_mul(others, shape.sizes[d]);
        for (const auto& [numel, unused] : numels) {
          if (shapes_.hint(others) == 0) break;
          Sym e = graph::sym_floordiv(numel, others);
          if (matches(e, [&](size_t k) { return seen[k].sizes[j][unsolved]; })) {
            shape.sizes[unsolved] = e;
            break;
          }
        }
        if (!shape.sizes[unsolved]) return std::nullopt;
      }
      std::vector<Sym> dense = dense_strides(shape.sizes, seen[0].sizes[j], seen[0].strides[j]);
      for (size_t d = 0; d < rank; ++d) {
        auto stride_at = [&](size_t k) { return seen[k].strides[j][d]; };
        Sym e = find(stride_at);
        if (!e && !dense.empty() && matches(dense[d], stride_at)) e = dense[d];
        if (!e) {
          bool always_one = true;  // a stride of a size-1 dimension does not address anything
          for (size_t k = 0; k < points.size(); ++k) always_one &= seen[k].sizes[j][d] == 1;
          if (!always_one) return std::nullopt;
          e = graph::sym_const(seen[0].strides[j][d]);
        }
        shape.strides.push_back(e);
      }
      out.push_back(std::move(shape));
    }
    return out;
  };

  // Probes with `varied` scaled (members of a group share their first member's value); `near`: moved a step or
  // two instead (a size clamped to a static one, `buffer[:, :s0]`, follows s0 only below that size).
  auto attempt = [&](const std::vector<int>& varied, const std::vector<std::vector<int>>& groups, bool near = false)
      -> std::optional<std::vector<SymShape>> {
    std::vector<Point> points = {shapes_.hints()};
    std::vector<Observed> seen = {*at_hint};
    for (int p = 0; p < 2; ++p) {
      Point point = shapes_.hints();
      for (size_t i = 0; i < varied.size(); ++i) {
        if (near) point[varied[i]] += p == 0 ? 1 + static_cast<int64_t>(i) : 3 + 2 * static_cast<int64_t>(i);
        else point[varied[i]] *= kPrimes[(i + 3 * p) % std::size(kPrimes)];
      }
      for (const auto& group : groups)
        for (int s : group) point[s] = point[group[0]];
      auto o = run_at(point);
      if (!o) return std::nullopt;
      points.push_back(std::move(point));
      seen.push_back(std::move(*o));
    }
    return solve(points, seen);
  };

  const std::string why = fmt::format("{} at {} needs it", call.name, user_loc());
  const std::string at = fmt::format("{} at {}", call.name, user_loc());

  // Whether the call's result at `point` is what `shapes` say: as many tensors, each size and stride as the
  // expressions give (the stride of a size-1 dimension too: stride() shows it), and the same non-tensor part.
  auto agrees_with = [&](const std::vector<SymShape>& shapes, const Point& point, const std::optional<Observed>& o) {
    if (!o || o->sizes.size() != shapes.size()) return false;
    if (at_hint->rest) {
      int eq = o->rest ? PyObject_RichCompareBool(at_hint->rest.get(), o->rest.get(), Py_EQ) : 0;
      if (eq < 0) PyErr_Clear();
      if (eq != 1) return false;
    }
    for (size_t j = 0; j < shapes.size(); ++j) {
      const SymShape s = shapes_.resolve(shapes[j]);
      if (o->sizes[j].size() != s.sizes.size()) return false;
      for (size_t d = 0; d < s.sizes.size(); ++d) {
        if (graph::sym_try_eval(s.sizes[d], point) != o->sizes[j][d]) return false;
        if (graph::sym_try_eval(s.strides[d], point) != o->strides[j][d]) return false;
      }
    }
    return true;
  };
  auto agrees = [&](const std::vector<SymShape>& shapes, const Point& point) {
    return agrees_with(shapes, point, run_at(point));
  };
  auto finished = [&](std::vector<SymShape> shapes) {  // resolved; empty where every size and stride is constant
    for (SymShape& s : shapes) {
      s = shapes_.resolve(s);
      bool constant = true;
      for (const Sym& e : s.sizes) constant &= e->is_const();
      for (const Sym& e : s.strides) constant &= e->is_const();
      if (constant) s = SymShape{};
    }
    return shapes;
  };
  auto unreplaced = [&] {
    std::vector<int> out;
    for (int s : free)
      if (!shapes_.symbol(s).replacement) out.push_back(s);
    return out;
  };

  // A result with a tensor per element of a dynamic dimension (unbind, split, iterating a tensor) has as many
  // outputs as that size: the symbols that change the count are specialised before probing at sizes many
  // times larger would make that many tensors.
  if (at_hint->sizes.size() > 1) {
    for (int s : free) {
      Point point = shapes_.hints();
      point[s] *= 2;
      auto o = run_at(point);
      if (!o || o->sizes.size() != at_hint->sizes.size())
        shapes_.specialize(s, fmt::format("the number of tensors {} returns depends on it", at));
    }
    if (unreplaced().empty()) return {};
  }

  std::optional<std::vector<SymShape>> shapes = attempt(unreplaced(), {});
  if (!shapes) {
    std::map<int64_t, std::vector<int>> by_hint;
    for (int s : unreplaced()) by_hint[shapes_.symbol(s).hint].push_back(s);
    std::vector<std::vector<int>> groups;
    for (auto& [hint, members] : by_hint)
      if (members.size() > 1) groups.push_back(members);
    if (!groups.empty() && (shapes = attempt(unreplaced(), groups))) {
      for (const auto& group : groups)
        for (size_t i = 1; i < group.size(); ++i) shapes_.unify(group[0], group[i], at);
    }
  }
  if (!shapes) shapes = attempt(unreplaced(), {}, /*near=*/true);  // checked far away below, like any solution
  if (!shapes) {
    for (int s : unreplaced())
      if (!attempt({s}, {})) shapes_.specialize(s, why);
    std::vector<int> left = unreplaced();
    shapes = left.empty() ? std::nullopt : attempt(left, {});
    if (!shapes) {
      for (int s : left) shapes_.specialize(s, why);
      return {};  // all inputs static now: the hint shapes are the output shapes
    }
  }

  // The probes above only grew the sizes. Sizes the call clamps (x[:3], x[-3:-1], diagonal(), x[:y.shape[0]])
  // follow another expression below or above some size, or in another order of two sizes, so the solution is
  // checked at sizes it was not found at: 1, two symbols in both orders, the smallest size a symbol may have
  // and a far larger one. A symbol the call treats differently at 1 must be at least 2, below some size gets
  // that size as its lower bound (found by bisection), above some size its upper bound; the order of two
  // symbols that agrees is guarded; what nothing explains specialises the call's symbols.
  auto with = [&](const std::vector<int>& symbols, int64_t value) {
    Point point = shapes_.hints();
    for (int s : symbols) point[s] = value;
    return point;
  };
  // Each symbol at 1 on its own, then all together: a product of sizes is 1 only when each is.
  std::vector<int> may_be_one;
  for (int s : unreplaced())
    if (shapes_.symbol(s).min < 2) may_be_one.push_back(s);
  for (int s : may_be_one)
    if (!agrees(*shapes, with({s}, 1))) shapes_.require_at_least(s, 2, at + " behaves differently at size 1");
  may_be_one.erase(std::remove_if(may_be_one.begin(), may_be_one.end(), [&](int s) { return shapes_.symbol(s).min >= 2; }),
                   may_be_one.end());
  if (may_be_one.size() > 1 && !agrees(*shapes, with(may_be_one, 1)))
    for (int s : may_be_one) shapes_.require_at_least(s, 2, at + " behaves differently with these sizes all 1");
  // Every probe so far was a multiple of the sizes while tracing: a call that needs sizes to divide evenly
  // (`x.view(-1, 6)`) holds at all of them and raises one size further, for one symbol or only for all of them
  // together (7 * 7). Where the code would catch that error, those symbols are specialised.
  auto one_further = [&](const std::vector<int>& symbols) {
    Point point = shapes_.hints();
    for (int s : symbols) point[s] = std::min(shapes_.symbol(s).hint + 1, shapes_.symbol(s).max);
    return point;
  };
  const std::string uneven = fmt::format("{} holds only at some sizes (they must divide evenly)", at);
  // Each symbol alone (keeping the orders of sizes guarded below), then all of them together.
  // Only inside a `try`: elsewhere the graph raises eager's error at such sizes, as the op would.
  const bool caught = inside_catching_try();
  // `at_most`: orders of two sizes the trace guarded (a <= b); a symbol one further past its partner's size would
  // test that order, not divisibility, so it is checked only with the others.
  auto check_uneven = [&](const std::vector<std::pair<int, int>>& at_most) {
    if (!caught) return false;
    for (int s : unreplaced()) {
      bool breaks_order = false;
      for (auto [shorter, longer] : at_most)
        breaks_order |= shorter == s && shapes_.symbol(s).hint >= shapes_.symbol(longer).hint;
      if (!breaks_order && !agrees(*shapes, one_further({s}))) shapes_.specialize(s, uneven);
    }
    if (std::vector<int> left = unreplaced(); !left.empty() && !agrees(*shapes, one_further(left)))
      for (int s : left) shapes_.specialize(s, uneven);
    // One size further can keep a factor the call needs (4 * s1 * s2 over 5 at 5 x 5 holds at 6 x 5, 5 x 6 and
    // even 6 x 6 with a third size 4 -> 5): all of them at primes the sizes while tracing need not share, too.
    for (int64_t prime : {7, 11, 13}) {
      std::vector<int> left = unreplaced();
      if (left.empty()) break;
      Point point = shapes_.hints();
      for (int s : left) point[s] = std::clamp(prime, shapes_.symbol(s).min, shapes_.symbol(s).max);
      if (!agrees(*shapes, point))
        for (int s : left) shapes_.specialize(s, uneven);
    }
    return unreplaced().empty();
  };
  if (call.unclamped) return check_uneven({}) ? std::vector<SymShape>{} : finished(*shapes);
  // Pairs of symbols in both orders, just above the larger size (a clamp to the shorter of two sizes holds in
  // one order only): the order that agrees becomes a guard, and a pair that agrees in neither specialises the
  // call's symbols. Past four symbols, one point with their order reversed stands in for the pairs.
  std::vector<std::pair<int, int>> at_most;  // (a, b): the trace needs a <= b
  std::vector<int> left = unreplaced();
  auto give_up = [&] {
    for (int s : unreplaced()) shapes_.specialize(s, at + " relates the sizes in a way fastcomp does not model");
  };
  if (left.size() > 4) {
    Point reversed = shapes_.hints();
    for (size_t i = 0; i < left.size(); ++i) reversed[left[i]] *= kPrimes[(left.size() - 1 - i) % std::size(kPrimes)];
    if (!agrees(*shapes, reversed)) return give_up(), std::vector<SymShape>{};
  } else {
    for (size_t i = 0; i < left.size(); ++i)
      for (size_t j = i + 1; j < left.size(); ++j) {
        // Multiples of the sizes while tracing, as in the probes that found the solution.
        const int a = left[i], b = left[j];
        const int64_t ha = shapes_.symbol(a).hint, hb = shapes_.symbol(b).hint;
        Point a_longer = shapes_.hints(), b_longer = shapes_.hints();
        a_longer[b] = 2 * hb;
        a_longer[a] = ha * (2 * hb / ha + 1);
        b_longer[a] = 2 * ha;
        b_longer[b] = hb * (2 * ha / hb + 1);
        const bool a_longer_ok = agrees(*shapes, a_longer), b_longer_ok = agrees(*shapes, b_longer);
        if (!a_longer_ok && !b_longer_ok) return give_up(), std::vector<SymShape>{};
        if (a_longer_ok && b_longer_ok) continue;
        const int shorter = a_longer_ok ? b : a, longer = a_longer_ok ? a : b;
        // The order that agrees must be the one traced (the solution was found there); when it is not, more
        // than the order matters.
        if (shapes_.symbol(shorter).hint > shapes_.symbol(longer).hint) return give_up(), std::vector<SymShape>{};
        shapes_.add_relation(graph::sym_symbol(shorter), SizeCmp::Le, graph::sym_symbol(longer), true,
                             at + " depends on which size is shorter");
        at_most.emplace_back(shorter, longer);
      }
  }
  // Then each symbol alone, from the smallest size it may have to a far larger one (other symbols at their
  // sizes while tracing, and the order just guarded kept).
  constexpr int64_t kLarge = int64_t{1} << 20;
  for (int s : unreplaced()) {
    const SymbolInfo& info = shapes_.symbol(s);
    // The far larger size is a multiple of the size while tracing, like the probes'.
    int64_t low = std::max<int64_t>(info.min, 2), high = std::min(info.max, info.hint * (kLarge / info.hint + 1));
    for (auto [shorter, longer] : at_most) {
      if (longer == s) low = std::max(low, shapes_.symbol(shorter).hint);
      if (shorter == s) high = std::min(high, shapes_.symbol(longer).hint);
    }
    while (high > info.hint && !fits(with({s}, high)))  // as far as tensors of those sizes can exist
      high = info.hint * std::max<int64_t>(high / info.hint / 2, 1);
    if (info.hint > low && !agrees(*shapes, with({s}, low))) {
      int64_t bad = low, good = info.hint;  // bisection: the smallest size from which on the solution holds
      while (good - bad > 1) {
        int64_t mid = bad + (good - bad) / 2;
        (agrees(*shapes, with({s}, mid)) ? good : bad) = mid;
      }
      shapes_.require_at_least(s, good, fmt::format("{} behaves differently below {}", at, good));
    }
    if (high > info.hint && !agrees(*shapes, with({s}, high))) {
      int64_t good = info.hint, bad = high;  // the largest size up to which the solution holds
      while (bad - good > 1) {
        int64_t mid = good + (bad - good) / 2;
        (agrees(*shapes, with({s}, mid)) ? good : bad) = mid;
      }
      shapes_.require_at_most(s, good, fmt::format("{} behaves differently above {}", at, good));
    }
  }
  // Every probe so far was a multiple of the sizes while tracing (or a bound a bisection found), where a size
  // computed with % or // (torch.eye(n % 3 + 1)), or a stepped slice's length, can stay constant: one size
  // further, the call either raises (eager would too, unless caught: check_uneven) or must give the sizes the
  // solution says; a different result there is one the solution does not describe, and specialises the symbols.
  auto differs_one_further = [&](const std::vector<int>& symbols) {
    Point point = shapes_.hints();
    for (int s : symbols) {
      for (auto [shorter, longer] : at_most)
        if (shorter == s && shapes_.symbol(s).hint >= shapes_.symbol(longer).hint) return false;  // the order
      point[s] = std::min(shapes_.symbol(s).hint + 1, shapes_.symbol(s).max);
    }
    auto o = run_at(point);
    return o && !agrees_with(*shapes, point, o);
  };
  // A symbol equal to a static size of the call's inputs can change what the call does (a reshape of a transposed
  // [1, s0, 5] to [5, s0, 1] is a view only where s0 is 5): where the solution does not hold there, the guards
  // exclude that size (fuzz seed 8 #33192).
  std::vector<int64_t> static_sizes;
  for (const Sym& c : candidates)
    if (c->is_const() && c->const_value() >= 2 && static_sizes.size() < 8 &&
        std::find(static_sizes.begin(), static_sizes.end(), c->const_value()) == static_sizes.end())
      static_sizes.push_back(c->const_value());
  for (int s : unreplaced())
    for (int64_t v : static_sizes) {
      const SymbolInfo& info = shapes_.symbol(s);
      if (v == info.hint || v < info.min || v > info.max) continue;
      auto o = run_at(with({s}, v));
      if (o && !agrees_with(*shapes, with({s}, v), o))
        shapes_.add_relation(graph::sym_symbol(s), SizeCmp::Ne, graph::sym_const(v), true,
                             fmt::format("{} behaves differently at size {}", at, v));
    }
  const std::string unmodelled = fmt::format("{} gives sizes fastcomp does not model one size further", at);
  for (int s : unreplaced())
    if (differs_one_further({s})) shapes_.specialize(s, unmodelled);
  if (std::vector<int> left = unreplaced(); left.size() > 1 && differs_one_further(left))
    for (int s : left) shapes_.specialize(s, unmodelled);
  return check_uneven(at_most) ? std::vector<SymShape>{} : finished(*shapes);
}

}  // namespace fastcomp::frontend
