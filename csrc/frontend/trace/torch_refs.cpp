#include "frontend/trace/torch_refs.h"

#include <stdexcept>
#include <string>

#include "cpython/gil_once.h"
namespace fastcomp::frontend {
namespace {

PyRef must(PyObject* o, const char* what) {
  if (!o) {
    PyErr_Clear();
    throw std::runtime_error(std::string("fastcomp: could not find ") + what + " in the installed torch");
  }
  return PyRef::steal(o);
}

PyRef attr(const PyRef& base, const char* name) { return must(PyObject_GetAttrString(base.get(), name), name); }

}  // namespace

bool TorchRefs::grad_enabled() const {
  PyRef r = PyRef::steal(PyObject_CallNoArgs(is_grad_enabled.get()));
  if (!r) PyErr_Clear();
  return r.get() == Py_True;
}

const TorchRefs& torch_refs() {
  static cpython::GilOnce<TorchRefs> refs;
  return *refs.get([] {
    auto* r = new TorchRefs();
    r->torch = must(PyImport_ImportModule("torch"), "torch");
    PyRef nn = must(PyImport_ImportModule("torch.nn"), "torch.nn");
    PyRef c = attr(r->torch, "_C");
    PyRef operator_mod = must(PyImport_ImportModule("operator"), "operator");
    PyRef builtins = must(PyImport_ImportModule("builtins"), "builtins");
    r->tensor_type = attr(r->torch, "Tensor");
    r->parameter_type = attr(nn, "Parameter");
    r->module_type = attr(nn, "Module");
    r->empty_strided = attr(r->torch, "empty_strided");
    r->device_type = attr(r->torch, "device");
    r->meta_device = must(PyObject_CallFunction(r->device_type.get(), "s", "meta"), "torch.device('meta')");
    r->cpu_device = must(PyObject_CallFunction(r->device_type.get(), "s", "cpu"), "torch.device('cpu')");
    r->cuda_current_device = attr(attr(r->torch, "cuda"), "current_device");
    r->dtype_type = attr(r->torch, "dtype");
    r->size_type = attr(r->torch, "Size");
    r->is_grad_enabled = attr(r->torch, "is_grad_enabled");
    r->set_grad_enabled = attr(c, "_set_grad_enabled");
    r->no_grad = attr(r->torch, "no_grad");
    r->enable_grad = attr(r->torch, "enable_grad");
    r->grad_mode_setter = attr(r->torch, "set_grad_enabled");
    r->get_default_dtype = attr(r->torch, "get_default_dtype");
    // One call for every device where torch has it (2.4+); torch.is_autocast_enabled() otherwise.
    PyObject* any_autocast = PyObject_GetAttrString(c.get(), "_is_any_autocast_enabled");
    if (!any_autocast) PyErr_Clear();
    r->is_any_autocast_enabled = any_autocast ? PyRef::steal(any_autocast) : attr(r->torch, "is_autocast_enabled");
    r->parse_to = attr(attr(c, "_nn"), "_parse_to");
    r->getitem = attr(operator_mod, "getitem");
    r->setitem = attr(operator_mod, "setitem");
    r->builtin_getattr = attr(builtins, "getattr");
    return r;
  });
}

}  // namespace fastcomp::frontend
