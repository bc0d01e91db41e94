#include "frontend/trace/value.h"

#include <fmt/format.h>

#include "frontend/trace/unsupported.h"

namespace fastcomp::frontend {

ValueRef make_null() {
  auto v = std::make_shared<Value>();
  v->kind = VKind::Null;
  return v;
}

ValueRef make_const(PyRef obj) {
  auto v = std::make_shared<Value>();
  v->kind = VKind::Const;
  v->obj = std::move(obj);
  return v;
}

ValueRef make_const_borrowed(PyObject* obj) { return make_const(PyRef::borrow(obj)); }

ValueRef make_object(PyRef obj, int source) {
  auto v = std::make_shared<Value>();
  v->kind = VKind::Object;
  v->obj = std::move(obj);
  v->source = source;
  return v;
}

ValueRef make_seq(VKind kind, std::vector<ValueRef> items) {
  auto v = std::make_shared<Value>();
  v->kind = kind;
  v->items = std::move(items);
  return v;
}

ValueRef make_cell(ValueRef content) {
  auto v = std::make_shared<Value>();
  v->kind = VKind::Cell;
  v->items = {std::move(content)};
  return v;
}

ValueRef make_grad_ctx(bool enabled) {
  auto v = std::make_shared<Value>();
  v->kind = VKind::GradCtx;
  v->flag = enabled;
  return v;
}

ValueRef make_symint(graph::Sym e, int64_t hint) {
  auto v = make_const(PyRef::steal(PyLong_FromLongLong(hint)));
  if (!e->is_const()) {
    v->kind = VKind::SymInt;
    v->sym = std::move(e);
  }
  return v;
}

ValueRef make_dict() { return make_seq(VKind::Dict, {}); }

ValueRef make_method(ValueRef self, PyRef fn, std::string name) {
  auto m = std::make_shared<Value>();
  m->kind = VKind::Method;
  m->items = {std::move(self)};
  m->obj = std::move(fn);
  m->name = std::move(name);
  return m;
}

bool same_key(const Value& a, const Value& b) {
  if (&a == &b) return true;
  auto constant = [](const Value& v) { return v.is(VKind::Const) || v.is(VKind::Object); };
  if (constant(a) && constant(b)) {
    if (a.obj.get() == b.obj.get()) return true;
    int eq = PyObject_RichCompareBool(a.obj.get(), b.obj.get(), Py_EQ);
    if (eq < 0) {
      PyErr_Clear();
      throw Unsupported(BreakCode::UnsupportedValue, "comparing keys raised");
    }
    return eq == 1;
  }
  // Tensors, functions and objects made in the trace hash by identity: distinct Values are distinct objects.
  auto by_identity = [](const Value& v) {
    return v.is(VKind::Tensor) || v.is(VKind::Function) || v.is(VKind::UserObject) || v.is(VKind::Exception);
  };
  if (a.is(VKind::Tensor) && b.is(VKind::Tensor)) return a.node == b.node;
  if ((by_identity(a) || constant(a)) && (by_identity(b) || constant(b))) return false;
  if (a.is(VKind::Tuple) && b.is(VKind::Tuple)) {
    if (a.items.size() != b.items.size()) return false;
    for (size_t i = 0; i < a.items.size(); ++i)
      if (!same_key(*a.items[i], *b.items[i])) return false;
    return true;
  }
  throw Unsupported(BreakCode::UnsupportedValue,
                    fmt::format("{} and {} as dict keys or set members", describe(a), describe(b)));
}

int dict_find(const Value& dict, const Value& key) {
  for (size_t i = 0; i < dict.keys.size(); ++i)
    if (same_key(*dict.keys[i], key)) return static_cast<int>(i);
  return -1;
}

int dict_find(const Value& dict, PyObject* key) {
  Value k;
  k.kind = VKind::Const;
  k.obj = PyRef::borrow(key);
  return dict_find(dict, k);
}

void dict_put(Value& dict, ValueRef key, ValueRef v) {
  if (int i = dict_find(dict, *key); i >= 0) {
    dict.items[i] = std::move(v);
    return;
  }
  dict.keys.push_back(std::move(key));
  dict.items.push_back(std::move(v));
}

ValueRef inst_dict_get(const Value& dict, PyObject* name) {
  int i = dict_find(dict, name);
  return i < 0 ? nullptr : dict.items[i];
}

void inst_dict_set(Value& dict, PyObject* name, ValueRef v) {
  int i = dict_find(dict, name);
  if (i >= 0) {
    dict.items[i] = std::move(v);
    return;
  }
  dict.keys.push_back(make_const_borrowed(name));
  dict.items.push_back(std::move(v));
}

std::string describe(const Value& v) {
  auto type_name = [](PyObject* o) { return std::string(Py_TYPE(o)->tp_name); };
  switch (v.kind) {
    case VKind::Null: return "NULL";
    case VKind::Const: {
      PyRef r = PyRef::steal(PyObject_Repr(v.obj.get()));
      if (!r) PyErr_Clear();
      return fmt::format("{} {}", type_name(v.obj.get()), r ? PyUnicode_AsUTF8(r.get()) : "?");
    }
    case VKind::Tensor: return "a tensor";
    case VKind::Object:
      if (PyType_Check(v.obj.get())) return fmt::format("class {}", reinterpret_cast<PyTypeObject*>(v.obj.get())->tp_name);
      return fmt::format("an object of type {}", type_name(v.obj.get()));
    case VKind::Tuple: return fmt::format("a tuple of {}", v.items.size());
    case VKind::List: return fmt::format("a list of {}", v.items.size());
    case VKind::Dict: return fmt::format("a dict of {}", v.items.size());
    case VKind::Slice: return "a slice";
    case VKind::Iterator: return "an iterator";
    case VKind::Function: return fmt::format("function {}", v.name);
    case VKind::Method: return fmt::format("method {}", v.name);
    case VKind::Cell: return "a cell";
    case VKind::Record: return fmt::format("a {}", reinterpret_cast<PyTypeObject*>(v.obj.get())->tp_name);
    case VKind::GradCtx: return "a grad-mode context manager";
    case VKind::CtxExit: return "a context manager's __exit__";
    case VKind::AutocastExit: return "the __exit__ of a torch.autocast block";
    case VKind::SymInt: return fmt::format("int {} (a size)", str(v.sym));
    case VKind::Set: return fmt::format("a {} of {}", v.flag ? "frozenset" : "set", v.items.size());
    case VKind::UserObject:
      return fmt::format("an object of class {}", reinterpret_cast<PyTypeObject*>(v.obj.get())->tp_name);
    case VKind::Super: return "a super() object";
    case VKind::Partial: return "a functools.partial";
    case VKind::DictView: return fmt::format("a dict_{} view", v.name);
    case VKind::Exception:
      return fmt::format("an exception {}", reinterpret_cast<PyTypeObject*>(v.obj.get())->tp_name);
  }
  return "?";
}

}  // namespace fastcomp::frontend
