// The torch objects the tracer and runners refer to, looked up once per process through Python (fastcomp
// does not link libtorch). All references are owned here and live for the process.
#pragma once
#include <Python.h>

#include "cpython/pyref.h"

namespace fastcomp::frontend {

struct TorchRefs {
  PyRef torch;              // the torch module
  PyRef tensor_type;        // torch.Tensor
  PyRef parameter_type;     // torch.nn.Parameter
  PyRef module_type;        // torch.nn.Module
  PyRef empty_strided;      // torch.empty_strided
  PyRef meta_device;        // torch.device("meta")
  PyRef cpu_device;         // torch.device("cpu")
  PyRef cuda_current_device;  // torch.cuda.current_device (raises where torch has no CUDA)
  PyRef device_type;        // torch.device
  PyRef dtype_type;         // torch.dtype
  PyRef size_type;          // torch.Size
  PyRef is_grad_enabled;    // torch.is_grad_enabled
  PyRef set_grad_enabled;   // torch._C._set_grad_enabled (a plain function, not the context manager)
  PyRef no_grad;            // torch.no_grad (class)
  PyRef enable_grad;        // torch.enable_grad (class)
  PyRef grad_mode_setter;   // torch.set_grad_enabled (class usable as function and context manager)
  PyRef get_default_dtype;  // torch.get_default_dtype
  PyRef is_any_autocast_enabled;  // torch._C._is_any_autocast_enabled (or a fallback with the same meaning)
  PyRef parse_to;           // torch._C._nn._parse_to
  PyRef getitem;            // operator.getitem
  PyRef setitem;            // operator.setitem
  PyRef builtin_getattr;    // builtins.getattr

  bool grad_enabled() const;
  // torch.no_grad or torch.enable_grad: classes whose objects hold no state until entered.
  bool is_grad_mode_class(PyObject* cls) const { return cls == no_grad.get() || cls == enable_grad.get(); }
  bool is_tensor(PyObject* o) const { return PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(tensor_type.get())); }
  bool is_module(PyObject* o) const { return PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(module_type.get())); }
};

// Loads on first use (the GIL must be held). Throws std::runtime_error if torch cannot be imported.
const TorchRefs& torch_refs();

}  // namespace fastcomp::frontend
