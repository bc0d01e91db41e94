// Calls: argument binding and inlining of Python functions, nn.Module calls, torch ops, and the CALL family
// of instructions.
#include <fmt/format.h>

#include <string_view>

#include "frontend/trace/torch_refs.h"
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

ValueRef Tracer::inline_function(PyObject* func_or_code, const Value* fn_value, std::vector<ValueRef> args,
                                 Kwargs kwargs) {
  PyObject* func = fn_value ? nullptr : func_or_code;
  PyCodeObject* code = reinterpret_cast<PyCodeObject*>(fn_value ? fn_value->obj.get() : PyFunction_GET_CODE(func));
  if (code->co_flags & (CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE))
    throw Unsupported(BreakCode::UnsupportedCall, "call to an async function");
  TraceFrame f;
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
        PyObject* content = PyCell_GET(cell);
        int src = guards_.sources.attr(guards_.sources.const_object(cell, fmt::format("{}.__closure__[{}]", fname, i)),
                                       PyRef::steal(PyUnicode_FromString("cell_contents")).get());
        ValueRef c = make_cell(content ? wrap(content, src) : nullptr);
        c->source = src;
        f.locals[nlocals - nfree + i] = c;
      }
    }
  }
  if (code->co_flags & CO_GENERATOR) {
    // Generators are run to completion here; their values are produced in order, which is what the
    // consumers that trace code uses (for loops, list(), tuple(), any(), all(), sum()) observe.
    std::vector<ValueRef> yields;
    f.yields = &yields;
    run_frame(f);
    auto it = make_seq(VKind::Iterator, std::move(yields));
    return it;
  }
  return run_frame(f);
}

ValueRef Tracer::call_module(const ValueRef& module, std::vector<ValueRef> args, Kwargs kwargs) {
  PyObject* m = module->obj.get();
  // nn.Module.__call__ runs hooks around forward; fastcomp inlines forward directly when there are none, and
  // guards that none are added later.
  static const char* kHookDicts[] = {"_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks"};
  PyObject** dictptr = _PyObject_GetDictPtr(m);
  for (const char* slot : kHookDicts) {
    PyObject* d = dictptr && *dictptr ? PyDict_GetItemString(*dictptr, slot) : nullptr;
    if (d && PyDict_Check(d) && PyDict_GET_SIZE(d) > 0)
      throw Unsupported(BreakCode::UnsupportedCall, fmt::format("call of a submodule that has {}", slot));
    if (d && module->source >= 0)
      guard_length(guards_.sources.inst_dict(module->source, PyRef::steal(PyUnicode_FromString(slot)).get()), 0);
  }
  if (!module_hook_guards_added_) {
    module_hook_guards_added_ = true;
    PyRef mod = PyRef::steal(PyImport_ImportModule("torch.nn.modules.module"));
    static const char* kGlobal[] = {"_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                                    "_global_backward_pre_hooks"};
    for (const char* name : kGlobal) {
      PyRef d = PyRef::steal(PyObject_GetAttrString(mod.get(), name));
      if (!d) {
        PyErr_Clear();
        continue;
      }
      if (PyObject_Length(d.get()) > 0)
        throw Unsupported(BreakCode::UnsupportedCall, fmt::format("module call while a global {} is registered", name));
      guard_length(guards_.sources.const_object(d.get(), std::string("torch.nn.modules.module.") + name), 0);
    }
  }
  ValueRef forward = get_attr(module, PyRef::steal(PyUnicode_FromString("forward")).get());
  return call(forward, std::move(args), std::move(kwargs));
}

ValueRef Tracer::call(const ValueRef& fn, std::vector<ValueRef> args, Kwargs kwargs) {
  const auto& T = torch_refs();
  switch (fn->kind) {
    case VKind::Function: return inline_function(nullptr, fn.get(), std::move(args), std::move(kwargs));
    case VKind::CtxExit: return set_grad_mode(fn->flag);
    case VKind::Method: {
      const ValueRef& self = fn->items[0];
      if (self->is(VKind::Tensor)) {
        args.insert(args.begin(), self);
        return call_torch(fn->obj.get(), fn->name, args, kwargs);
      }
      if (self->is(VKind::Tuple) || self->is(VKind::List) || self->is(VKind::Dict)) {
        extern ValueRef call_container_method(Tracer & t, const ValueRef& self, const std::string& name,
                                              std::vector<ValueRef>& args);
        return call_container_method(*this, self, fn->name, args);
      }
      args.insert(args.begin(), self);
      if (PyFunction_Check(fn->obj.get())) {
        if (is_torch_callable(fn->obj.get()) && !T.is_module(self->obj.get()))
          return call_torch(fn->obj.get(), qualified_name(fn->obj.get()), args, kwargs);
        return inline_function(fn->obj.get(), nullptr, std::move(args), std::move(kwargs));
      }
      throw Unsupported(BreakCode::UnsupportedCall, "call of " + describe(*fn));
    }
    case VKind::Object: break;
    default: throw Unsupported(BreakCode::UnsupportedCall, "call of " + describe(*fn));
  }
  PyObject* f = fn->obj.get();
  if (f == special_object("is_compiling")) return make_const_borrowed(Py_True);
  PyObject* disabled_type = special_object("disabled_type");
  if (disabled_type && PyObject_TypeCheck(f, reinterpret_cast<PyTypeObject*>(disabled_type)))
    throw Unsupported(BreakCode::DisabledFunction, "call to a function wrapped with fastcomp.disable");
  if (T.is_module(f)) return call_module(fn, std::move(args), std::move(kwargs));
  if (PyType_Check(f)) {
    if (PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(f), reinterpret_cast<PyTypeObject*>(PyExc_BaseException)))
      throw UserCodeError("the function raises " + std::string(reinterpret_cast<PyTypeObject*>(f)->tp_name));
    if (f == T.no_grad.get() || f == T.enable_grad.get()) {
      auto ctx = std::make_shared<Value>();
      ctx->kind = VKind::GradCtx;
      ctx->flag = f == T.enable_grad.get();
      return ctx;
    }
    if (f == T.grad_mode_setter.get()) {
      if (args.size() != 1 || !args[0]->is(VKind::Const))
        throw Unsupported(BreakCode::UnsupportedCall, "torch.set_grad_enabled with a non-constant argument");
      auto ctx = std::make_shared<Value>();
      ctx->kind = VKind::GradCtx;
      ctx->flag = args[0]->obj.get() == Py_True;
      ctx->items = {make_const_borrowed(grad_enabled_ ? Py_True : Py_False)};  // restored by __exit__
      set_grad_mode(ctx->flag);  // takes effect at construction, as in torch
      return ctx;
    }
  }
  if (module_is(f, "numpy")) throw Unsupported(BreakCode::NumpyCall, "call to " + qualified_name(f));
  if (PyFunction_Check(f)) {
    if (is_torch_callable(f)) {
      const std::string name = qualified_name(f);
      if (is_argument_helper(name))
        if (ValueRef folded = fold_argument_helper(f, args, kwargs)) return folded;
      return call_torch(f, name, args, kwargs);
    }
    return inline_function(f, nullptr, std::move(args), std::move(kwargs));
  }
  if (PyMethod_Check(f)) {
    args.insert(args.begin(), wrap_untracked(PyMethod_GET_SELF(f)));
    return call(make_object(PyRef::borrow(PyMethod_GET_FUNCTION(f)), -1), std::move(args), std::move(kwargs));
  }
  if (is_torch_callable(f)) return call_torch(f, qualified_name(f), args, kwargs);
  return call_builtin(f, args, kwargs);
}

ValueRef call_container_method(Tracer& t, const ValueRef& self, const std::string& name, std::vector<ValueRef>& args) {
  auto mutate = [&] {
    if (self->source >= 0)
      throw Unsupported(BreakCode::SideEffect, fmt::format("{}.{}() on a container passed to the function",
                                                           self->is(VKind::Dict) ? "dict" : "list", name));
  };
  if (self->is(VKind::List)) {
    if (name == "append" && args.size() == 1) {
      mutate();
      self->items.push_back(args[0]);
      return make_const_borrowed(Py_None);
    }
    if (name == "extend" && args.size() == 1) {
      mutate();
      auto items = t.unpack(args[0], "extend with");
      self->items.insert(self->items.end(), items.begin(), items.end());
      return make_const_borrowed(Py_None);
    }
    if (name == "insert" && args.size() == 2) {
      mutate();
      PyRef i = t.as_python_constant(args[0]);
      Py_ssize_t n = self->items.size(), at = PyLong_AsSsize_t(i.get());
      if (at < 0) at = std::max<Py_ssize_t>(0, at + n);
      self->items.insert(self->items.begin() + std::min(at, n), args[1]);
      return make_const_borrowed(Py_None);
    }
    if (name == "pop") {
      mutate();
      if (self->items.empty()) throw UserCodeError("pop from empty list");
      Py_ssize_t at = args.empty() ? -1 : PyLong_AsSsize_t(t.as_python_constant(args[0]).get());
      if (at < 0) at += self->items.size();
      ValueRef v = self->items.at(at);
      self->items.erase(self->items.begin() + at);
      return v;
    }
    if (name == "copy") return make_seq(VKind::List, self->items);
  }
  if (self->is(VKind::Dict)) {
    auto find = [&](const ValueRef& key) -> int {
      PyRef k = t.as_python_constant(key);
      for (size_t i = 0; i < self->keys.size(); ++i)
        if (PyObject_RichCompareBool(self->keys[i]->obj.get(), k.get(), Py_EQ) == 1) return static_cast<int>(i);
      return -1;
    };
    if (name == "keys") return make_seq(VKind::List, self->keys);
    if (name == "values") return make_seq(VKind::List, self->items);
    if (name == "items") {
      std::vector<ValueRef> pairs;
      for (size_t i = 0; i < self->keys.size(); ++i) pairs.push_back(make_seq(VKind::Tuple, {self->keys[i], self->items[i]}));
      return make_seq(VKind::List, std::move(pairs));
    }
    if (name == "get" && !args.empty()) {
      int i = find(args[0]);
      return i >= 0 ? self->items[i] : (args.size() > 1 ? args[1] : make_const_borrowed(Py_None));
    }
    if (name == "copy") {
      ValueRef d = make_seq(VKind::Dict, self->items);
      d->keys = self->keys;
      return d;
    }
    if ((name == "pop" || name == "setdefault") && !args.empty()) {
      mutate();
      int i = find(args[0]);
      if (i >= 0) {
        ValueRef v = self->items[i];
        if (name == "pop") {
          self->keys.erase(self->keys.begin() + i);
          self->items.erase(self->items.begin() + i);
        }
        return v;
      }
      if (args.size() < 2 && name == "pop") throw UserCodeError("KeyError");
      ValueRef dflt = args.size() > 1 ? args[1] : make_const_borrowed(Py_None);
      if (name == "setdefault") {
        self->keys.push_back(args[0]);
        self->items.push_back(dflt);
      }
      return dflt;
    }
  }
  if (self->is(VKind::Tuple) || self->is(VKind::List)) {
    if (name == "index" || name == "count") {
      PyRef seq = t.as_python_constant(self);
      if (!seq) throw Unsupported(BreakCode::UnsupportedValue, "index()/count() on a sequence of tensors");
      PyRef a = t.as_python_constant(args.at(0));
      PyRef out = PyRef::steal(PyObject_CallMethod(seq.get(), name.c_str(), "O", a.get()));
      if (!out) {
        PyErr_Clear();
        throw UserCodeError(name + "() raised");
      }
      return make_const(out);
    }
  }
  throw Unsupported(BreakCode::UnsupportedCall, fmt::format("method {}() of {}", name, describe(*self)));
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
    case Op::YIELD_VALUE: {
      if (!f.yields) throw Unsupported(BreakCode::UnsupportedOpcode, "yield outside a generator being traced");
      f.yields->push_back(t.pop());
      t.push(make_const_borrowed(Py_None));  // the value sent into the generator
      return;
    }
    default:
      throw Unsupported(BreakCode::UnsupportedOpcode,
                        fmt::format("instruction {} (opcode {})", op_name(in.op), in.raw_opcode));
  }
}

}  // namespace fastcomp::frontend
