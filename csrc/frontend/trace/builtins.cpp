// Python builtins called from traced code, and the builtin classes called as constructors (list, dict, set,
// OrderedDict...). Builtins that reason about symbolic Values (len, isinstance, getattr, iter, map, zip, sum...) are
// modelled; the others fold to constants when every argument is one. Pure library functions (math, operator) fold
// too; operator's functions on symbolic Values run as the operators they are.
#include <fmt/format.h>

#include <string_view>
#include <unordered_map>

#include "cpython/gil_once.h"
#include "frontend/trace/torch_refs.h"
#include "frontend/trace/tracer.h"
#include "support/pystr.h"

namespace fastcomp::frontend {
namespace {

using Kwargs = std::vector<std::pair<std::string, ValueRef>>;

enum class B {
  print, setattr, delattr, getattr, hasattr, len, isinstance, issubclass, type, iter, next, enumerate, zip, map,
  filter, reversed, list, tuple, dict, set, frozenset, any, all, sum, min, max, abs, int_, float_, bool_, complex_,
  callable, super, vars, object, str, repr, sorted, id, foldable
};

// builtins' functions and classes, by identity; built once (the builtins module lives for the process).
const std::unordered_map<PyObject*, B>& builtin_table() {
  static cpython::GilOnce<std::unordered_map<PyObject*, B>> table;
  return *table.get([] {
    auto* t = new std::unordered_map<PyObject*, B>();
    PyObject* dict = PyModule_GetDict(PyImport_ImportModule("builtins"));
    static const std::pair<const char*, B> kNames[] = {
        {"print", B::print},       {"setattr", B::setattr},     {"delattr", B::delattr},
        {"getattr", B::getattr},   {"hasattr", B::hasattr},     {"len", B::len},
        {"isinstance", B::isinstance}, {"issubclass", B::issubclass}, {"type", B::type},
        {"iter", B::iter},         {"next", B::next},           {"enumerate", B::enumerate},
        {"zip", B::zip},           {"map", B::map},             {"filter", B::filter},
        {"reversed", B::reversed}, {"list", B::list},           {"tuple", B::tuple},
        {"dict", B::dict},         {"set", B::set},             {"frozenset", B::frozenset},
        {"any", B::any},           {"all", B::all},             {"sum", B::sum},
        {"min", B::min},           {"max", B::max},             {"abs", B::abs},
        {"int", B::int_},          {"float", B::float_},        {"bool", B::bool_},
        {"complex", B::complex_},  {"callable", B::callable},   {"super", B::super},
        {"vars", B::vars},         {"object", B::object},       {"str", B::str},
        {"repr", B::repr},         {"sorted", B::sorted},       {"id", B::id},
        {"range", B::foldable},
        {"round", B::foldable},    {"divmod", B::foldable},     {"pow", B::foldable},
        {"slice", B::foldable},    {"hash", B::foldable},       {"ord", B::foldable},
        {"chr", B::foldable},      {"format", B::foldable},     {"bytes", B::foldable},
    };
    for (auto [name, b] : kNames)
      if (PyObject* o = PyDict_GetItemString(dict, name)) t->emplace(o, b);
    return t;
  });
}

ValueRef boolean(bool b) { return make_const_borrowed(b ? Py_True : Py_False); }

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

bool dict_like(const Value& v) {
  return v.is(VKind::Dict) ||
         (v.is(VKind::UserObject) && PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(v.obj.get()), &PyDict_Type));
}

ValueRef make_iterator(IterKind kind, std::vector<ValueRef> items) {
  ValueRef it = make_seq(VKind::Iterator, std::move(items));
  it->iter = kind;
  return it;
}

}  // namespace

ValueRef Tracer::call_operator(PyObject* fn, std::vector<ValueRef>& args) {
  PyRef name_obj = PyRef::steal(PyObject_GetAttrString(fn, "__name__"));
  if (!name_obj) return PyErr_Clear(), nullptr;
  const std::string name = utf8(name_obj.get());
  static const std::pair<const char*, BinaryOpKind> kBinary[] = {
      {"add", BinaryOpKind::Add},         {"sub", BinaryOpKind::Subtract},      {"mul", BinaryOpKind::Multiply},
      {"truediv", BinaryOpKind::TrueDivide}, {"floordiv", BinaryOpKind::FloorDivide}, {"mod", BinaryOpKind::Remainder},
      {"pow", BinaryOpKind::Power},       {"matmul", BinaryOpKind::MatrixMultiply}, {"and_", BinaryOpKind::And},
      {"or_", BinaryOpKind::Or},          {"xor", BinaryOpKind::Xor},           {"lshift", BinaryOpKind::Lshift},
      {"rshift", BinaryOpKind::Rshift}};
  if (args.size() == 2)
    for (auto [n, kind] : kBinary)
      if (name == n) return binary_op(static_cast<int>(kind), args[0], args[1]);
  static const std::pair<const char*, CompareKind> kCompare[] = {{"lt", CompareKind::Lt}, {"le", CompareKind::Le},
                                                                 {"eq", CompareKind::Eq}, {"ne", CompareKind::Ne},
                                                                 {"gt", CompareKind::Gt}, {"ge", CompareKind::Ge}};
  if (args.size() == 2)
    for (auto [n, kind] : kCompare)
      if (name == n) return compare(static_cast<int>(kind), args[0], args[1]);
  if (args.size() == 2 && name == "getitem") return subscript(args[0], args[1]);
  if (args.size() == 2 && name == "contains") return boolean(contains(args[0], args[1]));
  if (args.size() == 2 && (name == "is_" || name == "is_not")) return compare(name == "is_" ? -1 : -2, args[0], args[1]);
  if (args.size() == 1 && name == "not_") return boolean(!truthiness(args[0]));
  if (args.size() == 1 && name == "truth") return boolean(truthiness(args[0]));
  if (args.size() == 1 && name == "neg") return unary(Op::UNARY_NEGATIVE, args[0]);
  if (args.size() == 1 && name == "invert") return unary(Op::UNARY_INVERT, args[0]);
  if (args.size() == 3 && name == "setitem") {
    store_subscript(args[0], args[1], args[2]);
    return make_const_borrowed(Py_None);
  }
  return nullptr;
}

ValueRef Tracer::call_builtin(PyObject* fn, std::vector<ValueRef>& args, Kwargs& kwargs) {
  auto all_const = [&](PyRef* tuple) {
    *tuple = PyRef::steal(PyTuple_New(args.size()));
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i]->is(VKind::Object) && !PyType_Check(args[i]->obj.get())) return false;
      PyRef c = as_python_constant(args[i]);
      if (!c) return false;
      PyTuple_SET_ITEM(tuple->get(), i, c.release());
    }
    return kwargs.empty();
  };
  auto fold_real = [&](const PyRef& tuple) {
    PyRef out = PyRef::steal(PyObject_Call(fn, tuple.get(), nullptr));
    if (!out) {
      PyObject* known = known_exception();
      throw UserCodeError("builtin call raised " + take_error_message(), known);
    }
    return wrap_call_result(out.get());
  };
  auto kwarg = [&](const char* name) -> ValueRef {
    for (auto& [k, v] : kwargs)
      if (k == name) return v;
    return nullptr;
  };
  auto only_kwargs = [&](std::initializer_list<const char*> allowed) {
    for (auto& [k, v] : kwargs) {
      bool ok = false;
      for (const char* a : allowed) ok |= k == a;
      if (!ok) throw type_error(fmt::format("'{}' is an invalid keyword argument", k));
    }
  };

  auto entry = builtin_table().find(fn);
  if (entry == builtin_table().end()) {
    if (is_pure_library_function(fn)) {
      if (ValueRef v = call_operator(fn, args); v && kwargs.empty()) return v;
      PyRef t;
      if (all_const(&t)) return fold_real(t);
    }
    if (PyType_Check(fn) && PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(fn), &PyDict_Type)) {
      // OrderedDict and other dict subclasses implemented in C, whose items behave as dict's.
      static cpython::GilOnce<PyObject> defaultdict_type;
      PyObject* defaultdict = defaultdict_type.get([] { return cpython::import_attr("collections", "defaultdict"); });
      if (fn != defaultdict) {
        ValueRef d = new_instance(reinterpret_cast<PyTypeObject*>(fn));
        container_method(d, "update", args, kwargs);
        return d;
      }
    }
    const auto& T = torch_refs();
    // torch's value classes, immutable and computed from their arguments alone.
    static PyObject* finfo = PyObject_GetAttrString(T.torch.get(), "finfo");
    static PyObject* iinfo = PyObject_GetAttrString(T.torch.get(), "iinfo");
    if (fn == T.size_type.get() || fn == T.device_type.get() || (finfo && fn == finfo) || (iinfo && fn == iinfo)) {
      PyRef t;
      if (all_const(&t)) return fold_real(t);
    }
    if (PyType_Check(fn))
      throw Unsupported(BreakCode::UnsupportedCall,
                        fmt::format("constructing an object of class {}", reinterpret_cast<PyTypeObject*>(fn)->tp_name));
    PyRef name = PyRef::steal(PyObject_Repr(fn));
    if (!name) PyErr_Clear();
    throw Unsupported(BreakCode::UnsupportedCall, fmt::format("call to {}", name ? PyUnicode_AsUTF8(name.get()) : "?"));
  }

  switch (entry->second) {
    case B::print: throw Unsupported(BreakCode::SideEffect, "print() inside a compiled function");
    case B::setattr:
    case B::delattr: {
      size_t want = entry->second == B::setattr ? 3 : 2;
      if (args.size() != want || !kwargs.empty()) throw type_error(fmt::format("expected {} arguments", want));
      PyRef name = as_python_constant(args[1]);
      if (!name || !PyUnicode_Check(name.get())) throw type_error("attribute name must be string");
      store_attr(args[0], name.get(), want == 3 ? args[2] : nullptr);
      return make_const_borrowed(Py_None);
    }
    case B::getattr:
    case B::hasattr: {
      if (args.size() < 2 || args.size() > (entry->second == B::getattr ? 3u : 2u))
        throw type_error("getattr expected 2 or 3 arguments");
      PyRef name = as_python_constant(args[1]);
      if (!name || !PyUnicode_Check(name.get())) throw type_error("attribute name must be string");
      try {
        ValueRef v = get_attr(args[0], name.get());
        return entry->second == B::hasattr ? boolean(true) : v;
      } catch (const UserCodeError& e) {
        if (!e.type || !PyErr_GivenExceptionMatches(e.type, PyExc_AttributeError)) throw;
        PyErr_Clear();
        if (entry->second == B::hasattr) return boolean(false);
        if (args.size() == 3) return args[2];
        throw;
      }
    }
    case B::len: {
      if (args.size() != 1) throw type_error("len() takes exactly one argument");
      const ValueRef& v = args[0];
      if (v->is(VKind::Tensor) && !v->shape.empty()) return sym_size(v, 0);
      if (v->is(VKind::Tensor)) {
        Py_ssize_t n = PyObject_Length(v->meta.get());
        if (n < 0) {
          PyErr_Clear();
          throw type_error("len() of a 0-d tensor");
        }
        return make_const(PyRef::steal(PyLong_FromSsize_t(n)));
      }
      if (v->is(VKind::Const)) {
        PyRef t;
        all_const(&t);
        return fold_real(t);
      }
      if (is_frozen(*v)) return frozen_op("len", v, [](PyObject* x) {
        Py_ssize_t n = PyObject_Length(x);
        return n < 0 ? nullptr : PyLong_FromSsize_t(n);
      });
      if (v->is(VKind::UserObject) || v->is(VKind::Object)) {
        std::vector<ValueRef> children;
        if (module_container_items(v, &children)) return make_const(PyRef::steal(PyLong_FromSize_t(children.size())));
        PyTypeObject* type = python_type(*v);
        PyObject* len_fn = _PyType_Lookup(type, PyRef::steal(PyUnicode_InternFromString("__len__")).get());
        if (len_fn && PyFunction_Check(len_fn)) {
          note_class_read(type);
          return inline_function(len_fn, nullptr, {v}, {});
        }
      }
      if (v->is(VKind::Object) && PyDict_Check(v->obj.get()))
        return make_const(PyRef::steal(PyLong_FromSize_t(dict_contents(v)->keys.size())));
      if (dict_like(*v)) return make_const(PyRef::steal(PyLong_FromSize_t(v->keys.size())));
      if (v->is(VKind::DictView)) return make_const(PyRef::steal(PyLong_FromSize_t(v->items[0]->keys.size())));
      if (v->is(VKind::List) || v->is(VKind::Tuple) || v->is(VKind::Set) || v->is(VKind::Record))
        return make_const(PyRef::steal(PyLong_FromSize_t(v->items.size())));
      throw Unsupported(BreakCode::UnsupportedValue, "len() of " + describe(*v));
    }
    case B::isinstance:
    case B::issubclass: {
      if (args.size() != 2) throw type_error("isinstance expected 2 arguments");
      PyRef cls = as_python_constant(args[1]);
      if (!cls || args[1]->is(VKind::Tensor)) throw Unsupported(BreakCode::UnsupportedValue, "isinstance() with a non-constant class");
      PyObject* subject = entry->second == B::isinstance ? reinterpret_cast<PyObject*>(python_type(*args[0]))
                                                         : (args[0]->is(VKind::Object) ? args[0]->obj.get() : nullptr);
      if (!subject) throw Unsupported(BreakCode::UnsupportedValue, "isinstance() of " + describe(*args[0]));
      int r = PyObject_IsSubclass(subject, cls.get());
      if (r < 0) {
        PyObject* known = known_exception();
        throw UserCodeError(take_error_message(), known);
      }
      return boolean(r == 1);
    }
    case B::type: {
      if (args.size() != 1) throw Unsupported(BreakCode::UnsupportedCall, "type() with three arguments (making a class)");
      PyTypeObject* t = python_type(*args[0]);
      if (!t) throw Unsupported(BreakCode::UnsupportedValue, "type() of " + describe(*args[0]));
      return make_object(PyRef::borrow(reinterpret_cast<PyObject*>(t)), -1);
    }
    case B::iter:
      if (args.size() != 1) throw Unsupported(BreakCode::UnsupportedCall, "iter() with a sentinel");
      return make_iter(args[0], "iterate over");
    case B::next: {
      if (args.empty() || args.size() > 2) throw type_error("next expected 1 or 2 arguments");
      if (ValueRef v = iter_next(args[0])) return v;
      if (args.size() > 1) return args[1];
      throw stop_iteration();
    }
    case B::enumerate: {
      only_kwargs({"start"});
      if (args.empty()) throw type_error("enumerate() missing required argument 'iterable'");
      ValueRef start = args.size() > 1 ? args[1] : kwarg("start");
      PyRef s = start ? as_python_constant(start) : PyRef();
      ValueRef it = make_iterator(IterKind::Enumerate, {make_iter(args[0], "enumerate")});
      it->pos = s ? PyLong_AsSize_t(s.get()) : 0;
      if (PyErr_Occurred()) {
        PyErr_Clear();
        throw Unsupported(BreakCode::UnsupportedValue, "enumerate() with a negative or non-integer start");
      }
      return it;
    }
    case B::zip: {
      only_kwargs({"strict"});
      ValueRef strict = kwarg("strict");
      std::vector<ValueRef> its;
      for (auto& a : args) its.push_back(make_iter(a, "zip"));
      ValueRef it = make_iterator(IterKind::Zip, std::move(its));
      it->flag = strict && truthiness(strict);
      return it;
    }
    case B::map: {
      if (args.size() < 2) throw type_error("map() must have at least two arguments.");
      std::vector<ValueRef> items{args[0]};
      for (size_t i = 1; i < args.size(); ++i) items.push_back(make_iter(args[i], "map over"));
      return make_iterator(IterKind::Map, std::move(items));
    }
    case B::filter:
      if (args.size() != 2) throw type_error("filter expected 2 arguments");
      return make_iterator(IterKind::Filter, {args[0], make_iter(args[1], "filter")});
    case B::reversed: {
      if (args.size() != 1) throw type_error("reversed expected 1 argument");
      std::vector<ValueRef> items = unpack(args[0], "reverse");
      return make_iterator(IterKind::Snapshot, std::vector<ValueRef>(items.rbegin(), items.rend()));
    }
    case B::list:
    case B::tuple: {
      if (args.size() > 1 || !kwargs.empty()) throw type_error("expected at most 1 argument");
      std::vector<ValueRef> items = args.empty() ? std::vector<ValueRef>{} : unpack(args[0], "convert");
      return make_seq(entry->second == B::list ? VKind::List : VKind::Tuple, std::move(items));
    }
    case B::dict: {
      if (args.size() > 1) throw type_error(fmt::format("dict expected at most 1 argument, got {}", args.size()));
      ValueRef d = make_dict();
      container_method(d, "update", args, kwargs);
      return d;
    }
    case B::set:
    case B::frozenset: {
      if (args.size() > 1 || !kwargs.empty()) throw type_error("set expected at most 1 argument");
      ValueRef s = new_set(entry->second == B::frozenset);
      if (!args.empty()) set_update(s, args[0]);
      return s;
    }
    case B::any:
    case B::all: {
      if (args.size() != 1) throw type_error("any()/all() take exactly one argument");
      bool want = entry->second == B::any;
      ValueRef it = make_iter(args[0], "iterate over");
      while (ValueRef item = iter_next(it))
        if (truthiness(item) == want) return boolean(want);
      return boolean(!want);
    }
    case B::sum: {
      only_kwargs({"start"});
      if (args.empty() || args.size() > 2) throw type_error("sum() takes at most 2 arguments");
      ValueRef acc = args.size() > 1 ? args[1] : kwarg("start");
      if (!acc) acc = make_const(PyRef::steal(PyLong_FromLong(0)));
      ValueRef it = make_iter(args[0], "sum");
      while (ValueRef item = iter_next(it)) acc = binary_op(static_cast<int>(BinaryOpKind::Add), acc, item);
      return acc;
    }
    case B::min:
    case B::max: {
      if (!kwargs.empty()) throw Unsupported(BreakCode::UnsupportedCall, "min()/max() with keyword arguments");
      std::vector<ValueRef> items = args.size() == 1 ? unpack(args[0], "iterate over") : args;
      if (items.empty()) throw value_error("min()/max() arg is an empty sequence");
      bool tensors = false;
      for (const ValueRef& v : items) tensors |= v->is(VKind::Tensor);
      if (tensors) throw Unsupported(BreakCode::DataDependentValue, "min()/max() over tensors (use torch.minimum/maximum)");
      // Pairwise, as CPython does: keeps sizes symbolic (with a guard on each comparison).
      ValueRef best = items[0];
      int cmp = entry->second == B::min ? static_cast<int>(CompareKind::Lt) : static_cast<int>(CompareKind::Gt);
      for (size_t i = 1; i < items.size(); ++i)
        if (truthiness(compare(cmp, items[i], best))) best = items[i];
      return best;
    }
    case B::abs:
      if (args.size() == 1 && args[0]->is(VKind::Tensor)) {
        PyRef abs_fn = PyRef::steal(PyObject_GetAttrString(torch_refs().torch.get(), "abs"));
        return call_torch(abs_fn.get(), "torch.abs", args, {});
      }
      break;
    case B::int_:
    case B::float_:
    case B::bool_:
    case B::complex_:
      if (args.size() == 1 && args[0]->is(VKind::Tensor))
        throw Unsupported(BreakCode::DataDependentValue, "int()/float()/bool() of a tensor needs its value");
      if (args.size() == 1 && entry->second == B::bool_) return boolean(truthiness(args[0]));
      if (args.size() == 1 && entry->second == B::int_ && args[0]->is(VKind::SymInt)) return args[0];
      break;
    case B::callable: {
      if (args.size() != 1) throw type_error("callable() takes exactly one argument");
      VKind k = args[0]->kind;
      if (k == VKind::Function || k == VKind::Method || k == VKind::Partial) return boolean(true);
      if (k == VKind::Object) return boolean(PyCallable_Check(args[0]->obj.get()));
      PyTypeObject* type = python_type(*args[0]);
      return boolean(type && _PyType_Lookup(type, PyRef::steal(PyUnicode_InternFromString("__call__")).get()));
    }
    case B::super: return make_super(args);
    case B::vars:
      if (args.size() != 1) throw Unsupported(BreakCode::UnsupportedCall, "vars() without an argument");
      return instance_dict(args[0]);
    case B::object:
      if (!args.empty() || !kwargs.empty()) throw type_error("object() takes no arguments");
      return new_instance(&PyBaseObject_Type);
    case B::str:
    case B::repr:
      // Classes (str(cls) is "<class '...'>") and constants; an instance's __str__/__repr__ may be anything.
      if (args.size() == 1 && args[0]->is(VKind::Object) && PyType_Check(args[0]->obj.get()) &&
          Py_TYPE(args[0]->obj.get()) == &PyType_Type) {
        PyRef t = PyRef::steal(PyTuple_Pack(1, args[0]->obj.get()));
        return fold_real(t);
      }
      break;
    case B::sorted: {
      if (args.size() != 1) throw type_error("sorted expected 1 argument");
      PyRef seq = as_python_constant(make_seq(VKind::List, unpack(args[0], "sort")));
      if (!seq) throw Unsupported(BreakCode::UnsupportedValue, "sorted() of values that are not constants");
      PyRef kw = PyRef::steal(PyDict_New());
      for (auto& [k, v] : kwargs) {
        PyRef c = as_python_constant(v);
        if (!c || v->is(VKind::Function)) throw Unsupported(BreakCode::UnsupportedValue, "sorted() with key= a traced function");
        PyDict_SetItemString(kw.get(), k.c_str(), c.get());
      }
      PyRef one = PyRef::steal(PyTuple_Pack(1, seq.get()));
      PyRef out = PyRef::steal(PyObject_Call(fn, one.get(), kw.get()));
      if (!out) {
        PyObject* known = known_exception();
        throw UserCodeError(take_error_message(), known);
      }
      return wrap_call_result(out.get());
    }
    case B::id: {
      if (args.size() != 1) throw type_error("id() takes exactly one argument");
      return identity_of(args[0]);
    }
    case B::foldable: break;
  }
  PyRef t;
  if (!all_const(&t)) {
    PyRef name = PyRef::steal(PyObject_GetAttrString(fn, "__name__"));
    if (!name) PyErr_Clear();
    throw Unsupported(BreakCode::UnsupportedValue,
                      fmt::format("{}() on non-constant arguments", name ? utf8(name.get()) : "builtin"));
  }
  return fold_real(t);
}

ValueRef Tracer::identity_of(const ValueRef& v) {
  if (v->is(VKind::Const) || (v->is(VKind::Object) && v->source < 0))
    return make_const(PyRef::steal(PyLong_FromVoidPtr(v->obj.get())));  // held by the code or a library: stable
  if (v->source >= 0 && !v->is(VKind::Tensor) && !v->is(VKind::Cell)) {
    // An object of the frame: its id is stable while the guard holds that it is the same object.
    PyObject* real = v->obj ? v->obj.get() : nullptr;
    if (!real) {
      for (auto& [o, known] : object_by_identity_)
        if (known.get() == v.get()) real = o;
    }
    if (real) {
      if (!guard_by_identity(real)) guard(GuardKind::IdMatch, v->source, real);
      return make_const(PyRef::steal(PyLong_FromVoidPtr(real)));
    }
  }
  // An object the trace made: a new one on every call, whose address is unknown while tracing. A made-up identity
  // serves comparisons and dict keys inside the trace (copy.deepcopy's memo); it must not leave it.
  auto it = made_up_ids_.find(v.get());
  if (it == made_up_ids_.end()) it = made_up_ids_.emplace(v.get(), -static_cast<long>(made_up_ids_.size()) - 1).first;
  ValueRef id = make_const(PyRef::steal(PyLong_FromLong(it->second)));
  id->flag = true;
  made_up_id_values_.push_back(v);  // keeps `v` alive, so its address stays its own
  return id;
}

ValueRef Tracer::make_super(const std::vector<ValueRef>& args) {
  auto sup = std::make_shared<Value>();
  sup->kind = VKind::Super;
  if (args.size() == 2) {
    if (!args[0]->is(VKind::Object) || !PyType_Check(args[0]->obj.get())) throw type_error("super() argument 1 must be a type");
    sup->obj = args[0]->obj;
    sup->items = {args[1]};
    return sup;
  }
  if (!args.empty()) throw Unsupported(BreakCode::UnsupportedCall, "super() with one argument");
  // Zero-argument super(): the class from the function's __class__ cell, the object from its first argument.
  TraceFrame& f = frame();
  auto* code = reinterpret_cast<PyCodeObject*>(f.code.get());
  const int nfree = code->co_nfreevars, n = code->co_nlocalsplus;
  ValueRef cls;
  for (int i = n - nfree; i < n; ++i)
    if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(code->co_localsplusnames, i), "__class__") == 0) {
      realize_local(f, i);
      if (f.locals[i] && f.locals[i]->is(VKind::Cell)) cls = f.locals[i]->items[0];
    }
  if (!cls || !cls->is(VKind::Object) || !PyType_Check(cls->obj.get())) throw UserCodeError("super(): __class__ cell not found", PyExc_RuntimeError);
  if (code->co_argcount == 0) throw UserCodeError("super(): no arguments", PyExc_RuntimeError);
  realize_local(f, 0);
  ValueRef self = f.locals[0];
  if (self && self->is(VKind::Cell)) self = self->items[0];
  if (!self) throw UserCodeError("super(): arg[0] deleted", PyExc_RuntimeError);
  sup->obj = cls->obj;
  sup->items = {self};
  return sup;
}

}  // namespace fastcomp::frontend
