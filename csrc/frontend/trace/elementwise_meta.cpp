#include "frontend/trace/elementwise_meta.h"

#include <algorithm>
#include <initializer_list>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cpython/gil_once.h"
#include "frontend/trace/meta_args.h"
#include "frontend/trace/torch_refs.h"

namespace fastcomp::frontend {
namespace {

using namespace meta_args;  // NOLINT: the fast paths share its vocabulary

enum class Rule : uint8_t {
  Arith,      // add, mul, maximum, minimum: the promoted dtype
  Sub,        // as Arith; torch refuses bool operands
  TrueDiv,    // integral and bool results become the default dtype
  FloorDiv,   // as Arith; bool results are refused
  Mod,        // as FloorDiv
  Pow,        // as Arith; bool results are computed as int64 by the meta call and refused on CPU, and
              // an integral base with a negative int exponent raises
  Compare,    // bool
  Bitwise,    // bool and integral only
  Where,      // where(cond, a, b): cond bool; a and b promoted
  ToFloat,    // unary math: integral and bool inputs give the default dtype
  Keep,       // abs, relu: the input's dtype, not bool
  Invert,     // ~x: bool and integral only
  FloatOnly,  // gelu, silu: floating inputs only
  Cast,       // Tensor.float() and friends
};

struct OpSpec {
  Rule rule;
  uint8_t arity;
  bool inplace = false;      // writes into its first argument when that is a tensor
  bool self_tensor = false;  // the first argument must be a tensor (the torch.* and Tensor.* forms)
  bool all_tensors = false;  // maximum / minimum take no scalars
  int8_t cast_to = kNone;
  PyObject* kwarg = nullptr;          // the one keyword accepted, and only with its default value
  PyObject* kwarg_default = nullptr;  // (both owned by the table, which lives for the process)
  bool reflected = false;  // Tensor.__r*__ and torch.rsub: torch sees the operands the other way round
};

// The covered callables, keyed by identity; keys owned (they live for the process anyway).
using OpTable = std::unordered_map<PyObject*, OpSpec>;

// Registers `owner.name` (skipped when this torch lacks it).
void add(OpTable& tb, PyObject* owner, const char* name, OpSpec spec) {
  if (PyObject* fn = lookup(owner, name)) tb.emplace(fn, spec);  // the reference stays with the table
}

struct Family {
  Rule rule;
  const char* op;   // operator module function, or null
  const char* iop;  // its in-place form, or null
  std::initializer_list<const char*> torch_fns;
  std::initializer_list<const char*> methods;  // Tensor methods, including the reflected dunders
  std::initializer_list<const char*> inplace_methods;
};

OpTable* build_table() {
  auto* tb = new OpTable();
  const auto& T = torch_refs();
  PyObject* torch = T.torch.get();
  PyObject* tensor = T.tensor_type.get();
  PyRef op_mod = PyRef::steal(PyImport_ImportModule("operator"));
  PyRef functional = PyRef::steal(PyImport_ImportModule("torch.nn.functional"));
  PyRef nn_c = PyRef::steal(PyImport_ImportModule("torch._C._nn"));
  if (!op_mod || !functional || !nn_c) {
    PyErr_Clear();
    return tb;  // no ops: every call takes the meta path
  }

  // Tensor.__rtruediv__ is reciprocal() * other: with a tensor `other` its promotion differs from div's, so
  // it is reached only through operator.truediv (where `other` is a scalar).
  static const Family kBinary[] = {
      {Rule::Arith, "add", "iadd", {"add"}, {"add", "__add__", "__radd__"}, {"add_", "__iadd__"}},
      {Rule::Sub, "sub", "isub", {"sub", "subtract", "rsub"}, {"sub", "subtract", "__sub__", "__rsub__"},
       {"sub_", "__isub__"}},
      {Rule::Arith, "mul", "imul", {"mul", "multiply"}, {"mul", "multiply", "__mul__", "__rmul__"},
       {"mul_", "__imul__"}},
      {Rule::TrueDiv, "truediv", "itruediv", {"div", "divide", "true_divide"},
       {"div", "divide", "true_divide", "__truediv__"}, {"div_", "true_divide_", "__itruediv__"}},
      {Rule::FloorDiv, "floordiv", "ifloordiv", {"floor_divide"}, {"floor_divide", "__floordiv__", "__rfloordiv__"},
       {"__ifloordiv__"}},
      {Rule::Mod, "mod", "imod", {"remainder"}, {"remainder", "__mod__", "__rmod__"}, {"__imod__"}},
      {Rule::Pow, "pow", "ipow", {}, {"pow", "__pow__", "__rpow__"}, {"pow_", "__ipow__"}},
      {Rule::Compare, "lt", nullptr, {"lt", "less"}, {"lt", "less", "__lt__"}, {}},
      {Rule::Compare, "le", nullptr, {"le", "less_equal"}, {"le", "less_equal", "__le__"}, {}},
      {Rule::Compare, "eq", nullptr, {"eq"}, {"eq", "__eq__"}, {}},
      {Rule::Compare, "ne", nullptr, {"ne", "not_equal"}, {"ne", "not_equal", "__ne__"}, {}},
      {Rule::Compare, "gt", nullptr, {"gt", "greater"}, {"gt", "greater", "__gt__"}, {}},
      {Rule::Compare, "ge", nullptr, {"ge", "greater_equal"}, {"ge", "greater_equal", "__ge__"}, {}},
      {Rule::Bitwise, "and_", "iand", {"bitwise_and"}, {"bitwise_and", "__and__", "__rand__"}, {"__iand__"}},
      {Rule::Bitwise, "or_", "ior", {"bitwise_or"}, {"bitwise_or", "__or__", "__ror__"}, {"__ior__"}},
      {Rule::Bitwise, "xor", "ixor", {"bitwise_xor"}, {"bitwise_xor", "__xor__", "__rxor__"}, {"__ixor__"}},
  };
  for (const Family& f : kBinary) {
    if (f.op) add(*tb, op_mod.get(), f.op, {f.rule, 2});
    if (f.iop) add(*tb, op_mod.get(), f.iop, {f.rule, 2, /*inplace=*/true});
    for (const char* n : f.torch_fns)
      add(*tb, torch, n, {f.rule, 2, false, /*self_tensor=*/true, false, kNone, nullptr, nullptr,
                                std::string_view(n) == "rsub"});
    for (const char* n : f.methods) {
      bool reflected = std::string_view(n).rfind("__r", 0) == 0;
      add(*tb, tensor, n, {f.rule, 2, false, true, false, kNone, nullptr, nullptr, reflected});
    }
    for (const char* n : f.inplace_methods) add(*tb, tensor, n, {f.rule, 2, true, true});
  }
  add(*tb, torch, "pow", {Rule::Pow, 2});  // torch.pow(2, x) is valid
  for (const char* n : {"maximum", "minimum"}) {
    add(*tb, torch, n, {Rule::Arith, 2, false, true, /*all_tensors=*/true});
    add(*tb, tensor, n, {Rule::Arith, 2, false, true, true});
  }
  add(*tb, torch, "where", {Rule::Where, 3});

  for (const char* n : {"exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh", "sin", "cos", "erf"}) {
    add(*tb, torch, n, {Rule::ToFloat, 1, false, true});
    add(*tb, tensor, n, {Rule::ToFloat, 1, false, true});
  }
  for (const char* n : {"sigmoid", "tanh"}) add(*tb, functional.get(), n, {Rule::ToFloat, 1, false, true});
  for (const char* n : {"neg", "negative"}) {
    add(*tb, torch, n, {Rule::Sub, 1, false, true});
    add(*tb, tensor, n, {Rule::Sub, 1, false, true});
  }
  add(*tb, tensor, "__neg__", {Rule::Sub, 1, false, true});
  add(*tb, op_mod.get(), "neg", {Rule::Sub, 1, false, true});
  for (const char* n : {"abs", "relu"}) {
    add(*tb, torch, n, {Rule::Keep, 1, false, true});
    add(*tb, tensor, n, {Rule::Keep, 1, false, true});
  }
  add(*tb, tensor, "__abs__", {Rule::Keep, 1, false, true});
  add(*tb, torch, "bitwise_not", {Rule::Invert, 1, false, true});
  add(*tb, tensor, "bitwise_not", {Rule::Invert, 1, false, true});
  add(*tb, tensor, "__invert__", {Rule::Invert, 1, false, true});
  add(*tb, op_mod.get(), "invert", {Rule::Invert, 1, false, true});

  // nn.ReLU / nn.SiLU / nn.GELU pass their defaults by keyword.
  PyObject* inplace = PyUnicode_InternFromString("inplace");
  PyObject* approximate = PyUnicode_InternFromString("approximate");
  PyObject* none_str = PyUnicode_InternFromString("none");
  add(*tb, functional.get(), "relu", {Rule::Keep, 1, false, true, false, kNone, inplace, Py_False});
  add(*tb, functional.get(), "silu", {Rule::FloatOnly, 1, false, true, false, kNone, inplace, Py_False});
  add(*tb, nn_c.get(), "silu", {Rule::FloatOnly, 1, false, true});
  add(*tb, nn_c.get(), "gelu", {Rule::FloatOnly, 1, false, true, false, kNone, approximate, none_str});

  static const std::pair<const char*, int8_t> kCasts[] = {{"float", kF32},  {"half", kF16}, {"bfloat16", kBF16},
                                                      {"double", kF64}, {"long", kI64}, {"int", kI32},
                                                      {"bool", kBool}};
  for (auto [n, dt] : kCasts) add(*tb, tensor, n, {Rule::Cast, 1, false, true, false, dt});
  return tb;
}

const OpTable& table() {
  static cpython::GilOnce<OpTable> tb;
  return *tb.get(build_table);
}

// c10's combine_categories without complex: a lower-priority group changes the result only when it is of a
// higher category (bool < integral < floating).
int8_t combine(int8_t higher, int8_t lower) {
  if (is_float(higher)) return higher;
  if (higher == kBool || is_float(lower)) return dtypes().promote(higher, lower);
  return higher != kNone ? higher : lower;
}

// c10's result_type: dimensioned tensors, then zero-dim tensors, then wrapped Python scalars.
int8_t result_type(std::initializer_list<const Arg*> ops) {
  int8_t dim = kNone, zero = kNone, wrapped = kNone;
  for (const Arg* o : ops) {
    int8_t& group = !o->tensor ? wrapped : o->sizes.empty() ? zero : dim;
    group = dtypes().promote(group, o->dt);
  }
  return combine(dim, combine(zero, wrapped));
}

// c10::canCast: whether an in-place op may write a `from` result into a `to` tensor.
bool can_cast(int8_t from, int8_t to) {
  if (is_float(from) && !is_float(to)) return false;
  return !(from != kBool && to == kBool);
}

bool broadcast(const std::vector<const Arg*>& ops, std::vector<int64_t>* out) {
  size_t ndim = 0;
  for (const Arg* o : ops)
    if (o->tensor) ndim = std::max(ndim, o->sizes.size());
  out->assign(ndim, 1);
  for (const Arg* o : ops) {
    if (!o->tensor) continue;
    size_t off = ndim - o->sizes.size();
    for (size_t i = 0; i < o->sizes.size(); ++i) {
      int64_t& d = (*out)[off + i];
      int64_t s = o->sizes[i];
      if (s == d || s == 1) continue;
      if (d != 1) return false;  // torch raises; the meta call says how
      d = s;
    }
  }
  return true;
}

// Whether `t`'s strides, seen against the broadcast output shape `out` (0 on broadcast dimensions), never ask
// for a dimension order other than the output's own: every pair of dimensions with non-zero strides has the
// outer one strided more, or equally with an inner one no longer than the outer. Those are the comparisons
// both TensorIterator (reorder_dimensions) and the reference implementations
// (compute_elementwise_output_logical_to_physical_perm) sort dimensions by.
bool orders_like_output(const Arg& t, const std::vector<int64_t>& out) {
  size_t off = out.size() - t.sizes.size();
  auto stride = [&](size_t d) -> int64_t {
    if (d < off) return 0;
    return t.sizes[d - off] == 1 && out[d] != 1 ? 0 : t.strides[d - off];
  };
  for (size_t outer = 0; outer < out.size(); ++outer)
    for (size_t inner = outer + 1; inner < out.size(); ++inner) {
      int64_t so = stride(outer), si = stride(inner);
      if (so == 0 || si == 0) continue;
      if (si > so || (si == so && out[inner] > out[outer])) return false;
    }
  return true;
}

// torch's is_contiguous(): strides of size-1 dimensions do not count.
bool is_contiguous(const Arg& t) {
  int64_t expected = 1;
  for (size_t i = t.sizes.size(); i-- > 0;) {
    if (t.sizes[i] == 1) continue;
    if (t.strides[i] != expected) return false;
    expected *= t.sizes[i];
  }
  return true;
}

// Whether the first tensor of the output's shape has strides that decide every comparison of two dimensions
// for the output's order: all non-zero and strictly decreasing. Both sorts ask the tensors in operand order
// and take the first decisive answer.
bool first_tensor_decides(const std::vector<const Arg*>& ops, const std::vector<int64_t>& out) {
  for (const Arg* o : ops) {
    if (!o->tensor) continue;
    if (o->sizes != out) return false;
    for (size_t i = 0; i < out.size(); ++i)
      if (o->strides[i] <= 0 || (i + 1 < out.size() && o->strides[i] <= o->strides[i + 1])) return false;
    return true;
  }
  return false;
}

// Whether torch gives this op's output contiguous strides, on CPU and on meta tensors alike. Row-major inputs
// always do (see meta_args.h). Otherwise it takes two tensors or more, since the reference implementations
// keep a lone dense input's strides (size-1 dimensions included) where TensorIterator makes them contiguous,
// and no 4-d output, where channels-last inputs take other shortcuts. Then either every operand is a
// contiguous tensor of the output's shape (both take a contiguous shortcut before looking at strides; a
// Python scalar would keep TensorIterator off its shortcut), or the tensors agree on the output's order, or
// (when `ops` are in torch's operand order) the first one settles it.
bool contiguous_output(const std::vector<const Arg*>& ops, const std::vector<int64_t>& out, bool in_order) {
  int tensors = 0;
  bool all_row_major = true, all_contiguous_alike = true;
  for (const Arg* o : ops) {
    all_contiguous_alike &= o->tensor && o->sizes == out && is_contiguous(*o);
    if (!o->tensor) continue;
    ++tensors;
    all_row_major &= row_major(o->sizes, o->strides);
  }
  if (all_row_major) return true;
  if (tensors < 2 || out.size() == 4) return false;
  if (all_contiguous_alike || (in_order && first_tensor_decides(ops, out))) return true;
  for (const Arg* o : ops)
    if (o->tensor && !orders_like_output(*o, out)) return false;
  return true;
}

bool kwargs_ok(const OpSpec& spec, PyObject* kwargs) {
  if (!kwargs || PyDict_GET_SIZE(kwargs) == 0) return true;
  if (!spec.kwarg || PyDict_GET_SIZE(kwargs) != 1) return false;
  PyObject* value = PyDict_GetItemWithError(kwargs, spec.kwarg);
  if (!value) {
    PyErr_Clear();
    return false;
  }
  int eq = PyObject_RichCompareBool(value, spec.kwarg_default, Py_EQ);
  if (eq < 0) PyErr_Clear();
  return eq == 1 && Py_TYPE(value) == Py_TYPE(spec.kwarg_default);
}

// The result dtype of the op for these operands, or kNone when torch raises or the rule is not modelled.
int8_t result_dtype(const OpSpec& spec, const std::vector<Arg>& ops) {
  auto default_dtype = [] { return dtypes().default_dtype(); };
  if (spec.arity == 1) {
    int8_t in = ops[0].dt;
    switch (spec.rule) {
      case Rule::ToFloat: return is_float(in) ? in : default_dtype();
      case Rule::Sub:
      case Rule::Keep: return in == kBool ? kNone : in;
      case Rule::Invert: return is_float(in) ? kNone : in;
      case Rule::FloatOnly: return is_float(in) ? in : kNone;
      case Rule::Cast: return spec.cast_to;
      default: return kNone;
    }
  }
  if (spec.rule == Rule::Where) {
    if (!ops[0].tensor || ops[0].dt != kBool) return kNone;
    return result_type({&ops[1], &ops[2]});
  }
  int8_t common = result_type({&ops[0], &ops[1]});
  if (common == kNone) return kNone;
  switch (spec.rule) {
    case Rule::Arith: return common;
    case Rule::Sub: return ops[0].dt == kBool || ops[1].dt == kBool ? kNone : common;
    case Rule::FloorDiv:
    case Rule::Mod: return common == kBool ? kNone : common;
    case Rule::TrueDiv: return is_float(common) ? common : default_dtype();
    case Rule::Pow:
      if (common == kBool) return kNone;
      if (!is_float(common) && !ops[1].tensor && ops[1].dt == kI64 && ops[1].int_value < 0) return kNone;
      return common;
    case Rule::Compare: return kBool;
    case Rule::Bitwise: return is_float(common) ? kNone : common;
    default: return kNone;
  }
}

}  // namespace

namespace {

// A CPU tensor of `t`'s dtype and number of dimensions, one element: enough for a dtype check.
PyRef cpu_stand_in(PyObject* t) {
  const auto& T = torch_refs();
  PyRef dtype = PyRef::steal(PyObject_GetAttrString(t, "dtype"));
  PyRef ndim = PyRef::steal(PyObject_GetAttrString(t, "ndim"));
  if (!dtype || !ndim) return PyRef();
  PyRef shape = PyRef::steal(PyTuple_New(PyLong_AsSsize_t(ndim.get())));
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(shape.get()); ++i) PyTuple_SET_ITEM(shape.get(), i, PyLong_FromLong(1));
  PyRef kwargs = PyRef::steal(PyDict_New());
  PyDict_SetItemString(kwargs.get(), "dtype", dtype.get());
  PyRef zeros = PyRef::steal(PyObject_GetAttrString(T.torch.get(), "zeros"));
  PyRef args = PyRef::steal(PyTuple_Pack(1, shape.get()));
  return zeros ? PyRef::steal(PyObject_Call(zeros.get(), args.get(), kwargs.get())) : PyRef();
}

bool may_refuse_dtypes(PyObject* target, PyObject* args, PyObject* kwargs) {
  const OpTable& tb = table();
  auto it = tb.find(target);
  if (it == tb.end()) return false;
  const OpSpec& spec = it->second;
  if (!PyTuple_Check(args) || PyTuple_GET_SIZE(args) != spec.arity || !kwargs_ok(spec, kwargs)) return false;
  std::vector<Arg> ops(spec.arity);
  bool any_tensor = false;
  for (size_t i = 0; i < ops.size(); ++i) {
    PyObject* a = PyTuple_GET_ITEM(args, i);
    if (torch_refs().is_tensor(a)) {  // the dtype is all the rules read (read_arg takes no empty tensor)
      PyRef dtype = PyRef::steal(PyObject_GetAttrString(a, "dtype"));
      ops[i].tensor = true;
      ops[i].dt = dtype ? dtypes().index(dtype.get()) : kNone;
    } else if (!read_arg(a, &ops[i], /*any_layout=*/true)) {
      PyErr_Clear();
      return false;
    }
    if (ops[i].dt == kNone) {
      PyErr_Clear();
      return false;
    }
    any_tensor |= ops[i].tensor;
  }
  return any_tensor && result_dtype(spec, ops) == kNone;
}

}  // namespace

bool elementwise_dtypes_accepted(PyObject* target, PyObject* args, PyObject* kwargs) {
  if (!may_refuse_dtypes(target, args, kwargs)) return true;
  const auto& T = torch_refs();
  PyRef cpu_args = PyRef::steal(PyTuple_New(PyTuple_GET_SIZE(args)));
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args); ++i) {
    PyObject* a = PyTuple_GET_ITEM(args, i);
    PyRef c = T.is_tensor(a) ? cpu_stand_in(a) : PyRef::borrow(a);
    if (!c) {
      PyErr_Clear();
      return true;  // no stand-in: the meta call decides, as before
    }
    PyTuple_SET_ITEM(cpu_args.get(), i, c.release());
  }
  PyRef out = PyRef::steal(PyObject_Call(target, cpu_args.get(), kwargs));
  return static_cast<bool>(out);
}

std::optional<ComputedMeta> elementwise_meta(PyObject* target, PyObject* args, PyObject* kwargs, bool grad_enabled) {
  const OpTable& tb = table();
  auto it = tb.find(target);
  if (it == tb.end()) return std::nullopt;
  const OpSpec& spec = it->second;
  if (!PyTuple_Check(args) || PyTuple_GET_SIZE(args) != spec.arity || !kwargs_ok(spec, kwargs)) return std::nullopt;

  std::vector<Arg> ops(spec.arity);
  std::vector<const Arg*> refs;
  bool any_tensor = false, any_requires_grad = false;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!read_arg(PyTuple_GET_ITEM(args, i), &ops[i], /*any_layout=*/true)) return std::nullopt;
    if (ops[i].tensor) {
      any_tensor = true;
      any_requires_grad |= ops[i].requires_grad;
    } else if (spec.all_tensors || (i == 0 && (spec.self_tensor || spec.rule == Rule::Where))) {
      return std::nullopt;
    }
    refs.push_back(&ops[i]);
  }
  if (!any_tensor) return std::nullopt;
  int8_t dt = result_dtype(spec, ops);
  std::vector<int64_t> sizes;
  if (dt == kNone || !broadcast(refs, &sizes)) return std::nullopt;

  const Arg& self = ops[0];
  bool writes_self = spec.inplace && self.tensor;
  if (writes_self || spec.rule == Rule::Cast) {
    // In-place ops check their destination for overlap, and casts keep dense layouts: row-major only.
    for (const Arg& o : ops)
      if (o.tensor && !row_major(o.sizes, o.strides)) return std::nullopt;
  } else if (!contiguous_output(refs, sizes, !spec.reflected)) {
    return std::nullopt;
  }
  if (writes_self) {
    // Torch refuses results it cannot write back, broadcasting the destination, and (with grad on) in-place
    // changes to tensors that autograd tracks; the meta call reproduces those errors and autograd's state.
    if (!can_cast(dt, self.dt) || sizes != self.sizes || (grad_enabled && any_requires_grad)) return std::nullopt;
    return same_object(self);
  }
  if (spec.rule == Rule::Cast && self.dt == dt) return same_object(self);
  return fresh_result(dt, std::move(sizes), grad_enabled && is_float(dt) && any_requires_grad);
}

}  // namespace fastcomp::frontend
