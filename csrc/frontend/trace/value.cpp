#include "frontend/trace/value.h"

#include <fmt/format.h>

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

ValueRef make_symint(graph::Sym e, int64_t hint) {
  auto v = make_const(PyRef::steal(PyLong_FromLongLong(hint)));
  if (!e->is_const()) {
    v->kind = VKind::SymInt;
    v->sym = std::move(e);
  }
  return v;
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
    case VKind::SymInt: return fmt::format("int {} (a size)", str(v.sym));
  }
  return "?";
}

}  // namespace fastcomp::frontend
