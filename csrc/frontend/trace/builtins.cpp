// Python builtins and pure library functions called from traced code. Most fold to constants; a few
// (len, isinstance, enumerate, zip, ...) reason about symbolic Values.
#include <fmt/format.h>

#include <string_view>

#include "cpython/gil_once.h"
#include "frontend/trace/torch_refs.h"
#include "frontend/trace/tracer.h"
#include "support/pystr.h"

namespace fastcomp::frontend {
namespace {

using Kwargs = std::vector<std::pair<std::string, ValueRef>>;

PyObject* builtin(const char* name) {  // borrowed
  static cpython::GilOnce<PyObject> dict;
  return PyDict_GetItemString(dict.get([] { return PyModule_GetDict(PyImport_ImportModule("builtins")); }), name);
}

ValueRef boolean(bool b) { return make_const_borrowed(b ? Py_True : Py_False); }

// The Python type a Value has at run time.
PyObject* type_of(const Value& v) {
  switch (v.kind) {
    case VKind::Tensor: return reinterpret_cast<PyObject*>(v.tensor_type);
    case VKind::SymInt:
    case VKind::Const:
    case VKind::Object: return reinterpret_cast<PyObject*>(Py_TYPE(v.obj.get()));
    case VKind::Tuple: return v.obj ? v.obj.get() : reinterpret_cast<PyObject*>(&PyTuple_Type);
    case VKind::List: return reinterpret_cast<PyObject*>(&PyList_Type);
    case VKind::Dict: return reinterpret_cast<PyObject*>(&PyDict_Type);
    case VKind::Record: return v.obj.get();
    case VKind::Function: return reinterpret_cast<PyObject*>(&PyFunction_Type);
    case VKind::Method: return reinterpret_cast<PyObject*>(&PyMethod_Type);
    case VKind::Slice: return reinterpret_cast<PyObject*>(&PySlice_Type);
    default: return nullptr;
  }
}

// Library modules whose functions are pure: called for real at trace time on constant arguments.
bool is_pure_library_function(PyObject* fn) {
  PyRef module = PyRef::steal(PyObject_GetAttrString(fn, "__module__"));
  if (!module || !PyUnicode_Check(module.get())) {
    PyErr_Clear();
    PyObject* self = PyCFunction_Check(fn) ? PyCFunction_GET_SELF(fn) : nullptr;
    return self && PyModule_Check(self) && (std::string_view(PyModule_GetName(self)) == "math");
  }
  std::string_view m = PyUnicode_AsUTF8(module.get());
  return m == "math" || m == "_operator" || m == "operator";
}

}  // namespace

ValueRef Tracer::call_builtin(PyObject* fn, std::vector<ValueRef>& args, Kwargs& kwargs) {
  auto is = [&](const char* name) { return fn == builtin(name); };
  auto all_const = [&](PyRef* tuple) {
    *tuple = PyRef::steal(PyTuple_New(args.size()));
    for (size_t i = 0; i < args.size(); ++i) {
      PyRef c = as_python_constant(args[i]);
      if (!c || args[i]->is(VKind::Object)) return false;
      PyTuple_SET_ITEM(tuple->get(), i, c.release());
    }
    return kwargs.empty();
  };
  auto fold_real = [&](const PyRef& tuple) {
    PyRef out = PyRef::steal(PyObject_Call(fn, tuple.get(), nullptr));
    if (!out) {
      throw UserCodeError("builtin call raised " + take_error_message());
    }
    return wrap_untracked(out.get());
  };

  if (is("print")) throw Unsupported(BreakCode::SideEffect, "print() inside a compiled function");
  if (is("setattr") || is("delattr")) throw Unsupported(BreakCode::SideEffect, "setattr()/delattr() on an object");
  if (is("len") && args.size() == 1) {
    const ValueRef& v = args[0];
    if (v->is(VKind::Tensor) && !v->shape.empty()) return sym_size(v, 0);
    if (v->is(VKind::Tensor)) {
      PyRef n = PyRef::steal(PyObject_Length(v->meta.get()) >= 0 ? PyLong_FromSsize_t(PyObject_Length(v->meta.get())) : nullptr);
      if (!n) {
        PyErr_Clear();
        throw UserCodeError("len() of a 0-d tensor");
      }
      return make_const(n);
    }
    if (v->is(VKind::Const)) {
      PyRef t;
      all_const(&t);
      return fold_real(t);
    }
    return make_const(PyRef::steal(PyLong_FromSize_t(unpack(v, "take len() of").size())));
  }
  if ((is("isinstance") || is("issubclass")) && args.size() == 2) {
    PyRef cls = as_python_constant(args[1]);
    if (!cls) throw Unsupported(BreakCode::UnsupportedValue, "isinstance() with a non-constant class");
    PyObject* subject = is("isinstance") ? type_of(*args[0]) : as_python_constant(args[0]).get();
    if (!subject) throw Unsupported(BreakCode::UnsupportedValue, "isinstance() of " + describe(*args[0]));
    int r = PyObject_IsSubclass(subject, cls.get());
    if (r < 0) {
      PyErr_Clear();
      throw UserCodeError("isinstance() arg 2 must be a type or tuple of types");
    }
    return boolean(r == 1);
  }
  if ((is("getattr") || is("hasattr")) && args.size() >= 2) {
    PyRef name = as_python_constant(args[1]);
    if (!name || !PyUnicode_Check(name.get())) throw Unsupported(BreakCode::UnsupportedValue, "getattr() with a non-constant name");
    try {
      ValueRef v = get_attr(args[0], name.get());
      return is("hasattr") ? boolean(true) : v;
    } catch (const UserCodeError&) {
      if (is("hasattr")) return boolean(false);
      if (args.size() == 3) return args[2];
      throw;
    }
  }
  if (is("type") && args.size() == 1) {
    PyObject* t = type_of(*args[0]);
    if (!t) throw Unsupported(BreakCode::UnsupportedValue, "type() of " + describe(*args[0]));
    return make_object(PyRef::borrow(t), -1);
  }
  if (is("iter") && args.size() == 1) return make_seq(VKind::Iterator, unpack(args[0], "iterate over"));
  if (is("next") && !args.empty()) {
    ValueRef it = args[0];
    if (!it->is(VKind::Iterator)) throw Unsupported(BreakCode::UnsupportedValue, "next() of " + describe(*it));
    if (it->pos < it->items.size()) return it->items[it->pos++];
    if (args.size() > 1) return args[1];
    throw UserCodeError("StopIteration");
  }
  if (is("enumerate") && !args.empty()) {
    long start = args.size() > 1 ? PyLong_AsLong(as_python_constant(args[1]).get()) : 0;
    for (auto& [k, v] : kwargs)
      if (k == "start") start = PyLong_AsLong(as_python_constant(v).get());
    std::vector<ValueRef> items = unpack(args[0], "enumerate");
    std::vector<ValueRef> out;
    for (size_t i = 0; i < items.size(); ++i)
      out.push_back(make_seq(VKind::Tuple, {make_const(PyRef::steal(PyLong_FromLong(start + long(i)))), items[i]}));
    return make_seq(VKind::Iterator, std::move(out));
  }
  if (is("zip")) {
    std::vector<std::vector<ValueRef>> seqs;
    size_t n = SIZE_MAX;
    for (auto& a : args) {
      seqs.push_back(unpack(a, "zip"));
      n = std::min(n, seqs.back().size());
    }
    if (seqs.empty()) n = 0;
    std::vector<ValueRef> out;
    for (size_t i = 0; i < n; ++i) {
      std::vector<ValueRef> row;
      for (auto& s : seqs) row.push_back(s[i]);
      out.push_back(make_seq(VKind::Tuple, std::move(row)));
    }
    return make_seq(VKind::Iterator, std::move(out));
  }
  if (is("reversed") && args.size() == 1) {
    std::vector<ValueRef> items = unpack(args[0], "reverse");
    return make_seq(VKind::Iterator, std::vector<ValueRef>(items.rbegin(), items.rend()));
  }
  if ((is("list") || is("tuple")) && args.size() <= 1) {
    std::vector<ValueRef> items = args.empty() ? std::vector<ValueRef>{} : unpack(args[0], "convert");
    return make_seq(is("list") ? VKind::List : VKind::Tuple, std::move(items));
  }
  if (is("dict")) {
    ValueRef d = make_seq(VKind::Dict, {});
    if (!args.empty()) {
      if (args[0]->is(VKind::Dict)) {
        d->keys = args[0]->keys;
        d->items = args[0]->items;
      } else {
        for (auto& pair : unpack(args[0], "build a dict from")) {
          auto kv = unpack(pair, "unpack");
          d->keys.push_back(kv.at(0));
          d->items.push_back(kv.at(1));
        }
      }
    }
    for (auto& [k, v] : kwargs) {
      d->keys.push_back(make_const(PyRef::steal(PyUnicode_FromString(k.c_str()))));
      d->items.push_back(v);
    }
    return d;
  }
  if ((is("any") || is("all")) && args.size() == 1) {
    bool want = is("any");
    for (auto& item : unpack(args[0], "iterate over"))
      if (truthiness(item) == want) return boolean(want);
    return boolean(!want);
  }
  if (is("sum") && !args.empty()) {
    ValueRef acc = args.size() > 1 ? args[1] : make_const(PyRef::steal(PyLong_FromLong(0)));
    for (auto& item : unpack(args[0], "sum")) acc = binary_op(static_cast<int>(BinaryOpKind::Add), acc, item);
    return acc;
  }
  if ((is("min") || is("max")) && !args.empty()) {
    std::vector<ValueRef> items = args.size() == 1 ? unpack(args[0], "iterate over") : args;
    PyRef seq = as_python_constant(make_seq(VKind::Tuple, items));
    if (!seq) throw Unsupported(BreakCode::UnsupportedValue, "min()/max() over tensors (use torch.minimum/maximum)");
    PyRef one = PyRef::steal(PyTuple_Pack(1, seq.get()));
    return fold_real(one);
  }
  if (is("abs") && args.size() == 1 && args[0]->is(VKind::Tensor))
    return call_torch(PyObject_GetAttrString(torch_refs().torch.get(), "abs"), "torch.abs", args, {});
  if ((is("int") || is("float") || is("bool") || is("complex")) && args.size() == 1 && args[0]->is(VKind::Tensor))
    throw Unsupported(BreakCode::DataDependentValue, "int()/float()/bool() of a tensor needs its value");
  if (is("bool") && args.size() == 1) return boolean(truthiness(args[0]));
  if (is("callable") && args.size() == 1) {
    VKind k = args[0]->kind;
    if (k == VKind::Function || k == VKind::Method) return boolean(true);
    if (k == VKind::Object) return boolean(PyCallable_Check(args[0]->obj.get()));
    return boolean(false);
  }
  if (is("map") && args.size() >= 2) {
    std::vector<std::vector<ValueRef>> seqs;
    size_t n = SIZE_MAX;
    for (size_t i = 1; i < args.size(); ++i) {
      seqs.push_back(unpack(args[i], "map over"));
      n = std::min(n, seqs.back().size());
    }
    std::vector<ValueRef> out;
    for (size_t i = 0; i < n; ++i) {
      std::vector<ValueRef> call_args;
      for (auto& s : seqs) call_args.push_back(s[i]);
      out.push_back(call(args[0], std::move(call_args), {}));
    }
    return make_seq(VKind::Iterator, std::move(out));
  }
  static const char* kFoldable[] = {"range", "int", "float", "bool", "str", "round", "divmod", "pow", "abs",
                                    "sorted", "slice", "repr", "hash", "ord", "chr", "complex", "frozenset"};
  for (const char* name : kFoldable) {
    if (!is(name)) continue;
    PyRef t;
    if (!all_const(&t)) throw Unsupported(BreakCode::UnsupportedValue, fmt::format("{}() on non-constant arguments", name));
    return fold_real(t);
  }
  if (is_pure_library_function(fn)) {
    PyRef t;
    if (all_const(&t)) return fold_real(t);
  }
  // Namedtuple and dataclass construction build records whose fields stay symbolic.
  if (PyType_Check(fn)) {
    PyRef fields = PyRef::steal(PyObject_GetAttrString(fn, "_fields"));
    if (fields && PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(fn), &PyTuple_Type)) {
      auto rec = std::make_shared<Value>();
      rec->kind = VKind::Record;
      rec->obj = PyRef::borrow(fn);
      PyRef defaults = PyRef::steal(PyObject_GetAttrString(fn, "_field_defaults"));
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields.get()); ++i) {
        PyObject* name = PyTuple_GET_ITEM(fields.get(), i);
        ValueRef v = i < static_cast<Py_ssize_t>(args.size()) ? args[i] : nullptr;
        for (auto& [k, kv] : kwargs)
          if (PyUnicode_CompareWithASCIIString(name, k.c_str()) == 0) v = kv;
        if (!v && defaults && PyDict_GetItem(defaults.get(), name)) v = wrap_untracked(PyDict_GetItem(defaults.get(), name));
        if (!v) throw UserCodeError("missing namedtuple field");
        rec->keys.push_back(make_const_borrowed(name));
        rec->items.push_back(v);
      }
      return rec;
    }
    PyErr_Clear();
    PyRef dc_fields = PyRef::steal(PyObject_GetAttrString(fn, "__dataclass_fields__"));
    if (dc_fields && !PyObject_HasAttrString(fn, "__post_init__")) {
      auto rec = std::make_shared<Value>();
      rec->kind = VKind::Record;
      rec->obj = PyRef::borrow(fn);
      size_t positional = 0;
      PyObject *name, *field;
      Py_ssize_t pos = 0;
      while (PyDict_Next(dc_fields.get(), &pos, &name, &field)) {
        ValueRef v = positional < args.size() ? args[positional] : nullptr;
        ++positional;
        for (auto& [k, kv] : kwargs)
          if (PyUnicode_CompareWithASCIIString(name, k.c_str()) == 0) v = kv;
        if (!v) {
          PyRef dflt = PyRef::steal(PyObject_GetAttrString(field, "default"));
          PyRef missing = PyRef::steal(PyObject_GetAttrString(PyRef::steal(PyImport_ImportModule("dataclasses")).get(), "MISSING"));
          if (!dflt || dflt.get() == missing.get()) throw Unsupported(BreakCode::UnsupportedCall, "dataclass field without a value");
          v = wrap_untracked(dflt.get());
        }
        rec->keys.push_back(make_const_borrowed(name));
        rec->items.push_back(v);
      }
      return rec;
    }
    PyErr_Clear();
    const auto& T = torch_refs();
    if (fn == T.size_type.get() || fn == T.device_type.get() || fn == T.dtype_type.get()) {
      PyRef t;
      if (all_const(&t)) return fold_real(t);
    }
    throw Unsupported(BreakCode::UnsupportedCall,
                      fmt::format("constructing an object of class {}", reinterpret_cast<PyTypeObject*>(fn)->tp_name));
  }
  PyRef name = PyRef::steal(PyObject_Repr(fn));
  if (!name) PyErr_Clear();
  throw Unsupported(BreakCode::UnsupportedCall, fmt::format("call to {}", name ? PyUnicode_AsUTF8(name.get()) : "?"));
}

}  // namespace fastcomp::frontend
