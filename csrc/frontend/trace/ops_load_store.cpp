// Loads and stores of globals and attributes: where sources and guards are created.
#include <fmt/format.h>

#include <string_view>

#include "frontend/trace/torch_refs.h"
#include "frontend/trace/tracer.h"
#include "support/pystr.h"

namespace fastcomp::frontend {
namespace {

// Modules whose attributes the trace does not guard: they do not change while a program runs.
bool is_library_module(PyObject* module) {
  const char* name = PyModule_GetName(module);
  if (!name) {
    PyErr_Clear();
    return false;
  }
  static const std::string_view kStable[] = {"torch", "math", "operator", "functools", "itertools",
                                             "collections", "typing", "builtins", "numbers", "warnings",
                                             "enum", "dataclasses", "fastcomp", "numpy"};
  std::string_view n(name);
  for (auto prefix : kStable)
    if (n == prefix || (n.size() > prefix.size() && n.substr(0, prefix.size()) == prefix && n[prefix.size()] == '.'))
      return true;
  return false;
}

// Borrowed: the dict stored in `obj.__dict__[slot]` (e.g. "_parameters"), or null.
PyObject* instance_dict_entry(PyObject* obj, const char* slot) {
  PyObject** dictptr = _PyObject_GetDictPtr(obj);
  if (!dictptr || !*dictptr) return nullptr;
  return PyDict_GetItemString(*dictptr, slot);
}

}  // namespace

ValueRef Tracer::load_global(PyObject* name) {
  TraceFrame& f = frame();
  PyObject* v = PyDict_GetItemWithError(f.globals, name);
  bool from_builtins = false;
  if (!v && !PyErr_Occurred()) {
    v = PyDict_Check(f.builtins) ? PyDict_GetItemWithError(f.builtins, name) : nullptr;
    from_builtins = true;
  }
  if (!v) {
    PyErr_Clear();
    throw UserCodeError(fmt::format("name '{}' is not defined", utf8(name)));
  }
  int source;
  if (f.globals_source < 0) {
    source = guards_.sources.global(name);
  } else {
    source = guards_.sources.dict_item(from_builtins ? guards_.sources.const_object(f.builtins, "__builtins__")
                                                     : f.globals_source,
                                       name);
  }
  return wrap(v, source);
}

ValueRef Tracer::get_attr(const ValueRef& obj, PyObject* name) {
  const auto& T = torch_refs();
  switch (obj->kind) {
    case VKind::Tensor: return tensor_attr(obj, name);
    case VKind::Record:
      for (size_t i = 0; i < obj->keys.size(); ++i)
        if (PyUnicode_Compare(obj->keys[i]->obj.get(), name) == 0) return obj->items[i];
      break;
    case VKind::Tuple:
    case VKind::List:
    case VKind::Dict: {
      auto m = std::make_shared<Value>();
      m->kind = VKind::Method;
      m->items = {obj};
      m->name = utf8(name);
      return m;
    }
    case VKind::Const: {
      PyRef v = PyRef::steal(PyObject_GetAttr(obj->obj.get(), name));
      if (!v) {
        PyErr_Clear();
        throw UserCodeError(fmt::format("'{}' object has no attribute '{}'", Py_TYPE(obj->obj.get())->tp_name, utf8(name)));
      }
      return wrap_untracked(v.get());
    }
    case VKind::Object: break;
    default:
      throw Unsupported(BreakCode::UnsupportedValue, fmt::format("attribute '{}' of {}", utf8(name), describe(*obj)));
  }
  if (!obj->is(VKind::Object))
    throw UserCodeError(fmt::format("{} has no attribute '{}'", describe(*obj), utf8(name)));

  PyObject* o = obj->obj.get();
  int base = obj->source;
  if (PyModule_Check(o)) {
    PyRef v = PyRef::steal(PyObject_GetAttr(o, name));
    if (!v) {
      PyErr_Clear();
      throw UserCodeError(fmt::format("module '{}' has no attribute '{}'", PyModule_GetName(o), utf8(name)));
    }
    if (is_library_module(o) || base < 0) return wrap_untracked(v.get());
    return wrap(v.get(), guards_.sources.attr(base, name));
  }

  // Python's attribute lookup order: data descriptors on the type, the instance dict, other class
  // attributes, then (nn.Module) parameters, buffers and submodules.
  PyTypeObject* type = Py_TYPE(o);
  PyObject* cls_attr = PyType_Check(o) ? nullptr : _PyType_Lookup(type, name);
  if (cls_attr && Py_TYPE(cls_attr)->tp_descr_set) {
    if (PyObject_TypeCheck(cls_attr, &PyProperty_Type)) {
      PyRef fget = PyRef::steal(PyObject_GetAttrString(cls_attr, "fget"));
      if (fget && PyFunction_Check(fget.get())) return inline_function(fget.get(), nullptr, {obj}, {});
      PyErr_Clear();
    }
    PyRef v = PyRef::steal(PyObject_GetAttr(o, name));
    if (!v) {
      PyErr_Clear();
      throw UserCodeError(fmt::format("'{}' object has no attribute '{}'", type->tp_name, utf8(name)));
    }
    return base >= 0 ? wrap(v.get(), guards_.sources.attr(base, name)) : wrap_untracked(v.get());
  }
  PyObject** dictptr = PyType_Check(o) ? nullptr : _PyObject_GetDictPtr(o);
  if (dictptr && *dictptr) {
    PyObject* v = PyDict_GetItemWithError(*dictptr, name);
    if (v) return base >= 0 ? wrap(v, guards_.sources.inst_dict(base, name)) : wrap_untracked(v);
    PyErr_Clear();
  }
  if (cls_attr) {
    // `obj.name` makes a new bound method on every read: guarded through the object (its type) and the
    // function, never as the bound method, which is never the same object twice.
    if (PyFunction_Check(cls_attr) || Py_TYPE(cls_attr) == &PyMethodDescr_Type ||
        Py_TYPE(cls_attr) == &PyWrapperDescr_Type) {
      auto m = std::make_shared<Value>();
      m->kind = VKind::Method;
      m->items = {obj};
      m->obj = PyRef::borrow(cls_attr);
      m->name = utf8(name);
      return m;
    }
    if (Py_TYPE(cls_attr) == &PyStaticMethod_Type || Py_TYPE(cls_attr) == &PyClassMethod_Type) {
      PyRef v = PyRef::steal(PyObject_GetAttr(o, name));  // the bound/unwrapped callable
      if (!v) throw UserCodeError("attribute lookup failed");
      if (PyMethod_Check(v.get())) {
        auto m = std::make_shared<Value>();
        m->kind = VKind::Method;
        m->items = {wrap_untracked(PyMethod_GET_SELF(v.get()))};
        m->obj = PyRef::borrow(PyMethod_GET_FUNCTION(v.get()));
        m->name = utf8(name);
        return m;
      }
      return wrap_untracked(v.get());
    }
    // A plain class attribute (a constant, a nested class...): guarded through the instance.
    return base >= 0 ? wrap(cls_attr, guards_.sources.attr(base, name)) : wrap_untracked(cls_attr);
  }
  if (T.is_module(o)) {
    static const std::pair<const char*, SourceKind> kSlots[] = {{"_parameters", SourceKind::ModuleParam},
                                                                {"_buffers", SourceKind::ModuleBuffer},
                                                                {"_modules", SourceKind::ModuleChild}};
    for (auto [slot, kind] : kSlots) {
      PyObject* d = instance_dict_entry(o, slot);
      PyObject* v = d && PyDict_Check(d) ? PyDict_GetItemWithError(d, name) : nullptr;
      if (v) return base >= 0 ? wrap(v, guards_.sources.module_slot(kind, base, name)) : wrap_untracked(v);
      PyErr_Clear();
    }
  }
  PyRef v = PyRef::steal(PyObject_GetAttr(o, name));
  if (!v) {
    PyErr_Clear();
    throw UserCodeError(fmt::format("'{}' object has no attribute '{}'", PyType_Check(o) ? "type" : type->tp_name, utf8(name)));
  }
  return base >= 0 ? wrap(v.get(), guards_.sources.attr(base, name)) : wrap_untracked(v.get());
}

void Tracer::store_attr(const ValueRef& obj, PyObject* name, const ValueRef& value) {
  if (obj->is(VKind::Record) && obj->source < 0) {
    for (size_t i = 0; i < obj->keys.size(); ++i)
      if (PyUnicode_Compare(obj->keys[i]->obj.get(), name) == 0) {
        obj->items[i] = value;
        return;
      }
  }
  throw Unsupported(BreakCode::SideEffect,
                    fmt::format("assignment to attribute '{}' of {} (mutation of state outside the graph)", utf8(name),
                                describe(*obj)));
}

}  // namespace fastcomp::frontend
