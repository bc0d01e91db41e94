// Calling a class: type.__call__ as CPython runs it (a metaclass's own __call__ first, then __new__ and __init__),
// for user classes (instances become UserObject Values whose state the trace tracks), exceptions, grad-mode
// context managers, namedtuples, and the builtin classes (builtins.cpp).
#include <fmt/format.h>

#include "frontend/trace/kernel_layout.h"
#include "frontend/trace/torch_refs.h"
#include "cpython/gil_once.h"
#include "frontend/trace/tracer.h"
#include "support/pystr.h"

namespace fastcomp::frontend {
namespace {

using Kwargs = std::vector<std::pair<std::string, ValueRef>>;

PyObject* lookup(PyTypeObject* type, const char* name) {  // borrowed
  return _PyType_Lookup(type, PyRef::steal(PyUnicode_InternFromString(name)).get());
}

// The builtin class whose tp_new a class's `__new__` entry wraps (object.__new__, dict.__new__...), or null when
// __new__ is written in Python or is something else.
PyTypeObject* builtin_new_owner(PyObject* new_fn) {
  if (!new_fn || !PyCFunction_Check(new_fn)) return nullptr;
  PyObject* self = PyCFunction_GET_SELF(new_fn);
  return self && PyType_Check(self) ? reinterpret_cast<PyTypeObject*>(self) : nullptr;
}

bool makes_plain_instance(PyTypeObject* owner) {
  return owner == &PyBaseObject_Type || PyType_IsSubtype(owner, &PyDict_Type);
}

}  // namespace

PyObject* partial_type() {
  static cpython::GilOnce<PyObject> partial;
  PyObject* t = partial.get([] { return cpython::import_attr("functools", "partial"); });
  return t;
}

ValueRef Tracer::new_instance(PyTypeObject* cls) {
  auto obj = std::make_shared<Value>();
  obj->kind = VKind::UserObject;
  obj->obj = PyRef::borrow(reinterpret_cast<PyObject*>(cls));
  obj->inst_dict = make_dict();
  return obj;
}

ValueRef Tracer::construct(const ValueRef& cls_value, std::vector<ValueRef> args, Kwargs kwargs,
                           bool metaclass_call_done) {
  const auto& T = torch_refs();
  PyObject* f = cls_value->obj.get();
  auto* cls = reinterpret_cast<PyTypeObject*>(f);
  if (T.is_grad_mode_class(f)) return make_grad_ctx(f == T.enable_grad.get());
  if (f == T.grad_mode_setter.get()) {
    if (args.size() != 1 || !args[0]->is(VKind::Const))
      throw Unsupported(BreakCode::UnsupportedCall, "torch.set_grad_enabled with a non-constant argument");
    ValueRef ctx = make_grad_ctx(args[0]->obj.get() == Py_True);
    ctx->items = {make_const_borrowed(grad_enabled_ ? Py_True : Py_False)};  // restored by __exit__
    set_grad_mode(ctx->flag);  // takes effect at construction, as in torch
    return ctx;
  }
  if (PyType_Check(f) && is_autocast_class(cls)) return construct_autocast(cls, args, kwargs);
  if (PyType_IsSubtype(cls, reinterpret_cast<PyTypeObject*>(PyExc_BaseException))) {
    if (!kwargs.empty()) throw Unsupported(BreakCode::UnsupportedCall, "an exception built with keyword arguments");
    PyObject* init = lookup(cls, "__init__");
    if (init && PyFunction_Check(init))
      throw Unsupported(BreakCode::UnsupportedCall, fmt::format("constructing exception {} (its __init__ is Python)", cls->tp_name));
    auto e = make_seq(VKind::Exception, std::move(args));
    e->obj = PyRef::borrow(f);
    return e;
  }
  if (!metaclass_call_done) {
    // A metaclass's __call__ written in Python runs instead of type.__call__ (it usually calls super().__call__).
    PyObject* meta_call = lookup(Py_TYPE(f), "__call__");
    if (meta_call && PyFunction_Check(meta_call)) {
      note_class_read(Py_TYPE(f));
      args.insert(args.begin(), cls_value);
      return inline_function(meta_call, nullptr, std::move(args), std::move(kwargs));
    }
  }
  PyRef fields = PyRef::steal(PyObject_GetAttrString(f, "_fields"));
  if (!fields) PyErr_Clear();
  if (fields && PyType_IsSubtype(cls, &PyTuple_Type)) return make_namedtuple(cls, args, kwargs);
  if (f == partial_type()) {
    if (args.empty()) throw type_error("type 'partial' takes at least one argument");
    ValueRef kw = make_dict();
    for (auto& [k, v] : kwargs) inst_dict_set(*kw, PyRef::steal(PyUnicode_FromString(k.c_str())).get(), v);
    ValueRef fn = args[0];
    std::vector<ValueRef> bound(args.begin() + 1, args.end());
    if (fn->is(VKind::Partial)) {  // partial(partial(f, a), b) flattens, as functools does
      std::vector<ValueRef> inner = fn->items[1]->items;
      inner.insert(inner.end(), bound.begin(), bound.end());
      bound = std::move(inner);
      ValueRef merged = make_dict();
      merged->keys = fn->items[2]->keys;
      merged->items = fn->items[2]->items;
      for (size_t i = 0; i < kw->keys.size(); ++i) inst_dict_set(*merged, kw->keys[i]->obj.get(), kw->items[i]);
      kw = merged;
      fn = fn->items[0];
    }
    return make_seq(VKind::Partial, {fn, make_seq(VKind::Tuple, std::move(bound)), kw});
  }
  if (!(cls->tp_flags & Py_TPFLAGS_HEAPTYPE)) return call_builtin(f, args, kwargs);
  if (T.is_module(f) || PyType_IsSubtype(cls, reinterpret_cast<PyTypeObject*>(T.module_type.get())))
    return construct_stateless_module(cls, args, kwargs);
  if (PyType_IsSubtype(cls, reinterpret_cast<PyTypeObject*>(T.tensor_type.get())))
    throw Unsupported(BreakCode::UnsupportedCall, fmt::format("constructing a tensor subclass ({})", cls->tp_name));

  note_class_read(cls);
  PyObject* new_fn = lookup(cls, "__new__");
  ValueRef obj;
  PyTypeObject* new_owner = builtin_new_owner(new_fn);
  if (new_owner && makes_plain_instance(new_owner)) {
    obj = new_instance(cls);
  } else if (new_fn && Py_TYPE(new_fn) == &PyStaticMethod_Type) {
    PyRef fn = PyRef::steal(PyObject_GetAttrString(new_fn, "__func__"));
    if (!fn || !PyFunction_Check(fn.get()))
      throw Unsupported(BreakCode::UnsupportedCall, fmt::format("{}.__new__ is not a Python function", cls->tp_name));
    std::vector<ValueRef> new_args{cls_value};
    new_args.insert(new_args.end(), args.begin(), args.end());
    obj = inline_function(fn.get(), nullptr, std::move(new_args), kwargs);
    PyTypeObject* made = python_type(*obj);
    if (!made || !PyType_IsSubtype(made, cls)) return obj;  // __init__ runs only on an instance of the class
  } else {
    throw Unsupported(BreakCode::UnsupportedCall, fmt::format("constructing an object of class {} (its __new__ is {})",
                                                              cls->tp_name, new_fn ? Py_TYPE(new_fn)->tp_name : "missing"));
  }
  PyObject* init = lookup(cls, "__init__");
  if (init && PyFunction_Check(init)) {
    std::vector<ValueRef> init_args{obj};
    init_args.insert(init_args.end(), args.begin(), args.end());
    ValueRef r = inline_function(init, nullptr, std::move(init_args), std::move(kwargs));
    if (!(r->is(VKind::Const) && r->obj.get() == Py_None))
      throw type_error(fmt::format("__init__() should return None, not '{}'", python_type(*r)->tp_name));
    return obj;
  }
  PyTypeObject* init_owner = init && Py_TYPE(init) == &PyWrapperDescr_Type ? PyDescr_TYPE(init) : nullptr;
  if (init_owner == &PyBaseObject_Type) {
    if ((!args.empty() || !kwargs.empty()) && new_owner == &PyBaseObject_Type)
      throw type_error(fmt::format("{}() takes no arguments", cls->tp_name));
    return obj;
  }
  if (init_owner && PyType_IsSubtype(init_owner, &PyDict_Type)) {
    if (args.size() > 1) throw type_error(fmt::format("dict expected at most 1 argument, got {}", args.size()));
    container_method(obj, "update", args, kwargs);
    return obj;
  }
  throw Unsupported(BreakCode::UnsupportedCall, fmt::format("constructing an object of class {} (its __init__ is {})",
                                                            cls->tp_name, init ? Py_TYPE(init)->tp_name : "missing"));
}

// `loss_fct = nn.CrossEntropyLoss()` in a forward: torch's own modules that hold no parameters or buffers, built
// from constants, are built for real once at trace time; the trace calls that one. Such a constructor's result
// depends only on its arguments, and its forward reads only what the constructor set. The object must not leave
// the trace (every eager call makes a new one): convert_output refuses it. Modules from elsewhere (whose __init__
// may read anything) and modules with state stay a graph break.
ValueRef Tracer::construct_stateless_module(PyTypeObject* cls, const std::vector<ValueRef>& args, const Kwargs& kwargs) {
  auto refuse = [&](const std::string& why) {
    return Unsupported(BreakCode::UnsupportedCall, fmt::format("constructing an nn.Module ({}) inside the function: {}",
                                                               cls->tp_name, why));
  };
  PyRef module_name = PyRef::steal(PyObject_GetAttrString(reinterpret_cast<PyObject*>(cls), "__module__"));
  if (!module_name) PyErr_Clear();
  const std::string where = module_name && PyUnicode_Check(module_name.get()) ? utf8(module_name.get()) : "";
  if (where.rfind("torch.", 0) != 0) throw refuse("only torch's own modules without parameters are built in a trace");
  PyRef argv = PyRef::steal(PyTuple_New(args.size()));
  for (size_t i = 0; i < args.size(); ++i) {
    PyRef c = args[i]->is(VKind::Object) ? PyRef() : as_python_constant(args[i]);
    if (!c) throw refuse("an argument is not a constant");
    PyTuple_SET_ITEM(argv.get(), i, c.release());
  }
  PyRef kw = PyRef::steal(PyDict_New());
  for (const auto& [k, v] : kwargs) {
    PyRef c = v->is(VKind::Object) ? PyRef() : as_python_constant(v);
    if (!c) throw refuse(fmt::format("argument '{}' is not a constant", k));
    PyDict_SetItemString(kw.get(), k.c_str(), c.get());
  }
  PyRef module = call_keeping_rng(reinterpret_cast<PyObject*>(cls), argv.get(), kw.get());
  if (!module) {
    PyObject* known = known_exception();
    throw UserCodeError(take_error_message(), known);
  }
  for (const char* state : {"parameters", "buffers"}) {
    PyRef items = PyRef::steal(PyObject_CallMethod(module.get(), state, nullptr));
    PyRef first = items ? PyRef::steal(PyIter_Next(items.get())) : PyRef();
    if (PyErr_Occurred()) PyErr_Clear();
    if (!items || first) throw refuse(fmt::format("it has {}", state));
  }
  ValueRef v = make_object(module, -1);
  v->made_in_trace = true;
  return v;
}

ValueRef Tracer::make_namedtuple(PyTypeObject* cls, const std::vector<ValueRef>& args, const Kwargs& kwargs) {
  PyObject* f = reinterpret_cast<PyObject*>(cls);
  PyRef fields = PyRef::steal(PyObject_GetAttrString(f, "_fields"));
  auto rec = std::make_shared<Value>();
  rec->kind = VKind::Record;
  rec->obj = PyRef::borrow(f);
  PyRef defaults = PyRef::steal(PyObject_GetAttrString(f, "_field_defaults"));
  if (!defaults) PyErr_Clear();
  const Py_ssize_t n = PyTuple_GET_SIZE(fields.get());
  if (static_cast<Py_ssize_t>(args.size()) > n)
    throw type_error(fmt::format("{}() takes {} positional arguments but {} were given", cls->tp_name, n + 1, args.size() + 1));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* name = PyTuple_GET_ITEM(fields.get(), i);
    ValueRef v = i < static_cast<Py_ssize_t>(args.size()) ? args[i] : nullptr;
    for (auto& [k, kv] : kwargs)
      if (PyUnicode_CompareWithASCIIString(name, k.c_str()) == 0) {
        if (v) throw type_error(fmt::format("{}() got multiple values for argument '{}'", cls->tp_name, k));
        v = kv;
      }
    if (!v && defaults && PyDict_Check(defaults.get()) && PyDict_GetItem(defaults.get(), name))
      v = wrap_untracked(PyDict_GetItem(defaults.get(), name));
    if (!v) throw type_error(fmt::format("{}() missing required argument: '{}'", cls->tp_name, utf8(name)));
    rec->keys.push_back(make_const_borrowed(name));
    rec->items.push_back(v);
  }
  for (auto& [k, kv] : kwargs) {
    bool known = false;
    for (const ValueRef& key : rec->keys) known |= PyUnicode_CompareWithASCIIString(key->obj.get(), k.c_str()) == 0;
    if (!known) throw type_error(fmt::format("{}() got an unexpected keyword argument '{}'", cls->tp_name, k));
  }
  return rec;
}

ValueRef Tracer::call_type_method(PyObject* type, PyObject* fn, std::vector<ValueRef>& args, Kwargs& kwargs) {
  PyRef name_obj = PyRef::steal(PyObject_GetAttrString(fn, "__name__"));
  if (!name_obj) return PyErr_Clear(), nullptr;
  const std::string name = utf8(name_obj.get());
  auto* owner = reinterpret_cast<PyTypeObject*>(type);
  if (name == "__new__" && !args.empty() && args[0]->is(VKind::Object) && PyType_Check(args[0]->obj.get())) {
    auto* cls = reinterpret_cast<PyTypeObject*>(args[0]->obj.get());
    if (!PyType_IsSubtype(cls, owner)) throw type_error(fmt::format("{}.__new__({}): not a subtype", owner->tp_name, cls->tp_name));
    if (makes_plain_instance(owner) && (cls->tp_flags & Py_TPFLAGS_HEAPTYPE)) return new_instance(cls);
    if (owner == &PyTuple_Type && args.size() == 2) {  // a namedtuple's __new__: tuple.__new__(cls, (a, b))
      PyRef fields = PyRef::steal(PyObject_GetAttrString(args[0]->obj.get(), "_fields"));
      if (!fields) return PyErr_Clear(), nullptr;
      return make_namedtuple(cls, unpack(args[1], "build a tuple from"), {});
    }
  }
  (void)kwargs;
  return nullptr;
}

ValueRef Tracer::object_reduce(const ValueRef& self, const std::string& name, const std::vector<ValueRef>& args) {
  PyTypeObject* type = python_type(*self);
  if (!type || !(self->is(VKind::UserObject) || self->is(VKind::Object)) || PyType_IsSubtype(type, &PyDict_Type) ||
      PyType_IsSubtype(type, &PyList_Type) || !(type->tp_flags & Py_TPFLAGS_HEAPTYPE))
    throw Unsupported(BreakCode::UnsupportedCall, fmt::format("object.{}() of {}", name, describe(*self)));
  note_class_read(type);
  // __getstate__: an override written in Python, else the instance dict (None when empty).
  auto state = [&]() -> ValueRef {
    PyObject* getstate = lookup(type, "__getstate__");
    if (getstate && PyFunction_Check(getstate)) return inline_function(getstate, nullptr, {self}, {});
    if (PyObject* slots = lookup(type, "__slots__"); slots && slots != Py_None)
      throw Unsupported(BreakCode::UnsupportedCall, fmt::format("copying an instance of {} (it has __slots__)", type->tp_name));
    ValueRef d = instance_dict(self);
    return d->keys.empty() ? make_const_borrowed(Py_None) : d;
  };
  if (name == "__getstate__") return state();
  if (name == "__reduce_ex__") {
    PyObject* reduce = lookup(type, "__reduce__");
    if (reduce && PyFunction_Check(reduce)) return inline_function(reduce, nullptr, {self}, {});
    PyRef protocol = args.empty() ? PyRef() : as_python_constant(args[0]);
    if (!protocol || PyLong_AsLong(protocol.get()) < 2)
      throw Unsupported(BreakCode::UnsupportedCall, "object.__reduce_ex__ with a protocol below 2");
  }
  if (lookup(type, "__getnewargs_ex__") || lookup(type, "__getnewargs__"))
    throw Unsupported(BreakCode::UnsupportedCall, fmt::format("copying an instance of {} (it has __getnewargs__)", type->tp_name));
  // copyreg.__newobj__(cls), the state, and no list or dict items.
  static cpython::GilOnce<PyObject> newobj_fn;
  PyObject* newobj = newobj_fn.get([] { return cpython::import_attr("copyreg", "__newobj__"); });
  if (!newobj) throw Unsupported(BreakCode::Other, "fastcomp internal error: copyreg.__newobj__ is missing");
  ValueRef cls = make_object(PyRef::borrow(reinterpret_cast<PyObject*>(type)), -1);
  ValueRef none = make_const_borrowed(Py_None);
  return make_seq(VKind::Tuple, {wrap_untracked(newobj), make_seq(VKind::Tuple, {cls}), state(), none, none});
}

}  // namespace fastcomp::frontend
