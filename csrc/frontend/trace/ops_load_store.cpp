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

ValueRef Tracer::module_attr(const ValueRef& obj, PyObject* name) {
  PyObject* o = obj->obj.get();
  PyRef v = PyRef::steal(PyObject_GetAttr(o, name));
  if (!v) {
    PyErr_Clear();
    throw attribute_error(fmt::format("module '{}' has no attribute '{}'", PyModule_GetName(o), utf8(name)));
  }
  if (is_library_module(o) || obj->source < 0) return wrap_untracked(v.get());
  return wrap(v.get(), guards_.sources.attr(obj->source, name));
}

bool Tracer::module_getattr_is_default(PyTypeObject* type, PyObject* getattr_fn) {
  if (!PyType_IsSubtype(type, reinterpret_cast<PyTypeObject*>(torch_refs().module_type.get()))) return false;
  static PyObject* module_getattr = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(torch_refs().module_type.get()),
                                                   PyRef::steal(PyUnicode_InternFromString("__getattr__")).get());
  return getattr_fn == module_getattr;
}

// nn.Module.__getattr__'s lookup (parameters, buffers, submodules), guarded through the module's slot dicts.
ValueRef Tracer::module_member(const ValueRef& obj, PyObject* name) {
  PyObject* o = obj->obj.get();
  PyObject* getattr_fn = _PyType_Lookup(Py_TYPE(o), PyRef::steal(PyUnicode_InternFromString("__getattr__")).get());
  if (!module_getattr_is_default(Py_TYPE(o), getattr_fn)) return nullptr;
  static const std::pair<const char*, SourceKind> kSlots[] = {{"_parameters", SourceKind::ModuleParam},
                                                              {"_buffers", SourceKind::ModuleBuffer},
                                                              {"_modules", SourceKind::ModuleChild}};
  // nn.Module.__setattr__ keeps a name in at most one of these dicts, so only an absent name needs guards.
  for (auto [slot, kind] : kSlots) {
    PyObject* d = instance_dict_entry(o, slot);
    PyObject* v = d && PyDict_Check(d) ? PyDict_GetItemWithError(d, name) : nullptr;
    if (v) return obj->source >= 0 ? wrap(v, guards_.sources.module_slot(kind, obj->source, name)) : wrap_untracked(v);
    PyErr_Clear();
  }
  for (auto [slot, kind] : kSlots) {
    PyObject* d = instance_dict_entry(o, slot);
    if (!d || !PyDict_Check(d) || obj->source < 0) continue;
    Guard g;
    g.kind = GuardKind::DictLacks;
    g.source = guards_.sources.inst_dict(obj->source, PyRef::steal(PyUnicode_InternFromString(slot)).get());
    g.expected = PyRef::borrow(name);
    guards_.guards.push_back(std::move(g));
  }
  throw attribute_error(fmt::format("'{}' object has no attribute '{}'", Py_TYPE(o)->tp_name, utf8(name)));
}

}  // namespace fastcomp::frontend
