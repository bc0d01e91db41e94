// nn.Module calls as nn.Module.__call__ (_call_impl) makes them: forward pre-hooks, forward, forward hooks, each
// inlined, with guards that the hooks stay the ones traced. Backward hooks act inside autograd, which a trace does
// not model: a module that has any is called in CPython.
#include <fmt/format.h>

#include "frontend/trace/tracer.h"
#include "support/pystr.h"

namespace fastcomp::frontend {

using Kwargs = std::vector<std::pair<std::string, ValueRef>>;

namespace {

PyObject* instance_dict_item(PyObject* obj, const char* name) {
  PyObject** dictptr = _PyObject_GetDictPtr(obj);
  return dictptr && *dictptr ? PyDict_GetItemString(*dictptr, name) : nullptr;  // borrowed
}

bool is_none(const ValueRef& v) { return v->is(VKind::Const) && v->obj.get() == Py_None; }

}  // namespace

std::vector<Tracer::ModuleHook> Tracer::module_hooks(const ValueRef& module, const char* dict_name,
                                                     const char* with_kwargs_name) {
  PyObject* hooks = instance_dict_item(module->obj.get(), dict_name);
  if (!hooks || !PyDict_Check(hooks)) return {};
  const int source =
      module->source >= 0 ? guards_.sources.inst_dict(module->source, PyRef::steal(PyUnicode_FromString(dict_name)).get()) : -1;
  if (PyDict_GET_SIZE(hooks) == 0) {
    if (source >= 0) guard_length(source, 0);
    return {};
  }
  if (source < 0)
    throw Unsupported(BreakCode::UnsupportedCall, fmt::format("call of a module with {} that the trace cannot guard", dict_name));
  // The guard compares the dict's keys (hook ids); the hooks run in the OrderedDict's own order.
  auto keys_of = [](PyObject* d) { return PyRef::steal(PySequence_Tuple(PyRef::steal(PyDict_Keys(d)).get())); };
  guard(GuardKind::DictKeys, source, keys_of(hooks).get());
  PyObject* with_kwargs = with_kwargs_name ? instance_dict_item(module->obj.get(), with_kwargs_name) : nullptr;
  if (with_kwargs && PyDict_Check(with_kwargs))
    guard(GuardKind::DictKeys,
          guards_.sources.inst_dict(module->source, PyRef::steal(PyUnicode_FromString(with_kwargs_name)).get()),
          keys_of(with_kwargs).get());
  std::vector<ModuleHook> out;
  PyRef order = PyRef::steal(PySequence_Tuple(hooks));
  if (!order) throw Unsupported(BreakCode::Other, take_error_message());
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(order.get()); ++i) {
    PyObject* id = PyTuple_GET_ITEM(order.get(), i);
    PyObject* hook = PyDict_GetItem(hooks, id);
    if (!hook) throw Unsupported(BreakCode::Other, fmt::format("{} changed while the trace read it", dict_name));
    const bool takes_kwargs = with_kwargs && PyDict_Check(with_kwargs) && PyDict_Contains(with_kwargs, id) == 1;
    out.push_back({wrap(hook, guards_.sources.dict_item(source, id)), takes_kwargs});
  }
  return out;
}

ValueRef Tracer::call_module(const ValueRef& module, std::vector<ValueRef> args, Kwargs kwargs) {
  PyObject* m = module->obj.get();
  for (const char* slot : {"_backward_hooks", "_backward_pre_hooks", "_forward_hooks_always_called"}) {
    PyObject* d = instance_dict_item(m, slot);
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
  const std::vector<ModuleHook> pre = module_hooks(module, "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs");
  const std::vector<ModuleHook> post = module_hooks(module, "_forward_hooks", "_forward_hooks_with_kwargs");
  ValueRef forward = get_attr(module, PyRef::steal(PyUnicode_FromString("forward")).get());
  if (pre.empty() && post.empty()) return call(forward, std::move(args), std::move(kwargs));

  ValueRef arg_tuple = make_seq(VKind::Tuple, std::move(args));
  ValueRef kwarg_dict = make_dict();
  for (auto& [k, v] : kwargs) {
    kwarg_dict->keys.push_back(make_const(PyRef::steal(PyUnicode_FromString(k.c_str()))));
    kwarg_dict->items.push_back(v);
  }
  for (const ModuleHook& h : pre) {
    if (h.takes_kwargs) {
      ValueRef r = call(h.fn, {module, arg_tuple, kwarg_dict}, {});
      if (is_none(r)) continue;
      if (!r->is(VKind::Tuple) || r->items.size() != 2 || !r->items[1]->is(VKind::Dict))
        throw UserCodeError("forward pre-hook must return None or a tuple of (new_args, new_kwargs)", PyExc_RuntimeError);
      arg_tuple = r->items[0]->is(VKind::Tuple) ? r->items[0] : make_seq(VKind::Tuple, unpack(r->items[0], "unpack"));
      kwarg_dict = r->items[1];
    } else {
      ValueRef r = call(h.fn, {module, arg_tuple}, {});
      if (is_none(r)) continue;
      arg_tuple = r->is(VKind::Tuple) ? r : make_seq(VKind::Tuple, {r});
    }
  }
  Kwargs forward_kwargs;
  for (size_t i = 0; i < kwarg_dict->keys.size(); ++i) {
    if (!kwarg_dict->keys[i]->is(VKind::Const) || !PyUnicode_Check(kwarg_dict->keys[i]->obj.get()))
      throw UserCodeError("keywords must be strings", PyExc_TypeError);
    forward_kwargs.emplace_back(utf8(kwarg_dict->keys[i]->obj.get()), kwarg_dict->items[i]);
  }
  ValueRef result = call(forward, arg_tuple->items, std::move(forward_kwargs));
  for (const ModuleHook& h : post) {
    ValueRef r = h.takes_kwargs ? call(h.fn, {module, arg_tuple, kwarg_dict, result}, {})
                                : call(h.fn, {module, arg_tuple, result}, {});
    if (!is_none(r)) result = r;
  }
  return result;
}

}  // namespace fastcomp::frontend
