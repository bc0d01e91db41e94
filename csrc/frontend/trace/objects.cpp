// Python's attribute protocol over Values: type(obj).__getattribute__ / __setattr__ / __delattr__, as CPython
// runs them. Overrides written in Python are inlined; object's own versions are modelled here: data descriptors
// on the class, then the instance dict, then other class attributes, then __getattr__. Reading through a class
// guards the class's version tag (one guard per class: any change to it or a base invalidates the trace);
// reading an instance attribute of an object from the frame guards it through its source.
#include <fmt/format.h>

#include "cpython/type_dict.h"
#include "frontend/trace/torch_refs.h"
#include "frontend/trace/tracer.h"
#include "support/pystr.h"

namespace fastcomp::frontend {
namespace {

PyObject* slot_of(PyTypeObject* type, const char* name) {  // borrowed
  PyRef n = PyRef::steal(PyUnicode_InternFromString(name));
  return _PyType_Lookup(type, n.get());
}

// Whether `fn`, found as a class's __getattribute__ / __setattr__ / __delattr__, is the generic one of object (dict and
// other builtins expose the same C function through slot wrappers of their own).
bool is_generic_slot(PyObject* fn, bool getattr) {
  if (!fn || Py_TYPE(fn) != &PyWrapperDescr_Type) return false;
  void* wrapped = reinterpret_cast<PyWrapperDescrObject*>(fn)->d_wrapped;
  return getattr ? wrapped == reinterpret_cast<void*>(PyObject_GenericGetAttr)
                 : wrapped == reinterpret_cast<void*>(PyObject_GenericSetAttr);
}

bool is_data_descriptor(PyObject* d) { return Py_TYPE(d)->tp_descr_set != nullptr; }

std::string type_name(PyTypeObject* t) { return t->tp_name; }

// `name` in the MRO of `type`, as _PyType_Lookup finds it, with the class that holds it; {null, null} when absent.
std::pair<PyTypeObject*, PyObject*> mro_find(PyTypeObject* type, PyObject* name, PyTypeObject* after = nullptr) {
  PyObject* mro = type->tp_mro;
  if (!mro) return {nullptr, nullptr};
  bool started = after == nullptr;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); ++i) {
    auto* cls = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i));
    if (!started) {
      started = cls == after;
      continue;
    }
    PyObject* dict = cpython::type_dict(cls);
    PyObject* v = dict ? PyDict_GetItemWithError(dict, name) : nullptr;
    if (v) return {cls, v};
    PyErr_Clear();
  }
  return {nullptr, nullptr};
}

}  // namespace

PyTypeObject* python_type(const Value& v) {
  const auto& T = torch_refs();
  switch (v.kind) {
    case VKind::Tensor: return v.tensor_type;
    case VKind::SymInt: return &PyLong_Type;
    case VKind::Const:
    case VKind::Object: return Py_TYPE(v.obj.get());
    case VKind::Tuple: return v.obj ? reinterpret_cast<PyTypeObject*>(v.obj.get()) : &PyTuple_Type;  // torch.Size
    case VKind::List: return &PyList_Type;
    case VKind::Dict: return &PyDict_Type;
    case VKind::Set: return v.flag ? &PyFrozenSet_Type : &PySet_Type;
    case VKind::Record:
    case VKind::UserObject:
    case VKind::Exception: return reinterpret_cast<PyTypeObject*>(v.obj.get());
    case VKind::Function: return &PyFunction_Type;
    case VKind::Method: return &PyMethod_Type;
    case VKind::Slice: return &PySlice_Type;
    case VKind::Super: return &PySuper_Type;
    case VKind::Cell: return &PyCell_Type;
    case VKind::GradCtx: return reinterpret_cast<PyTypeObject*>(v.flag ? T.enable_grad.get() : T.no_grad.get());
    default: return nullptr;
  }
}

void Tracer::note_class_read(PyTypeObject* type) {
  if (!(type->tp_flags & Py_TPFLAGS_HEAPTYPE)) return;  // static types never change
  if (!classes_read_.insert(type).second) return;
  // _PyType_Lookup assigns a version tag to a class that has none (when the tag space is not exhausted).
  if (!type->tp_version_tag) _PyType_Lookup(type, PyRef::steal(PyUnicode_InternFromString("__init__")).get());
  if (!type->tp_version_tag)
    throw Unsupported(BreakCode::UnsupportedValue, fmt::format("class {} has no version tag to guard", type->tp_name));
  Guard g;
  g.kind = GuardKind::TypeVersion;
  g.expected = PyRef::borrow(reinterpret_cast<PyObject*>(type));
  g.length = type->tp_version_tag;
  guards_.guards.push_back(std::move(g));
}

// A class attribute `value` found in `owner`'s namespace, read through a class whose version is guarded: immutable
// values and identity objects are covered by that guard; containers are guarded through the class namespace.
ValueRef Tracer::class_value(PyObject* value, PyTypeObject* owner, PyObject* name) {
  if (is_constant(value) || guard_by_identity(value) || !(owner->tp_flags & Py_TPFLAGS_HEAPTYPE))
    return wrap_untracked(value);
  PyObject* cls = reinterpret_cast<PyObject*>(owner);
  int base = guards_.sources.const_object(cls, owner->tp_name);
  return wrap(value, guards_.sources.class_dict_item(base, name));
}

// descr.__get__(instance, owner), for a descriptor found on a class. `instance` null: looked up on the class.
ValueRef Tracer::bind_descriptor(PyObject* descr, const ValueRef& instance, PyTypeObject* owner, PyTypeObject* found_in,
                                 PyObject* name) {
  PyObject* owner_obj = reinterpret_cast<PyObject*>(owner);
  const std::string n = utf8(name);
  if (PyFunction_Check(descr)) {
    if (!instance) return wrap_untracked(descr);
    return make_method(instance, PyRef::borrow(descr), n);
  }
  if (Py_TYPE(descr) == &PyStaticMethod_Type) {
    PyRef fn = PyRef::steal(PyObject_GetAttrString(descr, "__func__"));
    if (!fn) throw Unsupported(BreakCode::UnsupportedValue, "a staticmethod without __func__");
    return wrap_untracked(fn.get());
  }
  if (Py_TYPE(descr) == &PyClassMethod_Type) {
    PyRef fn = PyRef::steal(PyObject_GetAttrString(descr, "__func__"));
    if (!fn) throw Unsupported(BreakCode::UnsupportedValue, "a classmethod without __func__");
    return make_method(make_object(PyRef::borrow(owner_obj), -1), fn, n);
  }
  if (Py_TYPE(descr) == &PyMethodDescr_Type || Py_TYPE(descr) == &PyWrapperDescr_Type) {
    if (!instance) return wrap_untracked(descr);
    return make_method(instance, PyRef::borrow(descr), n);
  }
  if (Py_TYPE(descr) == &PyClassMethodDescr_Type)
    return make_method(make_object(PyRef::borrow(owner_obj), -1), PyRef::borrow(descr), n);
  if (PyObject_TypeCheck(descr, &PyProperty_Type)) {
    if (!instance) return wrap_untracked(descr);
    PyRef fget = PyRef::steal(PyObject_GetAttrString(descr, "fget"));
    if (!fget) PyErr_Clear();
    if (fget && PyFunction_Check(fget.get())) return inline_function(fget.get(), nullptr, {instance}, {});
    if (fget && fget.get() == Py_None) throw attribute_error(fmt::format("property '{}' has no getter", n));
    // A property implemented in C: read it for real from an object of the frame.
    if (instance->is(VKind::Object)) return real_attr(instance, name);
    throw Unsupported(BreakCode::UnsupportedValue, fmt::format("property {} of {} has a C getter", n, describe(*instance)));
  }
  if (Py_TYPE(descr) == &PyMemberDescr_Type || Py_TYPE(descr) == &PyGetSetDescr_Type) {
    if (!instance) return wrap_untracked(descr);
    if (instance->is(VKind::Object)) return real_attr(instance, name);
    throw Unsupported(BreakCode::UnsupportedValue,
                      fmt::format("attribute '{}' of {} is a C-level slot", n, describe(*instance)));
  }
  // A descriptor class written in Python (functools.cached_property, ...): call its __get__.
  PyObject* get = slot_of(Py_TYPE(descr), "__get__");
  if (get && PyFunction_Check(get)) {
    note_class_read(Py_TYPE(descr));
    ValueRef d = class_value(descr, found_in, name);
    ValueRef inst = instance ? instance : make_const_borrowed(Py_None);
    return inline_function(get, nullptr, {d, inst, make_object(PyRef::borrow(owner_obj), -1)}, {});
  }
  if (Py_TYPE(descr)->tp_descr_get) {
    if (!instance) {
      // A C descriptor read on its class (a builtin's method descriptor seen through a subclass): its __get__(None,
      // cls) is itself for every C descriptor kind that reaches here.
      return wrap_untracked(descr);
    }
    if (instance->is(VKind::Object)) {
      // A C descriptor that binds like a function (functools.lru_cache's wrapper on a class: logger.warning_once)
      // makes a new bound method on every read: a method of the instance, never guarded as the bound object.
      PyRef bound = PyRef::steal(Py_TYPE(descr)->tp_descr_get(descr, instance->obj.get(), owner_obj));
      if (!bound) PyErr_Clear();
      if (bound && PyMethod_Check(bound.get()) && PyMethod_GET_FUNCTION(bound.get()) == descr &&
          PyMethod_GET_SELF(bound.get()) == instance->obj.get())
        return make_method(instance, PyRef::borrow(descr), n);
      return real_attr(instance, name);
    }
    throw Unsupported(BreakCode::UnsupportedValue,
                      fmt::format("attribute '{}' of {} is a {} descriptor", n, describe(*instance), Py_TYPE(descr)->tp_name));
  }
  return class_value(descr, found_in, name);
}

// getattr for real on an object from the frame (attributes of C types, C properties), guarded through its source.
ValueRef Tracer::real_attr(const ValueRef& obj, PyObject* name) {
  PyRef v = PyRef::steal(PyObject_GetAttr(obj->obj.get(), name));
  if (!v) {
    PyObject* type = PyErr_Occurred();
    bool attr = type && PyErr_GivenExceptionMatches(type, PyExc_AttributeError);
    std::string msg = take_error_message();
    if (attr) throw attribute_error(msg);
    throw UserCodeError(msg);
  }
  return obj->source >= 0 ? wrap(v.get(), guards_.sources.attr(obj->source, name)) : wrap_untracked(v.get());
}

// The attribute in the instance's own __dict__: null when absent.
ValueRef Tracer::instance_attr(const ValueRef& obj, PyObject* name) {
  if (obj->inst_dict) {
    ValueRef v = inst_dict_get(*obj->inst_dict, name);
    if (v) return v->is(VKind::Null) ? nullptr : v;
    if (obj->inst_dict_complete || obj->is(VKind::UserObject) || obj->is(VKind::Function) || obj->is(VKind::Exception))
      return nullptr;
  }
  if (!obj->is(VKind::Object)) return nullptr;
  PyObject** dictptr = _PyObject_GetDictPtr(obj->obj.get());
  if (!dictptr) return nullptr;  // instances of this class have no __dict__
  PyObject* v = *dictptr ? PyDict_GetItemWithError(*dictptr, name) : nullptr;
  if (v) return obj->source >= 0 ? wrap(v, guards_.sources.inst_dict(obj->source, name)) : wrap_untracked(v);
  PyErr_Clear();
  if (obj->source >= 0) {  // (a __dict__ not made yet lacks it too)
    Guard g;
    g.kind = GuardKind::DictLacks;
    g.source = guards_.sources.obj_dict(obj->source);
    g.expected = PyRef::borrow(name);
    guards_.guards.push_back(std::move(g));
  }
  return nullptr;
}

ValueRef Tracer::instance_dict(const ValueRef& obj) {
  if (obj->inst_dict && (obj->inst_dict_complete || !obj->is(VKind::Object))) return obj->inst_dict;
  if (obj->is(VKind::UserObject) || obj->is(VKind::Function) || obj->is(VKind::Exception)) {
    obj->inst_dict = make_dict();
    return obj->inst_dict;
  }
  if (!obj->is(VKind::Object)) throw Unsupported(BreakCode::UnsupportedValue, "__dict__ of " + describe(*obj));
  PyObject** dictptr = _PyObject_GetDictPtr(obj->obj.get());
  if (!dictptr || !*dictptr) throw Unsupported(BreakCode::UnsupportedValue, "__dict__ of " + describe(*obj));
  int source = obj->source >= 0 ? guards_.sources.obj_dict(obj->source)
                                : guards_.sources.const_object(*dictptr, "<__dict__ of " + describe(*obj) + ">");
  ValueRef d = wrap(*dictptr, source);
  if (obj->inst_dict) {  // attributes the trace assigned before it read __dict__
    const Value& overlay = *obj->inst_dict;
    for (size_t i = 0; i < overlay.keys.size(); ++i) {
      int at = dict_find(*d, *overlay.keys[i]);
      if (overlay.items[i]->is(VKind::Null)) {
        if (at >= 0) {
          d->keys.erase(d->keys.begin() + at);
          d->items.erase(d->items.begin() + at);
        }
      } else {
        inst_dict_set(*d, overlay.keys[i]->obj.get(), overlay.items[i]);
      }
    }
    if (!overlay.keys.empty()) note_mutation(d);
  }
  obj->inst_dict = d;
  obj->inst_dict_complete = true;
  return d;
}

ValueRef Tracer::object_getattribute(const ValueRef& obj, PyObject* name) {
  PyTypeObject* type = python_type(*obj);
  if (!type) throw Unsupported(BreakCode::UnsupportedValue, fmt::format("attribute '{}' of {}", utf8(name), describe(*obj)));
  if (PyUnicode_CompareWithASCIIString(name, "__class__") == 0) return make_object(PyRef::borrow(reinterpret_cast<PyObject*>(type)), -1);
  if (PyUnicode_CompareWithASCIIString(name, "__dict__") == 0 && !obj->is(VKind::Tensor)) return instance_dict(obj);
  note_class_read(type);
  auto [found_in, descr] = mro_find(type, name);
  if (descr && is_data_descriptor(descr)) return bind_descriptor(descr, obj, type, found_in, name);
  if (ValueRef v = instance_attr(obj, name)) return v;
  if (descr) return bind_descriptor(descr, obj, type, found_in, name);
  if (obj->is(VKind::Object) && torch_refs().is_module(obj->obj.get()))
    if (ValueRef v = module_member(obj, name)) return v;
  PyObject* getattr_fn = slot_of(type, "__getattr__");
  if (getattr_fn && PyFunction_Check(getattr_fn) && !module_getattr_is_default(type, getattr_fn))
    return inline_function(getattr_fn, nullptr, {obj, make_const_borrowed(name)}, {});
  if (getattr_fn && !PyFunction_Check(getattr_fn) && obj->is(VKind::Object)) return real_attr(obj, name);
  throw attribute_error(fmt::format("'{}' object has no attribute '{}'", type_name(type), utf8(name)));
}

// type(obj).__getattribute__(obj, name): object's, or an override written in Python (inlined, with the
// __getattr__ fallback CPython's slot_tp_getattr_hook adds on AttributeError).
ValueRef Tracer::getattribute(const ValueRef& obj, PyObject* name) {
  PyTypeObject* type = python_type(*obj);
  PyObject* ga = type ? slot_of(type, "__getattribute__") : nullptr;
  if (!ga || is_generic_slot(ga, true)) return object_getattribute(obj, name);
  note_class_read(type);
  if (!PyFunction_Check(ga)) {
    if (obj->is(VKind::Object)) return real_attr(obj, name);
    throw Unsupported(BreakCode::UnsupportedValue,
                      fmt::format("attribute '{}' of {}: its class has a C __getattribute__", utf8(name), describe(*obj)));
  }
  PyObject* getattr_fn = slot_of(type, "__getattr__");
  try {
    return inline_function(ga, nullptr, {obj, make_const_borrowed(name)}, {});
  } catch (UserCodeError& e) {
    if (!getattr_fn || !e.type || !PyErr_GivenExceptionMatches(e.type, PyExc_AttributeError)) throw;
    PyErr_Clear();
    if (!PyFunction_Check(getattr_fn)) throw;
    return inline_function(getattr_fn, nullptr, {obj, make_const_borrowed(name)}, {});
  }
}

ValueRef Tracer::type_getattribute(const ValueRef& cls, PyObject* name) {
  auto* type = reinterpret_cast<PyTypeObject*>(cls->obj.get());
  PyTypeObject* meta = Py_TYPE(cls->obj.get());
  note_class_read(meta);
  note_class_read(type);
  auto [meta_owner, meta_attr] = mro_find(meta, name);
  if (meta_attr && is_data_descriptor(meta_attr)) {
    // type's own getset slots (__name__, __qualname__, __mro__, __doc__...) and metaclass properties.
    if (Py_TYPE(meta_attr) == &PyGetSetDescr_Type || Py_TYPE(meta_attr) == &PyMemberDescr_Type) {
      PyRef v = PyRef::steal(PyObject_GetAttr(cls->obj.get(), name));
      if (!v) throw attribute_error(take_error_message());
      return wrap_untracked(v.get());
    }
    return bind_descriptor(meta_attr, cls, meta, meta_owner, name);
  }
  auto [found_in, attr] = mro_find(type, name);
  if (attr) {
    if (Py_TYPE(attr) == &PyClassMethod_Type || Py_TYPE(attr) == &PyClassMethodDescr_Type)
      return bind_descriptor(attr, cls, type, found_in, name);
    return bind_descriptor(attr, nullptr, type, found_in, name);
  }
  if (meta_attr) return bind_descriptor(meta_attr, cls, meta, meta_owner, name);
  PyObject* getattr_fn = slot_of(meta, "__getattr__");
  if (getattr_fn && PyFunction_Check(getattr_fn))
    return inline_function(getattr_fn, nullptr, {cls, make_const_borrowed(name)}, {});
  throw attribute_error(fmt::format("type object '{}' has no attribute '{}'", type_name(type), utf8(name)));
}

ValueRef Tracer::super_attr(const ValueRef& sup, PyObject* name) {
  auto* start = reinterpret_cast<PyTypeObject*>(sup->obj.get());
  const ValueRef& self = sup->items[0];
  // super(cls, obj) searches type(obj)'s MRO; super(cls, subclass) (in classmethods) the subclass's.
  bool self_is_class = self->is(VKind::Object) && PyType_Check(self->obj.get());
  PyTypeObject* mro_type = self_is_class ? reinterpret_cast<PyTypeObject*>(self->obj.get()) : python_type(*self);
  if (!mro_type) throw Unsupported(BreakCode::UnsupportedValue, "super() of " + describe(*self));
  note_class_read(mro_type);
  if (PyUnicode_CompareWithASCIIString(name, "__class__") == 0) return make_object(PyRef::borrow(reinterpret_cast<PyObject*>(&PySuper_Type)), -1);
  auto [found_in, attr] = mro_find(mro_type, name, start);
  if (!attr) throw attribute_error(fmt::format("'super' object has no attribute '{}'", utf8(name)));
  if (self_is_class && Py_TYPE(attr) != &PyClassMethod_Type && Py_TYPE(attr) != &PyClassMethodDescr_Type)
    return bind_descriptor(attr, nullptr, mro_type, found_in, name);
  return bind_descriptor(attr, self, mro_type, found_in, name);
}

ValueRef Tracer::get_attr(const ValueRef& obj, PyObject* name) {
  switch (obj->kind) {
    case VKind::Tensor: return tensor_attr(obj, name);
    case VKind::Super: return super_attr(obj, name);
    case VKind::Record:
      for (size_t i = 0; i < obj->keys.size(); ++i)
        if (PyUnicode_Compare(obj->keys[i]->obj.get(), name) == 0) return obj->items[i];
      return object_getattribute(obj, name);
    case VKind::Tuple:
    case VKind::List:
    case VKind::Dict:
    case VKind::Set:
    case VKind::DictView:
    case VKind::Iterator: {
      PyTypeObject* type = python_type(*obj);
      if (PyUnicode_CompareWithASCIIString(name, "__class__") == 0)
        return make_object(PyRef::borrow(reinterpret_cast<PyObject*>(type)), -1);
      if (type && !_PyType_Lookup(type, name))
        throw attribute_error(fmt::format("'{}' object has no attribute '{}'", type_name(type), utf8(name)));
      return make_method(obj, {}, utf8(name));
    }
    case VKind::Const:
    case VKind::SymInt: {
      PyRef c = as_python_constant(obj);
      PyRef v = PyRef::steal(PyObject_GetAttr(c.get(), name));
      if (!v) {
        PyObject* type = PyErr_Occurred();
        bool attr = type && PyErr_GivenExceptionMatches(type, PyExc_AttributeError);
        std::string msg = take_error_message();
        if (attr) throw attribute_error(msg);
        throw UserCodeError(msg);
      }
      return wrap_untracked(v.get());
    }
    case VKind::Function: return function_attr(obj, name);
    case VKind::Method: {
      std::string n = utf8(name);
      if (n == "__self__") return obj->items[0];
      if (n == "__func__" && obj->obj) return wrap_untracked(obj->obj.get());
      if (obj->obj && PyFunction_Check(obj->obj.get())) return get_attr(wrap_untracked(obj->obj.get()), name);
      throw Unsupported(BreakCode::UnsupportedValue, fmt::format("attribute '{}' of {}", n, describe(*obj)));
    }
    case VKind::Partial: {
      std::string n = utf8(name);
      if (n == "func") return obj->items[0];
      if (n == "args") return obj->items[1];
      if (n == "keywords") return obj->items[2];
      throw Unsupported(BreakCode::UnsupportedValue, fmt::format("attribute '{}' of a functools.partial", n));
    }
    case VKind::Exception: {
      if (PyUnicode_CompareWithASCIIString(name, "args") == 0) return make_seq(VKind::Tuple, obj->items);
      return object_getattribute(obj, name);
    }
    case VKind::UserObject: return getattribute(obj, name);
    case VKind::Object: {
      PyObject* o = obj->obj.get();
      if (is_frozen(*obj)) return frozen_op("getattr", obj, [&](PyObject* x) { return PyObject_GetAttr(x, name); });
      if (PyModule_Check(o)) return module_attr(obj, name);
      if (PyType_Check(o)) return type_getattribute(obj, name);
      return getattribute(obj, name);
    }
    default:
      throw Unsupported(BreakCode::UnsupportedValue, fmt::format("attribute '{}' of {}", utf8(name), describe(*obj)));
  }
}

// Attributes of a function made in the trace: its code's names, and what was assigned to it (functools.wraps).
ValueRef Tracer::function_attr(const ValueRef& fn, PyObject* name) {
  if (fn->inst_dict)
    if (ValueRef v = inst_dict_get(*fn->inst_dict, name); v && !v->is(VKind::Null)) return v;
  auto* code = reinterpret_cast<PyCodeObject*>(fn->obj.get());
  std::string n = utf8(name);
  if (n == "__name__") return make_const_borrowed(code->co_name);
  if (n == "__qualname__") return make_const_borrowed(code->co_qualname);
  if (n == "__code__") return make_const_borrowed(fn->obj.get());
  if (n == "__module__") return make_const_borrowed(PyDict_GetItemString(fn->globals.get(), "__name__"));
  if (n == "__globals__") return wrap_untracked(fn->globals.get());
  if (n == "__doc__") return make_const_borrowed(Py_None);
  if (n == "__defaults__") return fn->defaults ? fn->defaults : make_const_borrowed(Py_None);
  if (n == "__kwdefaults__") return fn->kwdefaults ? fn->kwdefaults : make_const_borrowed(Py_None);
  if (n == "__closure__") return fn->closure ? fn->closure : make_const_borrowed(Py_None);
  if (n == "__dict__") return instance_dict(fn);
  if (n == "__class__") return make_object(PyRef::borrow(reinterpret_cast<PyObject*>(&PyFunction_Type)), -1);
  PyObject* descr = _PyType_Lookup(&PyFunction_Type, name);
  if (descr && n == "__get__") return make_method(fn, PyRef::borrow(descr), n);
  throw attribute_error(fmt::format("'function' object has no attribute '{}'", n));
}

void Tracer::store_attr(const ValueRef& obj, PyObject* name, const ValueRef& value) {
  switch (obj->kind) {
    case VKind::UserObject:
    case VKind::Object: {
      if (obj->is(VKind::Object) && (PyModule_Check(obj->obj.get()) || PyType_Check(obj->obj.get())))
        throw Unsupported(BreakCode::SideEffect,
                          fmt::format("assignment to attribute '{}' of {}", utf8(name), describe(*obj)));
      PyTypeObject* type = python_type(*obj);
      PyObject* sa = slot_of(type, value ? "__setattr__" : "__delattr__");
      if (!sa || is_generic_slot(sa, false)) return object_setattr(obj, name, value);
      note_class_read(type);
      if (!PyFunction_Check(sa))
        throw Unsupported(BreakCode::SideEffect, fmt::format("assignment to attribute '{}' of {}: its class has a C {}",
                                                             utf8(name), describe(*obj), value ? "__setattr__" : "__delattr__"));
      std::vector<ValueRef> args{obj, make_const_borrowed(name)};
      if (value) args.push_back(value);
      inline_function(sa, nullptr, std::move(args), {});
      return;
    }
    case VKind::Function:
    case VKind::Exception: {
      ValueRef d = instance_dict(obj);
      if (value) inst_dict_set(*d, name, value);
      else if (int at = dict_find(*d, name); at >= 0) {
        d->keys.erase(d->keys.begin() + at);
        d->items.erase(d->items.begin() + at);
      }
      return;
    }
    case VKind::Tensor:
      // `t.data = t` (nn.Module._apply converting a parameter to the dtype and device it has: `to()` handed back
      // the tensor itself) sets a tensor's data to its own: nothing changes.
      if (value && value.get() == obj.get() && utf8(name) == "data") return;
      [[fallthrough]];
    default:
      throw Unsupported(BreakCode::SideEffect, fmt::format("{} of attribute '{}' of {}", value ? "assignment" : "deletion",
                                                           utf8(name), describe(*obj)));
  }
}

void Tracer::object_setattr(const ValueRef& obj, PyObject* name, const ValueRef& value) {
  PyTypeObject* type = python_type(*obj);
  note_class_read(type);
  auto [found_in, descr] = mro_find(type, name);
  const std::string n = utf8(name);
  if (descr && is_data_descriptor(descr)) {
    if (PyObject_TypeCheck(descr, &PyProperty_Type)) {
      PyRef fn = PyRef::steal(PyObject_GetAttrString(descr, value ? "fset" : "fdel"));
      if (!fn) PyErr_Clear();
      if (!fn || fn.get() == Py_None) throw attribute_error(fmt::format("property '{}' of '{}' object has no {}", n,
                                                                        type_name(type), value ? "setter" : "deleter"));
      if (!PyFunction_Check(fn.get()))
        throw Unsupported(BreakCode::SideEffect, fmt::format("property '{}' has a C setter", n));
      std::vector<ValueRef> args{obj};
      if (value) args.push_back(value);
      inline_function(fn.get(), nullptr, std::move(args), {});
      return;
    }
    PyObject* set = slot_of(Py_TYPE(descr), value ? "__set__" : "__delete__");
    if (set && PyFunction_Check(set)) {
      note_class_read(Py_TYPE(descr));
      std::vector<ValueRef> args{class_value(descr, found_in, name), obj};
      if (value) args.push_back(value);
      inline_function(set, nullptr, std::move(args), {});
      return;
    }
    throw Unsupported(BreakCode::SideEffect,
                      fmt::format("assignment to '{}' of {}, a C-level attribute", n, describe(*obj)));
  }
  if (obj->is(VKind::UserObject)) {
    Value& d = *instance_dict(obj);
    if (value) return inst_dict_set(d, name, value);
    int at = dict_find(d, name);
    if (at < 0) throw attribute_error(fmt::format("'{}' object has no attribute '{}'", type_name(type), n));
    d.keys.erase(d.keys.begin() + at);
    d.items.erase(d.items.begin() + at);
    return;
  }
  if (!obj->is(VKind::Object) || !_PyObject_GetDictPtr(obj->obj.get()))
    throw Unsupported(BreakCode::SideEffect, fmt::format("assignment to attribute '{}' of {}", n, describe(*obj)));
  if (!value && !instance_attr(obj, name))
    throw attribute_error(fmt::format("'{}' object has no attribute '{}'", type_name(type), n));
  if (obj->inst_dict_complete) {  // the real __dict__ is a Value of its own: change that
    Value& d = *obj->inst_dict;
    if (value) inst_dict_set(d, name, value);
    else if (int at = dict_find(d, name); at >= 0) {
      d.keys.erase(d.keys.begin() + at);
      d.items.erase(d.items.begin() + at);
    }
    note_mutation(obj->inst_dict);
    return;
  }
  if (!obj->inst_dict) obj->inst_dict = make_dict();
  auto null = std::make_shared<Value>();
  null->kind = VKind::Null;
  inst_dict_set(*obj->inst_dict, name, value ? value : null);
  note_mutation(obj);
}

}  // namespace fastcomp::frontend
