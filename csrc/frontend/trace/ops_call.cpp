// Calls: argument binding and inlining of Python functions, torch ops, and the CALL family of instructions
// (nn.Module calls: module_call.cpp).
#include <fmt/format.h>

#include <string_view>

#include "frontend/trace/torch_refs.h"
#include "cpython/gil_once.h"
#include "cpython/weakref.h"
#include "frontend/trace/tracer.h"
#include "support/pystr.h"

namespace fastcomp::frontend {
namespace {

using Kwargs = std::vector<std::pair<std::string, ValueRef>>;

std::string qualified_name(PyObject* fn) {
  PyRef module = PyRef::steal(PyObject_GetAttrString(fn, "__module__"));
  if (!module) PyErr_Clear();
  // C functions' qualnames name torch's private holder classes (_VariableFunctionsClass.relu): use the name.
  PyRef qual = PyRef::steal(PyObject_GetAttrString(fn, PyFunction_Check(fn) ? "__qualname__" : "__name__"));
  if (!qual) {
    PyErr_Clear();
    qual = PyRef::steal(PyObject_GetAttrString(fn, "__name__"));
    if (!qual) PyErr_Clear();
  }
  std::string m = module && PyUnicode_Check(module.get()) ? utf8(module.get()) : "";
  std::string q = qual && PyUnicode_Check(qual.get()) ? utf8(qual.get()) : Py_TYPE(fn)->tp_name;
  if (m == "torch._C._VariableFunctions") m = "torch";
  return m.empty() ? q : m + "." + q;
}

}  // namespace

std::string callable_name(const Value& fn) {
  if (fn.is(VKind::Object)) {  // as CPython's _PyObject_FunctionStr: no module for builtins
    std::string name = qualified_name(fn.obj.get());
    return name.rfind("builtins.", 0) == 0 ? name.substr(9) : name;
  }
  if (!fn.is(VKind::Function)) return "";
  PyObject* module = fn.globals ? PyDict_GetItemString(fn.globals.get(), "__name__") : nullptr;
  return (module && PyUnicode_Check(module) ? utf8(module) + "." : "") + fn.name;
}

namespace {

// Whether a callable belongs to torch (an op or a torch Python function) rather than user code.
bool is_torch_callable(PyObject* fn) {
  if (PyType_Check(fn)) return false;
  if (Py_TYPE(fn) == &PyMethodDescr_Type || Py_TYPE(fn) == &PyWrapperDescr_Type) {
    PyObject* owner = reinterpret_cast<PyObject*>(PyDescr_TYPE(fn));
    return PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(torch_refs().tensor_type.get()),
                            reinterpret_cast<PyTypeObject*>(owner));
  }
  PyRef module = PyRef::steal(PyObject_GetAttrString(fn, "__module__"));
  if (!module || !PyUnicode_Check(module.get())) {
    PyErr_Clear();
    // torch._ops.OpOverload(Packet) objects (torch.ops.aten.*) have no plain __module__ string.
    return std::string_view(Py_TYPE(fn)->tp_name).find("OpOverload") != std::string_view::npos;
  }
  std::string_view m = PyUnicode_AsUTF8(module.get());
  return m == "torch" || m.rfind("torch.", 0) == 0;
}

// Whether `v` is an nn.Module. A torch function called with one first is one of its modules' methods
// (nn.LayerNorm.forward(self, x), unbound or through super()): traced like Python code, not recorded as an op.
bool is_module_value(const Value* v) {
  return v && v->is(VKind::Object) && v->obj && torch_refs().is_module(v->obj.get());
}

bool module_is(PyObject* fn, const char* name) {
  PyRef module = PyRef::steal(PyObject_GetAttrString(fn, "__module__"));
  if (!module || !PyUnicode_Check(module.get())) {
    PyErr_Clear();
    return false;
  }
  std::string_view m = PyUnicode_AsUTF8(module.get());
  return m == name || (m.rfind(name, 0) == 0 && m.size() > strlen(name) && m[strlen(name)] == '.');
}

// torch's argument helpers that read only their arguments: with every argument a constant their result is a
// constant, so the trace computes it once instead of recording a call that every run would repeat
// (nn.MultiheadAttention.forward makes three such calls, each an extern step of the graph otherwise).
bool is_argument_helper(const std::string& name) {
  static const char* const kNames[] = {"torch.nn.functional._canonical_mask", "torch.nn.functional._none_or_dtype"};
  for (const char* n : kNames)
    if (name == n) return true;
  return false;
}

// The helper's result when every argument is a constant and the result is a plain constant (None, bool, int,
// float, str, torch.dtype); null otherwise (then the call is recorded as usual).
ValueRef fold_argument_helper(PyObject* fn, const std::vector<ValueRef>& args, const Kwargs& kwargs) {
  for (const ValueRef& a : args)
    if (!a->is(VKind::Const)) return nullptr;
  for (const auto& [name, a] : kwargs)
    if (!a->is(VKind::Const)) return nullptr;
  PyRef tuple = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
  for (size_t i = 0; i < args.size(); ++i) PyTuple_SET_ITEM(tuple.get(), i, Py_NewRef(args[i]->obj.get()));
  PyRef dict = PyRef::steal(PyDict_New());
  for (const auto& [name, a] : kwargs) PyDict_SetItemString(dict.get(), name.c_str(), a->obj.get());
  PyRef out = PyRef::steal(PyObject_Call(fn, tuple.get(), dict.get()));
  if (!out) {  // it rejects these arguments: recording the call makes every run raise the same error
    PyErr_Clear();
    return nullptr;
  }
  PyObject* v = out.get();
  const bool plain = v == Py_None || PyBool_Check(v) || PyLong_CheckExact(v) || PyFloat_CheckExact(v) ||
                     PyUnicode_CheckExact(v) || Py_TYPE(v) == reinterpret_cast<PyTypeObject*>(torch_refs().dtype_type.get());
  return plain ? make_const(std::move(out)) : nullptr;
}

}  // namespace

bool is_compiling_flag(const std::string& name) {
  // Library code branches on these (skipping checks that need values, or eager-only paths); under torch.compile
  // they answer True while Dynamo traces, and so do they while fastcomp traces. Matched by name: torch._dynamo
  // is imported only by programs that use it (importing it costs seconds).
  static const char* const kNames[] = {"torch.compiler.is_compiling", "torch.compiler.is_dynamo_compiling",
                                       "torch._dynamo.external_utils.is_compiling", "torch._utils.is_compiling",
                                       "torch._dynamo.utils.is_compiling"};
  for (const char* n : kNames)
    if (name == n) return true;
  return false;
}

// torch.manual_seed and friends change the random number generators that later random ops read: recorded as a node
// of the graph, so that each call seeds at the same point of the program as eager, and not run while tracing.
ValueRef Tracer::seed_rng(PyObject* fn, const std::string& name, const std::vector<ValueRef>& args, const Kwargs& kwargs) {
  static const char* const kSeeding[] = {"torch.random.manual_seed", "torch.cuda.random.manual_seed",
                                         "torch.cuda.random.manual_seed_all", "torch.random.set_rng_state",
                                         "torch.cuda.random.set_rng_state", "torch.cuda.random.set_rng_state_all"};
  bool seeding = false;
  for (const char* n : kSeeding) seeding |= name == n;
  if (!seeding) {
    if (name == "torch.random.seed" || name == "torch.cuda.random.seed" || name == "torch.random.get_rng_state" ||
        name == "torch.cuda.random.get_rng_state")
      throw Unsupported(BreakCode::SideEffect, name + "() reads or draws a random seed at run time");
    return nullptr;
  }
  graph::Node node;
  node.kind = graph::NodeKind::Call;
  node.target = PyRef::borrow(fn);
  node.target_name = name;
  node.user_loc = user_loc();
  for (const ValueRef& a : args) {
    if (a->is(VKind::Object)) throw Unsupported(BreakCode::UnsupportedValue, name + "() with " + describe(*a));
    node.args.push_back(to_output_arg(a));
  }
  if (!kwargs.empty()) {
    node.kwnames = PyRef::steal(PyTuple_New(kwargs.size()));
    for (size_t i = 0; i < kwargs.size(); ++i) {
      PyTuple_SET_ITEM(node.kwnames.get(), i, PyUnicode_FromString(kwargs[i].first.c_str()));
      node.kwargs.push_back(to_output_arg(kwargs[i].second));
    }
  }
  graph_.add(std::move(node));
  if (name == "torch.random.manual_seed") {  // returns torch.default_generator
    PyRef gen = PyRef::steal(PyObject_GetAttrString(torch_refs().torch.get(), "default_generator"));
    if (gen) return wrap_untracked(gen.get());
    PyErr_Clear();
  }
  return make_const_borrowed(Py_None);
}

ValueRef Tracer::inline_function(PyObject* func_or_code, const Value* fn_value, std::vector<ValueRef> args,
                                 Kwargs kwargs) {
  PyObject* func = fn_value ? nullptr : func_or_code;
  PyCodeObject* code = reinterpret_cast<PyCodeObject*>(fn_value ? fn_value->obj.get() : PyFunction_GET_CODE(func));
  if (code->co_flags & (CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE))
    throw Unsupported(BreakCode::UnsupportedCall, "call to an async function");
  auto callee = std::make_shared<TraceFrame>();
  TraceFrame& f = *callee;
  f.code = PyRef::borrow(reinterpret_cast<PyObject*>(code));
  f.instrs = decoded(code);
  f.globals = fn_value ? fn_value->globals.get() : PyFunction_GET_GLOBALS(func);
  PyObject* builtins = PyDict_GetItemString(f.globals, "__builtins__");
  if (builtins && PyModule_Check(builtins)) builtins = PyModule_GetDict(builtins);
  f.builtins = builtins ? builtins : PyEval_GetBuiltins();
  if (f.globals == frames_.front()->globals) {
    f.globals_source = frames_.front()->globals_source;
  } else if (fn_value && !frames_.empty()) {
    f.globals_source = frame().globals_source;
  } else {
    PyObject* modname = PyDict_GetItemString(f.globals, "__name__");
    f.globals_source = guards_.sources.const_object(
        f.globals, fmt::format("G({})", modname && PyUnicode_Check(modname) ? utf8(modname) : "?"));
  }
  const int nlocals = code->co_nlocalsplus;
  f.locals.assign(nlocals, nullptr);

  // Argument binding, as CPython does it for a call with positional `args` and keyword `kwargs`.
  const int npos = code->co_argcount, nposonly = code->co_posonlyargcount, nkwonly = code->co_kwonlyargcount;
  const bool has_varargs = code->co_flags & CO_VARARGS, has_varkw = code->co_flags & CO_VARKEYWORDS;
  const std::string fname = utf8(code->co_name);
  std::vector<ValueRef> extra;
  for (size_t i = 0; i < args.size(); ++i) {
    if (static_cast<int>(i) < npos) f.locals[i] = args[i];
    else if (has_varargs) extra.push_back(args[i]);
    else throw UserCodeError(fmt::format("{}() takes {} positional arguments but {} were given", fname, npos, args.size()));
  }
  ValueRef varkw = has_varkw ? make_seq(VKind::Dict, {}) : nullptr;
  for (auto& [key, value] : kwargs) {
    int slot = -1;
    for (int i = nposonly; i < npos + nkwonly; ++i)
      if (utf8(PyTuple_GET_ITEM(code->co_localsplusnames, i)) == key) slot = i;
    if (slot >= 0) {
      if (f.locals[slot]) throw UserCodeError(fmt::format("{}() got multiple values for argument '{}'", fname, key));
      f.locals[slot] = value;
    } else if (varkw) {
      varkw->keys.push_back(make_const(PyRef::steal(PyUnicode_FromString(key.c_str()))));
      varkw->items.push_back(value);
    } else {
      throw UserCodeError(fmt::format("{}() got an unexpected keyword argument '{}'", fname, key));
    }
  }
  // Defaults: from the real function, or the Function value made by MAKE_FUNCTION.
  std::vector<ValueRef> defaults;
  ValueRef kwdefaults;
  if (func) {
    PyObject* d = PyFunction_GET_DEFAULTS(func);
    for (Py_ssize_t i = 0; d && i < PyTuple_GET_SIZE(d); ++i) defaults.push_back(wrap_untracked(PyTuple_GET_ITEM(d, i)));
    PyObject* kd = PyFunction_GET_KW_DEFAULTS(func);
    if (kd) {
      kwdefaults = make_seq(VKind::Dict, {});
      PyObject *k, *v;
      Py_ssize_t pos = 0;
      while (PyDict_Next(kd, &pos, &k, &v)) {
        kwdefaults->keys.push_back(make_const_borrowed(k));
        kwdefaults->items.push_back(wrap_untracked(v));
      }
    }
  } else {
    if (fn_value->defaults) defaults = fn_value->defaults->items;
    kwdefaults = fn_value->kwdefaults;
  }
  for (int i = 0; i < npos; ++i) {
    if (f.locals[i]) continue;
    int d = i - (npos - static_cast<int>(defaults.size()));
    if (d < 0) throw UserCodeError(fmt::format("{}() missing required argument '{}'", fname,
                                               utf8(PyTuple_GET_ITEM(code->co_localsplusnames, i))));
    f.locals[i] = defaults[d];
  }
  for (int i = npos; i < npos + nkwonly; ++i) {
    if (f.locals[i]) continue;
    PyObject* name = PyTuple_GET_ITEM(code->co_localsplusnames, i);
    if (kwdefaults)
      for (size_t k = 0; k < kwdefaults->keys.size(); ++k)
        if (PyUnicode_Compare(kwdefaults->keys[k]->obj.get(), name) == 0) f.locals[i] = kwdefaults->items[k];
    if (!f.locals[i]) throw UserCodeError(fmt::format("{}() missing keyword-only argument '{}'", fname, utf8(name)));
  }
  int slot = npos + nkwonly;
  if (has_varargs) f.locals[slot++] = make_seq(VKind::Tuple, std::move(extra));
  if (has_varkw) f.locals[slot++] = varkw;

  // Free variables: the closure's cells, in order, fill the last slots.
  const int nfree = code->co_nfreevars;
  if (nfree) {
    if (fn_value) {
      for (int i = 0; i < nfree; ++i) f.locals[nlocals - nfree + i] = fn_value->closure->items[i];
    } else {
      PyObject* closure = PyFunction_GET_CLOSURE(func);
      for (int i = 0; i < nfree; ++i) {
        PyObject* cell = PyTuple_GET_ITEM(closure, i);
        // One Value per real cell, so that what one inlined call stores the next one reads.
        auto known = object_by_identity_.find(cell);
        if (known != object_by_identity_.end()) {
          f.locals[nlocals - nfree + i] = known->second;
          continue;
        }
        PyObject* content = PyCell_GET(cell);
        int cell_src = guards_.sources.const_object(cell, fmt::format("{}.__closure__[{}]", fname, i));
        int src = guards_.sources.cell_contents(cell_src);
        ValueRef c = make_cell(content ? wrap(content, src) : nullptr);
        c->source = cell_src;  // storing into it is a side effect, written back into the cell
        object_by_identity_.emplace(cell, c);
        f.locals[nlocals - nfree + i] = c;
      }
    }
  }
  // A generator's body runs when its items are asked for (iterators.cpp), as in Python.
  if (code->co_flags & CO_GENERATOR) return start_generator(std::move(callee));
  return run_frame(f);
}

ValueRef Tracer::call(const ValueRef& fn, std::vector<ValueRef> args, Kwargs kwargs) {
  switch (fn->kind) {
    case VKind::Function: return inline_function(nullptr, fn.get(), std::move(args), std::move(kwargs));
    case VKind::CtxExit: return set_grad_mode(fn->flag);
    case VKind::AutocastExit: return leave_autocast(*fn);
    case VKind::Method: return call_method(fn, std::move(args), std::move(kwargs));
    case VKind::Object: return call_object(fn, std::move(args), std::move(kwargs));
    case VKind::Partial: {
      // partial(f, *a, **k)(*b, **l) is f(*a, *b, **{**k, **l}).
      std::vector<ValueRef> all = fn->items[1]->items;
      all.insert(all.end(), args.begin(), args.end());
      Kwargs merged;
      const Value& kw = *fn->items[2];
      for (size_t i = 0; i < kw.keys.size(); ++i) {
        std::string k = utf8(kw.keys[i]->obj.get());
        bool overridden = false;
        for (auto& [name, v] : kwargs) overridden |= name == k;
        if (!overridden) merged.emplace_back(k, kw.items[i]);
      }
      for (auto& kv : kwargs) merged.push_back(std::move(kv));
      return call(fn->items[0], std::move(all), std::move(merged));
    }
    case VKind::UserObject: {
      PyTypeObject* type = python_type(*fn);
      PyObject* call_fn = _PyType_Lookup(type, PyRef::steal(PyUnicode_InternFromString("__call__")).get());
      if (call_fn && PyFunction_Check(call_fn)) {
        note_class_read(type);
        args.insert(args.begin(), fn);
        return inline_function(call_fn, nullptr, std::move(args), std::move(kwargs));
      }
      throw type_error(fmt::format("'{}' object is not callable", type->tp_name));
    }
    case VKind::Const: throw type_error(fmt::format("'{}' object is not callable", Py_TYPE(fn->obj.get())->tp_name));
    default: throw Unsupported(BreakCode::UnsupportedCall, "call of " + describe(*fn));
  }
}

ValueRef Tracer::call_method(const ValueRef& fn, std::vector<ValueRef> args, Kwargs kwargs) {
  const ValueRef& self = fn->items[0];
  if (self->is(VKind::Tensor)) {
    if (fn->name == "Tensor.type" && args.empty() && kwargs.empty()) {
      // The legacy type name ("torch.cuda.HalfTensor") of the real device, not of the meta tensor that stands for it.
      PyRef meta_name = PyRef::steal(PyObject_CallMethod(self->meta.get(), "type", nullptr));
      PyRef device_type = PyRef::steal(PyObject_GetAttrString(self->device.get(), "type"));
      if (!meta_name || !device_type) throw Unsupported(BreakCode::Other, "fastcomp internal error: Tensor.type()");
      std::string n = utf8(meta_name.get()), dev = utf8(device_type.get());
      n.replace(0, std::string("torch.meta.").size(), dev == "cpu" ? "torch." : "torch." + dev + ".");
      return make_const(PyRef::steal(PyUnicode_FromString(n.c_str())));
    }
    args.insert(args.begin(), self);
    ValueRef out = call_torch(fn->obj.get(), fn->name, args, kwargs);
    // An in-place method returns its tensor itself (`x is x.add_(1)`): the Value now stands for the result.
    const std::string& n = fn->name;
    if (out->is(VKind::Tensor) && n.size() > 1 && n.back() == '_' && n[n.size() - 2] != '_') {
      self->node = out->node;
      self->meta = out->meta;
      self->shape = out->shape;
      return self;
    }
    return out;
  }
  if (!fn->obj) return container_method(self, fn->name, args, kwargs);
  PyObject* f = fn->obj.get();
  if (ValueRef deferred; defer_if_logging(nullptr, self, fn->name, args, kwargs, &deferred)) return deferred;
  if (PyFunction_Check(f)) {
    args.insert(args.begin(), self);
    if (is_torch_callable(f) && !is_module_value(self.get())) return call_torch(f, qualified_name(f), args, kwargs);
    return inline_function(f, nullptr, std::move(args), std::move(kwargs));
  }
  if (Py_TYPE(f) == &PyMethodDescr_Type || Py_TYPE(f) == &PyWrapperDescr_Type || Py_TYPE(f) == &PyClassMethodDescr_Type)
    return call_c_method(f, self, std::move(args), std::move(kwargs));
  // Another callable bound as a method (MethodType(f, self): an lru_cache wrapper on a class): f(self, *args).
  args.insert(args.begin(), self);
  return call_object(wrap_untracked(f), std::move(args), std::move(kwargs));
}

ValueRef Tracer::call_c_method(PyObject* descr, const ValueRef& self, std::vector<ValueRef> args, Kwargs kwargs) {
  PyRef name_obj = PyRef::steal(PyObject_GetAttrString(descr, "__name__"));
  if (!name_obj) PyErr_Clear();
  const std::string name = name_obj ? utf8(name_obj.get()) : "?";
  PyTypeObject* owner = Py_TYPE(descr) == &PyMethodDescr_Type || Py_TYPE(descr) == &PyWrapperDescr_Type ||
                                Py_TYPE(descr) == &PyClassMethodDescr_Type
                            ? PyDescr_TYPE(descr)
                            : nullptr;
  if (self->is(VKind::Tensor)) {
    args.insert(args.begin(), self);
    return call_torch(descr, "Tensor." + name, args, kwargs);
  }
  auto arg_name = [&](size_t i) {
    PyRef n = i < args.size() ? as_python_constant(args[i]) : PyRef();
    if (!n || !PyUnicode_Check(n.get())) throw type_error(fmt::format("{}(): attribute name must be a string", name));
    return n;
  };
  if (owner == &PyBaseObject_Type) {
    if (name == "__setattr__" && args.size() == 2) {
      object_setattr(self, arg_name(0).get(), args[1]);
      return make_const_borrowed(Py_None);
    }
    if (name == "__delattr__" && args.size() == 1) {
      object_setattr(self, arg_name(0).get(), nullptr);
      return make_const_borrowed(Py_None);
    }
    if (name == "__getattribute__" && args.size() == 1) return object_getattribute(self, arg_name(0).get());
    if (name == "__init__" || name == "__init_subclass__") return make_const_borrowed(Py_None);
    if (name == "__reduce_ex__" || name == "__reduce__" || name == "__getstate__") return object_reduce(self, name, args);
    if ((name == "__eq__" || name == "__ne__") && args.size() == 1) {
      bool same = self.get() == args[0].get() ||
                  ((self->is(VKind::Object) || self->is(VKind::Const)) &&
                   (args[0]->is(VKind::Object) || args[0]->is(VKind::Const)) && self->obj.get() == args[0]->obj.get());
      if (name == "__eq__") return same ? make_const_borrowed(Py_True) : make_const_borrowed(Py_NotImplemented);
      return same ? make_const_borrowed(Py_False) : make_const_borrowed(Py_NotImplemented);
    }
  }
  if (owner == &PyType_Type && name == "__call__" && self->is(VKind::Object) && PyType_Check(self->obj.get()))
    return construct(self, std::move(args), std::move(kwargs), /*metaclass_call_done=*/true);
  if (owner && self->is(VKind::Object) && PyDict_Check(self->obj.get()) && PyType_IsSubtype(owner, &PyDict_Type) &&
      name != "__init__")
    return container_method(dict_contents(self), name, args, kwargs);
  bool container_self = self->is(VKind::List) || self->is(VKind::Tuple) || self->is(VKind::Dict) ||
                        self->is(VKind::Set) || self->is(VKind::UserObject);
  if (owner && container_self && PyType_IsSubtype(python_type(*self), owner)) {
    if (name == "__init__" && self->is(VKind::UserObject)) {  // dict.__init__(self, *args, **kwargs) of a subclass
      if (args.size() > 1) throw type_error(fmt::format("dict expected at most 1 argument, got {}", args.size()));
      return container_method(self, "update", args, kwargs);
    }
    return container_method(self, name, args, kwargs);
  }
  // A method of an immutable constant ("a,b".split(","), (1, 2).index(2)): run it for real on constant arguments.
  if (self->is(VKind::Const)) {
    PyRef argv = PyRef::steal(PyTuple_New(args.size() + 1));
    PyTuple_SET_ITEM(argv.get(), 0, self->obj.new_ref());
    bool constant = kwargs.empty();
    for (size_t i = 0; i < args.size() && constant; ++i) {
      PyRef c = as_python_constant(args[i]);
      constant = c && !args[i]->is(VKind::Object);
      if (constant) PyTuple_SET_ITEM(argv.get(), i + 1, c.release());
    }
    if (constant) {
      PyRef out = PyRef::steal(PyObject_Call(descr, argv.get(), nullptr));
      if (!out) {
        PyObject* type = PyErr_Occurred();
        PyObject* known = nullptr;
        for (PyObject* t : {PyExc_ValueError, PyExc_TypeError, PyExc_IndexError, PyExc_KeyError, PyExc_AttributeError})
          if (type && PyErr_GivenExceptionMatches(type, t)) known = t;
        throw UserCodeError(take_error_message(), known);
      }
      return wrap_call_result(out.get());
    }
  }
  throw Unsupported(BreakCode::UnsupportedCall,
                    fmt::format("method {}.{}() of {}", owner ? owner->tp_name : "?", name, describe(*self)));
}

ValueRef Tracer::call_object(const ValueRef& fn, std::vector<ValueRef> args, Kwargs kwargs) {
  const auto& T = torch_refs();
  PyObject* f = fn->obj.get();
  if (f == special_object("is_compiling")) return make_const_borrowed(Py_True);
  PyObject* disabled_type = special_object("disabled_type");
  if (disabled_type && PyObject_TypeCheck(f, reinterpret_cast<PyTypeObject*>(disabled_type)))
    throw Unsupported(BreakCode::DisabledFunction, "call to a function wrapped with fastcomp.disable");
  if (T.is_module(f)) {
    // nn.Module.__call__ runs hooks around forward (call_module models that); a subclass may override __call__.
    PyObject* call_fn = _PyType_Lookup(Py_TYPE(f), PyRef::steal(PyUnicode_InternFromString("__call__")).get());
    static PyObject* module_call = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(T.module_type.get()),
                                                  PyRef::steal(PyUnicode_InternFromString("__call__")).get());
    note_class_read(Py_TYPE(f));
    if (call_fn == module_call) return call_module(fn, std::move(args), std::move(kwargs));
    if (call_fn && PyFunction_Check(call_fn)) {
      args.insert(args.begin(), fn);
      return inline_function(call_fn, nullptr, std::move(args), std::move(kwargs));
    }
  }
  if (PyType_Check(f)) return construct(fn, std::move(args), std::move(kwargs));
  if (PyWeakref_CheckRefExact(f) && fn->source >= 0) {
    // weakref.ref(): its referent now, read through a source of its own, so that a call after the referent was
    // replaced or collected fails its guards (nn.RNN's forward compares its flat weights this way).
    if (!kwargs.empty()) throw type_error("weakref() takes no keyword arguments");
    if (!args.empty()) throw type_error(fmt::format("weakref expected 0 arguments, got {}", args.size()));
    return wrap(cpython::weakref_referent(f), guards_.sources.weakref_referent(fn->source));
  }
  if (ValueRef deferred; defer_if_logging(f, nullptr, "", args, kwargs, &deferred)) return deferred;
  if (module_is(f, "numpy")) throw Unsupported(BreakCode::NumpyCall, "call to " + qualified_name(f));
  if (PyFunction_Check(f)) {
    PyObject* module = PyFunction_GET_MODULE(f);
    if (module && PyUnicode_Check(module) && PyUnicode_CompareWithASCIIString(module, "inspect") == 0) {
      const std::string name = qualified_name(f);
      if (is_pure_library_call(name)) return call_pure(f, name, args, kwargs);
    }
    if (is_torch_callable(f) && !is_module_value(args.empty() ? nullptr : args[0].get())) {
      const std::string name = qualified_name(f);
      if (is_compiling_flag(name)) return make_const_borrowed(Py_True);
      if (ValueRef v = seed_rng(f, name, args, kwargs)) return v;
      if (is_argument_helper(name))
        if (ValueRef folded = fold_argument_helper(f, args, kwargs)) return folded;
      return call_torch(f, name, args, kwargs);
    }
    return inline_function(f, nullptr, std::move(args), std::move(kwargs));
  }
  if (PyMethod_Check(f)) {
    PyObject* self = PyMethod_GET_SELF(f);
    args.insert(args.begin(), is_frozen(*fn) ? wrap_frozen(self) : wrap_untracked(self));
    return call(make_object(PyRef::borrow(PyMethod_GET_FUNCTION(f)), -1), std::move(args), std::move(kwargs));
  }
  if (Py_TYPE(f) == &PyMethodDescr_Type || Py_TYPE(f) == &PyWrapperDescr_Type) {
    // An unbound C method called with its object first: dict.__setitem__(d, k, v), object.__setattr__(o, n, v).
    if (args.empty()) throw type_error("unbound method needs an argument");
    if (!args[0]->is(VKind::Tensor)) {
      ValueRef self = args[0];
      args.erase(args.begin());
      return call_c_method(f, self, std::move(args), std::move(kwargs));
    }
  }
  if (PyCFunction_Check(f) && is_frozen(*fn)) {
    // A C method of a frozen value (OrderedDict.keys of a signature's parameters...): run for real on constants.
    PyRef argv = PyRef::steal(PyTuple_New(args.size()));
    for (size_t i = 0; i < args.size(); ++i) {
      PyRef c = as_python_constant(args[i]);
      if (!c || !(args[i]->is(VKind::Const) || is_frozen(*args[i]))) {
        throw Unsupported(BreakCode::UnsupportedCall, "a method of a frozen value with " + describe(*args[i]));
      }
      PyTuple_SET_ITEM(argv.get(), i, c.release());
    }
    if (!kwargs.empty()) throw Unsupported(BreakCode::UnsupportedCall, "a method of a frozen value with keywords");
    return frozen_op("call", fn, [&](PyObject* m) { return PyObject_Call(m, argv.get(), nullptr); });
  }
  if (PyCFunction_Check(f)) {
    PyObject* self = PyCFunction_GET_SELF(f);
    if (self && !PyModule_Check(self) && !PyType_Check(self) && is_constant(self)) {
      // A method of an immutable constant, bound ("a.b".split, seen through getattr): as its unbound descriptor.
      PyObject* descr = _PyType_Lookup(Py_TYPE(self), PyRef::steal(PyObject_GetAttrString(f, "__name__")).get());
      if (descr) return call_c_method(descr, make_const_borrowed(self), std::move(args), std::move(kwargs));
    }
    if (self && PyType_Check(self) && !is_torch_callable(f)) {
      // A builtin class's own method (object.__new__, tuple.__new__, dict.fromkeys): modelled by construct.cpp.
      if (ValueRef v = call_type_method(self, f, args, kwargs)) return v;
    }
  }
  // functools.lru_cache: a memoised function is taken to be pure, so with constant arguments it is called while
  // tracing (usually a cache hit) and its result is a constant of the trace.
  static cpython::GilOnce<PyObject> lru_type;
  PyObject* lru_wrapper = lru_type.get([] { return cpython::import_attr("functools", "_lru_cache_wrapper"); });
  if (lru_wrapper && Py_TYPE(f) == reinterpret_cast<PyTypeObject*>(lru_wrapper)) {
    PyRef argv = PyRef::steal(PyTuple_New(args.size()));
    PyRef kw = PyRef::steal(PyDict_New());
    auto real = [&](const ValueRef& a) -> PyRef {
      if (a->is(VKind::Object) || (a->is(VKind::Const) && !a->flag)) return a->obj;
      PyRef c = a->is(VKind::Tuple) ? as_python_constant(a) : PyRef();
      return c;
    };
    bool constant = true;
    for (size_t i = 0; i < args.size() && constant; ++i) {
      PyRef c = real(args[i]);
      constant = bool(c);
      if (constant) PyTuple_SET_ITEM(argv.get(), i, c.release());
    }
    for (auto& [k, v] : kwargs) {
      PyRef c = constant ? real(v) : PyRef();
      constant = constant && c;
      if (constant) PyDict_SetItemString(kw.get(), k.c_str(), c.get());
    }
    if (constant) {
      auto misses = [f] {
        PyRef info = PyRef::steal(PyObject_CallMethod(f, "cache_info", nullptr));
        PyRef n = info ? PyRef::steal(PyObject_GetAttrString(info.get(), "misses")) : PyRef();
        const long v = n ? PyLong_AsLong(n.get()) : -1;
        PyErr_Clear();
        return v;
      };
      const long before = misses();
      PyRef out = PyRef::steal(PyObject_Call(f, argv.get(), kw.get()));
      if (!out) throw UserCodeError("a memoised function raised " + take_error_message());
      if (misses() != before) {
        // Its body ran (a first call: logger.warning_once logs and fills caches), which may change what this
        // trace has already read and guarded: the trace starts over, and the call is then a cache hit.
        Unsupported again(BreakCode::Other, "the first call of a memoised function ran its body");
        again.trace_again = true;
        throw again;
      }
      return wrap_call_result(out.get());
    }
    PyRef wrapped = PyRef::steal(PyObject_GetAttrString(f, "__wrapped__"));
    if (!wrapped) throw Unsupported(BreakCode::UnsupportedCall, "an lru_cache function without __wrapped__");
    return call(make_object(wrapped, -1), std::move(args), std::move(kwargs));
  }
  // functools.partial objects from the frame: their function and arguments, read through the object.
  if (partial_type() && Py_TYPE(f) == reinterpret_cast<PyTypeObject*>(partial_type())) {
    ValueRef p = make_seq(VKind::Partial, {get_attr(fn, PyRef::steal(PyUnicode_FromString("func")).get()),
                                           get_attr(fn, PyRef::steal(PyUnicode_FromString("args")).get()),
                                           get_attr(fn, PyRef::steal(PyUnicode_FromString("keywords")).get())});
    return call(p, std::move(args), std::move(kwargs));
  }
  if (is_torch_callable(f)) return call_torch(f, qualified_name(f), args, kwargs);
  if (!PyCFunction_Check(f) && !PyType_Check(f)) {
    // A callable instance whose class defines __call__ in Python.
    PyObject* call_fn = _PyType_Lookup(Py_TYPE(f), PyRef::steal(PyUnicode_InternFromString("__call__")).get());
    if (call_fn && PyFunction_Check(call_fn)) {
      note_class_read(Py_TYPE(f));
      args.insert(args.begin(), fn);
      return inline_function(call_fn, nullptr, std::move(args), std::move(kwargs));
    }
  }
  return call_builtin(f, args, kwargs);
}

void step_call(Tracer& t, TraceFrame& f, const Instr& in) {
  PyCodeObject* code = reinterpret_cast<PyCodeObject*>(f.code.get());
  switch (in.op) {
    case Op::CALL: {
      PyObject* kwnames = in.kwnames >= 0 ? PyTuple_GET_ITEM(code->co_consts, in.kwnames) : nullptr;
      const int nkw = kwnames ? static_cast<int>(PyTuple_GET_SIZE(kwnames)) : 0;
      std::vector<ValueRef> all = t.pop_n(in.arg);
      ValueRef second = t.pop();  // callable, or self when the first is a method
      ValueRef first = t.pop();   // NULL, or the method
      ValueRef fn = first->is(VKind::Null) ? second : first;
      if (!first->is(VKind::Null)) all.insert(all.begin(), second);
      Kwargs kwargs;
      for (int i = 0; i < nkw; ++i)
        kwargs.emplace_back(utf8(PyTuple_GET_ITEM(kwnames, i)), all[all.size() - nkw + i]);
      all.resize(all.size() - nkw);
      t.push(t.call(fn, std::move(all), std::move(kwargs)));
      return;
    }
    case Op::CALL_FUNCTION_EX: {
      ValueRef kw = (in.arg & 1) ? t.pop() : nullptr;
      ValueRef args = t.pop();
      ValueRef fn = t.pop();
      if (t.top()->is(VKind::Null)) t.pop();
      Kwargs kwargs;
      if (kw) {
        if (!kw->is(VKind::Dict)) throw Unsupported(BreakCode::UnsupportedValue, "** of " + describe(*kw));
        for (size_t i = 0; i < kw->keys.size(); ++i) kwargs.emplace_back(utf8(kw->keys[i]->obj.get()), kw->items[i]);
      }
      t.push(t.call(fn, t.unpack(args, "unpack"), std::move(kwargs)));
      return;
    }
    case Op::MAKE_FUNCTION: {
      ValueRef fn_code = t.pop();
      auto fn = std::make_shared<Value>();
      fn->kind = VKind::Function;
      fn->obj = fn_code->obj;
      fn->globals = PyRef::borrow(f.globals);
      fn->name = utf8(reinterpret_cast<PyCodeObject*>(fn_code->obj.get())->co_qualname);
      if (in.arg & 0x08) fn->closure = t.pop();
      if (in.arg & 0x04) t.pop();  // annotations
      if (in.arg & 0x02) fn->kwdefaults = t.pop();
      if (in.arg & 0x01) fn->defaults = t.pop();
      t.push(fn);
      return;
    }
    default:
      throw Unsupported(BreakCode::UnsupportedOpcode,
                        fmt::format("instruction {} (opcode {})", op_name(in.op), in.raw_opcode));
  }
}

}  // namespace fastcomp::frontend
