#include "frontend/trace/elementwise_meta.h"

#include <initializer_list>
#include <unordered_map>
#include <vector>

#include "frontend/trace/torch_refs.h"

namespace fastcomp::frontend {
namespace {

// The dtypes this path knows, in c10's category order. Complex, wide unsigned, float8 and quantized dtypes go
// to the meta call.
constexpr int8_t kNone = -1, kBool = 0, kU8 = 1, kI8 = 2, kI16 = 3, kI32 = 4, kI64 = 5, kF16 = 6, kBF16 = 7, kF32 = 8,
                 kF64 = 9, kNumDt = 10;
constexpr const char* kDtNames[kNumDt] = {"bool",  "uint8",   "int8",     "int16",   "int32",
                                          "int64", "float16", "bfloat16", "float32", "float64"};

bool is_float(int d) { return d >= kF16; }

enum class Rule : uint8_t {
  Arith,      // add, mul, maximum, minimum: the promoted dtype
  Sub,        // as Arith; torch refuses bool operands
  TrueDiv,    // integral and bool results become the default dtype
  FloorDiv,   // as Sub
  Mod,        // as Sub
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
};

struct Tables {
  PyObject* dtypes[kNumDt] = {};  // torch.<name>, owned
  int8_t promote[kNumDt][kNumDt];  // torch.promote_types, asked once per pair
  std::unordered_map<PyObject*, OpSpec> ops;  // keyed by the callable; keys owned
  PyObject* get_default_dtype = nullptr;
  PyObject* tensor_type = nullptr;
  PyObject* parameter_type = nullptr;
  PyObject *s_dtype, *s_shape, *s_stride, *s_requires_grad, *s_storage_offset;  // interned names
};

int8_t dt_index(const Tables& tb, PyObject* dtype) {
  for (int8_t i = 0; i < kNumDt; ++i)
    if (tb.dtypes[i] == dtype) return i;
  return kNone;
}

// Registers `owner.name` (skipped when this torch lacks it).
void add(Tables& tb, PyObject* owner, const char* name, OpSpec spec) {
  PyObject* fn = PyObject_GetAttrString(owner, name);
  if (!fn) {
    PyErr_Clear();
    return;
  }
  tb.ops.emplace(fn, spec);  // the reference stays with the table
}

struct Family {
  Rule rule;
  const char* op;   // operator module function, or null
  const char* iop;  // its in-place form, or null
  std::initializer_list<const char*> torch_fns;
  std::initializer_list<const char*> methods;  // Tensor methods, including the reflected dunders
  std::initializer_list<const char*> inplace_methods;
};

Tables* build_tables() {
  auto* tb = new Tables();
  const auto& T = torch_refs();
  PyObject* torch = T.torch.get();
  PyObject* tensor = T.tensor_type.get();
  tb->tensor_type = tensor;
  tb->parameter_type = T.parameter_type.get();
  tb->get_default_dtype = T.get_default_dtype.get();
  tb->s_dtype = PyUnicode_InternFromString("dtype");
  tb->s_shape = PyUnicode_InternFromString("shape");
  tb->s_stride = PyUnicode_InternFromString("stride");
  tb->s_requires_grad = PyUnicode_InternFromString("requires_grad");
  tb->s_storage_offset = PyUnicode_InternFromString("storage_offset");
  for (int i = 0; i < kNumDt; ++i) tb->dtypes[i] = PyObject_GetAttrString(torch, kDtNames[i]);
  PyRef promote_types = PyRef::steal(PyObject_GetAttrString(torch, "promote_types"));
  for (int i = 0; i < kNumDt; ++i)
    for (int j = 0; j < kNumDt; ++j) {
      PyRef r = PyRef::steal(PyObject_CallFunctionObjArgs(promote_types.get(), tb->dtypes[i], tb->dtypes[j], nullptr));
      tb->promote[i][j] = r ? dt_index(*tb, r.get()) : kNone;
    }
  PyErr_Clear();

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
    for (const char* n : f.torch_fns) add(*tb, torch, n, {f.rule, 2, false, /*self_tensor=*/true});
    for (const char* n : f.methods) add(*tb, tensor, n, {f.rule, 2, false, true});
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

const Tables& tables() {
  static Tables* tb = build_tables();
  return *tb;
}

struct Operand {
  PyObject* obj = nullptr;  // borrowed
  bool tensor = false;
  bool requires_grad = false;
  int8_t dt = kNone;  // a scalar's: the dtype of its wrapped number (a float's is the default dtype)
  std::vector<int64_t> sizes, strides;
  long long int_value = 0;  // Python int scalars
};

bool read_int_tuple(PyObject* t, std::vector<int64_t>* out) {
  if (!t || !PyTuple_Check(t)) return false;
  Py_ssize_t n = PyTuple_GET_SIZE(t);
  out->resize(n);
  for (Py_ssize_t i = 0; i < n; ++i) {
    (*out)[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(t, i));
    if ((*out)[i] == -1 && PyErr_Occurred()) return false;
  }
  return true;
}

// Strides torch would give a fresh tensor of `sizes`.
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> s(sizes.size());
  int64_t acc = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    s[i] = acc;
    acc *= sizes[i];
  }
  return s;
}

// Row-major with possible gaps (a contiguous tensor, or a slice of one such as x[..., :k]): each dimension's
// stride covers the whole of the dimensions to its right, and size-1 dimensions carry exactly that stride.
// For such inputs TensorIterator and the reference implementations both produce contiguous outputs; other
// layouts (permuted, expanded, size-1 dimensions with odd strides) make them pick stride orders this path
// does not reproduce.
bool row_major(const Operand& t) {
  int64_t span = 1;  // stride * size of the dimension to the right
  for (size_t i = t.sizes.size(); i-- > 0;) {
    if (t.sizes[i] == 0) return false;
    if (t.sizes[i] == 1 ? t.strides[i] != span : t.strides[i] < span) return false;
    span = t.strides[i] * t.sizes[i];
  }
  return true;
}

bool read_tensor(const Tables& tb, PyObject* o, Operand* t) {
  PyRef dtype = PyRef::steal(PyObject_GetAttr(o, tb.s_dtype));
  PyRef shape = PyRef::steal(PyObject_GetAttr(o, tb.s_shape));
  PyRef strides = PyRef::steal(PyObject_CallMethodNoArgs(o, tb.s_stride));
  PyRef requires_grad = PyRef::steal(PyObject_GetAttr(o, tb.s_requires_grad));
  if (!dtype || !requires_grad || !read_int_tuple(shape.get(), &t->sizes) ||
      !read_int_tuple(strides.get(), &t->strides) || t->sizes.size() != t->strides.size())
    return false;
  t->obj = o;
  t->tensor = true;
  t->dt = dt_index(tb, dtype.get());
  t->requires_grad = requires_grad.get() == Py_True;
  return t->dt != kNone && row_major(*t);
}

// Reads an argument: a plain tensor or a Python bool / int / float. `default_dt` is fetched on first need.
bool read_operand(const Tables& tb, PyObject* o, int8_t* default_dt, Operand* out) {
  PyTypeObject* type = Py_TYPE(o);
  if (type == reinterpret_cast<PyTypeObject*>(tb.tensor_type) ||
      type == reinterpret_cast<PyTypeObject*>(tb.parameter_type))
    return read_tensor(tb, o, out);
  out->obj = o;
  if (PyBool_Check(o)) {
    out->dt = kBool;
  } else if (PyLong_CheckExact(o)) {
    int overflow = 0;
    out->int_value = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow) return false;
    out->dt = kI64;
  } else if (PyFloat_CheckExact(o)) {
    if (*default_dt == kNone) {
      PyRef d = PyRef::steal(PyObject_CallNoArgs(tb.get_default_dtype));
      *default_dt = d ? dt_index(tb, d.get()) : kNone;
    }
    out->dt = *default_dt;
  } else {
    return false;
  }
  return out->dt != kNone;
}

int8_t promote(const Tables& tb, int8_t a, int8_t b) {
  if (a == kNone) return b;
  if (b == kNone) return a;
  return tb.promote[a][b];
}

// c10's combine_categories without complex: a lower-priority group changes the result only when it is of a
// higher category (bool < integral < floating).
int8_t combine(const Tables& tb, int8_t higher, int8_t lower) {
  if (is_float(higher)) return higher;
  if (higher == kBool || is_float(lower)) return promote(tb, higher, lower);
  return higher != kNone ? higher : lower;
}

// c10's result_type: dimensioned tensors, then zero-dim tensors, then wrapped Python scalars.
int8_t result_type(const Tables& tb, std::initializer_list<const Operand*> ops) {
  int8_t dim = kNone, zero = kNone, wrapped = kNone;
  for (const Operand* o : ops) {
    int8_t& group = !o->tensor ? wrapped : o->sizes.empty() ? zero : dim;
    group = promote(tb, group, o->dt);
  }
  return combine(tb, dim, combine(tb, zero, wrapped));
}

// c10::canCast: whether an in-place op may write a `from` result into a `to` tensor.
bool can_cast(int8_t from, int8_t to) {
  if (is_float(from) && !is_float(to)) return false;
  return !(from != kBool && to == kBool);
}

bool broadcast(const std::vector<const Operand*>& ops, std::vector<int64_t>* out) {
  size_t ndim = 0;
  for (const Operand* o : ops)
    if (o->tensor) ndim = std::max(ndim, o->sizes.size());
  out->assign(ndim, 1);
  for (const Operand* o : ops) {
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
int8_t result_dtype(const Tables& tb, const OpSpec& spec, const std::vector<Operand>& ops, int8_t* default_dt) {
  auto default_dtype = [&] {
    if (*default_dt == kNone) {
      PyRef d = PyRef::steal(PyObject_CallNoArgs(tb.get_default_dtype));
      *default_dt = d ? dt_index(tb, d.get()) : kNone;
    }
    return *default_dt;
  };
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
    return result_type(tb, {&ops[1], &ops[2]});
  }
  int8_t common = result_type(tb, {&ops[0], &ops[1]});
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

std::optional<ElementwiseOut> elementwise_meta(PyObject* target, PyObject* args, PyObject* kwargs, bool grad_enabled) {
  const Tables& tb = tables();
  auto it = tb.ops.find(target);
  if (it == tb.ops.end()) return std::nullopt;
  const OpSpec& spec = it->second;
  if (!PyTuple_Check(args) || PyTuple_GET_SIZE(args) != spec.arity || !kwargs_ok(spec, kwargs)) return std::nullopt;

  int8_t default_dt = kNone;
  std::vector<Operand> ops(spec.arity);
  std::vector<const Operand*> refs;
  bool any_tensor = false, any_requires_grad = false;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!read_operand(tb, PyTuple_GET_ITEM(args, i), &default_dt, &ops[i])) {
      PyErr_Clear();
      return std::nullopt;
    }
    if (ops[i].tensor) {
      any_tensor = true;
      any_requires_grad |= ops[i].requires_grad;
    } else if (spec.all_tensors || (i == 0 && (spec.self_tensor || spec.rule == Rule::Where))) {
      return std::nullopt;
    }
    refs.push_back(&ops[i]);
  }
  if (!any_tensor) return std::nullopt;
  int8_t dt = result_dtype(tb, spec, ops, &default_dt);
  std::vector<int64_t> sizes;
  if (dt == kNone || !broadcast(refs, &sizes)) {
    PyErr_Clear();
    return std::nullopt;
  }

  ElementwiseOut out;
  const Operand& self = ops[0];
  bool same_object = spec.rule == Rule::Cast && self.dt == dt;
  if (spec.inplace && self.tensor) {
    // Torch refuses results it cannot write back, broadcasting the destination, and (with grad on) in-place
    // changes to tensors that autograd tracks; the meta call reproduces those errors and autograd's state.
    if (!can_cast(dt, self.dt) || sizes != self.sizes || (grad_enabled && any_requires_grad)) return std::nullopt;
    same_object = true;
  }
  if (same_object) {
    PyRef offset = PyRef::steal(PyObject_CallMethodNoArgs(self.obj, tb.s_storage_offset));
    if (!offset) {
      PyErr_Clear();
      return std::nullopt;
    }
    out.alias = self.obj;
    out.meta.dtype = PyRef::borrow(tb.dtypes[self.dt]);
    out.meta.sizes = self.sizes;
    out.meta.strides = self.strides;
    out.meta.storage_offset = PyLong_AsLongLong(offset.get());
    out.meta.requires_grad = self.requires_grad;
    return out;
  }
  out.meta.dtype = PyRef::borrow(tb.dtypes[dt]);
  out.meta.strides = contiguous_strides(sizes);
  out.meta.sizes = std::move(sizes);
  out.meta.requires_grad = grad_enabled && is_float(dt) && any_requires_grad;
  return out;
}

}  // namespace fastcomp::frontend
