// Reading a call node's target and arguments the way the op lowerings need them.
#include <cstring>

#include "plan/lowering.h"
#include "support/pystr.h"

namespace fastcomp::plan::detail {

std::string op_name(const std::string& target_name) {
  std::string op = target_name.substr(target_name.rfind('.') + 1);
  if (op.size() > 4 && op.rfind("__", 0) == 0 && op.compare(op.size() - 2, 2, "__") == 0)
    op = op.substr(2, op.size() - 4);
  return op;
}

std::string called_op_name(const graph::Node& n) {
  std::string op = op_name(n.target_name);
  if (op != "fn" || !n.target) return op;
  if (PyRef name = PyRef::steal(PyObject_GetAttrString(n.target.get(), "__name__")); name && PyUnicode_Check(name.get()))
    return utf8(name.get());
  PyErr_Clear();
  return op;
}

const graph::Arg* CallArgs::get(size_t position, const char* name) const {
  if (position < node_.args.size()) return &node_.args[position];
  if (!node_.kwnames) return nullptr;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(node_.kwnames.get()); ++i)
    if (utf8(PyTuple_GET_ITEM(node_.kwnames.get(), i)) == name) return &node_.kwargs[i];
  return nullptr;
}

size_t CallArgs::slot_of(const graph::Arg* a) const {
  if (a >= node_.args.data() && a < node_.args.data() + node_.args.size()) return a - node_.args.data();
  return node_.args.size() + (a - node_.kwargs.data());
}

bool CallArgs::only_keywords(std::initializer_list<const char*> allowed) const {
  if (!node_.kwnames) return true;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(node_.kwnames.get()); ++i) {
    const std::string key = utf8(PyTuple_GET_ITEM(node_.kwnames.get(), i));
    bool ok = false;
    for (const char* a : allowed) ok |= key == a;
    if (!ok) return false;
  }
  return true;
}

bool same_device(const graph::TensorMeta& a, const graph::TensorMeta& b) {
  if (!a.device || !b.device) return false;
  const int same = PyObject_RichCompareBool(a.device.get(), b.device.get(), Py_EQ);
  if (same < 0) PyErr_Clear();
  return same == 1;
}

std::optional<double> const_number(const graph::Arg* a) {
  if (!a || a->kind != graph::Arg::Kind::Const) return std::nullopt;
  PyObject* v = a->value.get();
  if (PyBool_Check(v)) return v == Py_True ? 1.0 : 0.0;
  if (PyLong_Check(v)) {
    int overflow = 0;
    long long i = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow) return std::nullopt;
    return static_cast<double>(i);
  }
  if (PyFloat_Check(v)) return PyFloat_AS_DOUBLE(v);
  return std::nullopt;
}

std::optional<int64_t> const_int(const graph::Arg* a) {
  if (!a || a->kind != graph::Arg::Kind::Const || !PyLong_Check(a->value.get()) || PyBool_Check(a->value.get()))
    return std::nullopt;
  int overflow = 0;
  long long i = PyLong_AsLongLongAndOverflow(a->value.get(), &overflow);
  if (overflow) return std::nullopt;
  return i;
}

std::optional<bool> const_bool(const graph::Arg* a) {
  if (!a || a->kind != graph::Arg::Kind::Const || !PyBool_Check(a->value.get())) return std::nullopt;
  return a->value.get() == Py_True;
}

bool is_none(const graph::Arg* a) { return !a || (a->kind == graph::Arg::Kind::Const && a->value.get() == Py_None); }

std::optional<std::vector<int64_t>> const_int_list(const graph::Arg* a) {
  if (!a) return std::nullopt;
  if (auto i = const_int(a)) return std::vector<int64_t>{*i};
  std::vector<int64_t> out;
  if (a->kind == graph::Arg::Kind::Const) {
    PyObject* v = a->value.get();
    if (!PyTuple_Check(v) && !PyList_Check(v)) return std::nullopt;  // torch.Size is a tuple
    PyRef seq = PyRef::steal(PySequence_Fast(v, "ints"));
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq.get()); ++i) {
      PyObject* item = PySequence_Fast_GET_ITEM(seq.get(), i);
      if (!PyLong_Check(item)) return std::nullopt;
      out.push_back(PyLong_AsLongLong(item));
    }
    return out;
  }
  if (a->kind != graph::Arg::Kind::Tuple && a->kind != graph::Arg::Kind::List) return std::nullopt;
  for (const auto& item : a->items) {
    auto i = const_int(&item);
    if (!i) return std::nullopt;
    out.push_back(*i);
  }
  return out;
}

std::optional<DType> dtype_of(PyObject* torch_dtype) {
  if (!torch_dtype) return std::nullopt;
  static const std::pair<const char*, DType> kTypes[] = {
      {"f32", DType::F32}, {"f16", DType::F16}, {"bf16", DType::BF16}, {"f64", DType::F64}, {"i64", DType::I64},
      {"i32", DType::I32}, {"i16", DType::I16}, {"i8", DType::I8},     {"u8", DType::U8},   {"b8", DType::Bool}};
  const std::string name = graph::dtype_short_name(torch_dtype);
  for (auto& [short_name, t] : kTypes)
    if (name == short_name) return t;
  return std::nullopt;
}

bool is_floating(DType t) { return t == DType::F16 || t == DType::BF16 || t == DType::F32 || t == DType::F64; }

DType opmath(DType t) { return t == DType::F16 || t == DType::BF16 ? DType::F32 : t; }

}  // namespace fastcomp::plan::detail
