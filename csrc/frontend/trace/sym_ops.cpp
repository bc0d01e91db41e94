// Python ints computed from dynamic sizes (SymInt values): reading sizes off tensors, integer arithmetic on them,
// comparisons (which become guards on relations between sizes), and specialisation where a plain Python int is
// needed. A SymInt that only feeds torch calls stays an expression, evaluated from the inputs on every call.
#include <fmt/format.h>

#include "frontend/bytecode/instr.h"
#include "frontend/trace/torch_refs.h"
#include "frontend/trace/tracer.h"

namespace fastcomp::frontend {

graph::Sym int_sym(PyObject* o) {
  if (!o || !PyLong_Check(o)) return nullptr;  // bools too: True + s0 is s0 + 1
  int overflow = 0;
  long long x = PyLong_AsLongLongAndOverflow(o, &overflow);
  if (!overflow) return graph::sym_const(x);
  PyErr_Clear();
  return nullptr;
}

graph::Sym Tracer::sym_of(const ValueRef& v) const {
  if (v->is(VKind::SymInt)) return shapes_.resolve(v->sym);
  return v->is(VKind::Const) ? int_sym(v->obj.get()) : nullptr;
}

ValueRef Tracer::symint(const graph::Sym& e) {
  graph::Sym r = shapes_.resolve(e);
  return make_symint(r, graph::sym_eval(r, shapes_.hints()));
}

ValueRef Tracer::sym_size(const ValueRef& tensor, int64_t dim) {
  const int64_t rank = static_cast<int64_t>(tensor->shape.sizes.size());
  if (dim < -rank || dim >= rank)
    throw UserCodeError(fmt::format("Dimension out of range (expected to be in range of [{}, {}], but got {})", -rank,
                                    rank - 1, dim));
  return symint(tensor->shape.sizes[dim < 0 ? dim + rank : dim]);
}

ValueRef Tracer::sym_shape(const ValueRef& tensor) {
  std::vector<ValueRef> items;
  for (size_t d = 0; d < tensor->shape.sizes.size(); ++d) items.push_back(symint(tensor->shape.sizes[d]));
  ValueRef shape = make_seq(VKind::Tuple, std::move(items));
  shape->obj = torch_refs().size_type;  // a torch.Size, as x.shape is when static
  return shape;
}

std::optional<ValueRef> Tracer::size_query(const std::string& name, const std::vector<ValueRef>& args,
                                           const std::vector<std::pair<std::string, ValueRef>>& kwargs) {
  if (args.empty() || !args[0]->is(VKind::Tensor) || args[0]->shape.empty()) return std::nullopt;
  const ValueRef& t = args[0];
  auto dim_arg = [&]() -> std::optional<int64_t> {
    const ValueRef* d = args.size() > 1 ? &args[1] : nullptr;
    for (const auto& [k, v] : kwargs)
      if (k == "dim") d = &v;
    if (!d) return std::nullopt;
    PyRef c = as_python_constant(*d);
    if (!c || !PyLong_Check(c.get())) throw UserCodeError(name + "(): dim must be an int");
    return PyLong_AsLongLong(c.get());
  };
  if (name == "Tensor.size") {
    auto dim = dim_arg();
    return dim ? sym_size(t, *dim) : sym_shape(t);
  }
  if (name == "Tensor.numel" || name == "torch.numel" || name == "Tensor.nelement") {
    graph::Sym n = graph::sym_const(1);
    for (const auto& e : t->shape.sizes) n = graph::sym_mul(n, e);
    return symint(n);
  }
  if (name == "Tensor.stride") {
    auto dim = dim_arg();
    std::vector<ValueRef> items;
    for (const auto& e : t->shape.strides) items.push_back(symint(e));
    if (!dim) return make_seq(VKind::Tuple, std::move(items));
    const int64_t rank = static_cast<int64_t>(items.size());
    if (*dim < -rank || *dim >= rank) throw UserCodeError("Tensor.stride(): dimension out of range");
    return items[*dim < 0 ? *dim + rank : *dim];
  }
  return std::nullopt;
}

std::optional<ValueRef> Tracer::sym_binary(int kind, const ValueRef& a, const ValueRef& b) {
  if (!a->is(VKind::SymInt) && !b->is(VKind::SymInt)) return std::nullopt;
  graph::Sym x = sym_of(a), y = sym_of(b);
  if (!x || !y) return std::nullopt;  // with a float, a tensor, ...: the caller specialises
  int plain = kind >= static_cast<int>(BinaryOpKind::InplaceAdd) ? kind - static_cast<int>(BinaryOpKind::InplaceAdd) : kind;
  switch (static_cast<BinaryOpKind>(plain)) {
    case BinaryOpKind::Add: return symint(graph::sym_add(x, y));
    case BinaryOpKind::Subtract: return symint(graph::sym_sub(x, y));
    case BinaryOpKind::Multiply: return symint(graph::sym_mul(x, y));
    case BinaryOpKind::FloorDivide:
    case BinaryOpKind::Remainder: {
      if (shapes_.hint(y) == 0) throw UserCodeError("integer division or modulo by zero");
      if (!y->is_const()) {
        // A divisor that is a size: its sign is known (sizes are positive), but keep the guard story simple by
        // requiring it to stay what it was.
        shapes_.specialize_all(y, fmt::format("division by a size at {}", user_loc()));
        y = shapes_.resolve(y);
      }
      return symint(plain == static_cast<int>(BinaryOpKind::FloorDivide) ? graph::sym_floordiv(x, y) : graph::sym_mod(x, y));
    }
    default: return std::nullopt;
  }
}

std::optional<ValueRef> Tracer::sym_compare(int cmp, const ValueRef& a, const ValueRef& b) {
  if (!a->is(VKind::SymInt) && !b->is(VKind::SymInt)) return std::nullopt;
  graph::Sym x = sym_of(a), y = sym_of(b);
  if (!x || !y) return std::nullopt;
  auto op = static_cast<SizeCmp>(cmp);
  bool holds = size_cmp_holds(op, shapes_.hint(x), shapes_.hint(y));
  if (!graph::sym_sub(x, y)->is_const())
    shapes_.add_relation(x, op, y, holds, fmt::format("comparison at {}", user_loc()));
  return make_const_borrowed(holds ? Py_True : Py_False);
}

bool Tracer::sym_truthiness(const ValueRef& v) {
  graph::Sym x = sym_of(v);
  bool holds = shapes_.hint(x) != 0;
  if (!x->is_const()) shapes_.add_relation(x, SizeCmp::Ne, graph::sym_const(0), holds, fmt::format("truth test at {}", user_loc()));
  return holds;
}

PyRef Tracer::specialize_symint(const ValueRef& v) {
  shapes_.specialize_all(v->sym, fmt::format("its value ({}) is used as a plain Python int at {}", str(v->sym), user_loc()));
  return v->obj;
}

}  // namespace fastcomp::frontend
