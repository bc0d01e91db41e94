// _C._testing entry points for the tracer's helpers: the elementwise metadata fast path.
#include "bindings/bind.h"
#include "frontend/trace/elementwise_meta.h"

namespace fastcomp::bindings {

void bind_trace(py::module_& m) {
  m.def(
      "elementwise_meta",
      [](py::handle fn, py::tuple args, py::object kwargs, bool grad_enabled) -> py::object {
        PyObject* kw = kwargs.is_none() ? nullptr : kwargs.ptr();
        auto out = frontend::elementwise_meta(fn.ptr(), args.ptr(), kw, grad_enabled);
        if (!out) return py::none();
        py::tuple sizes(out->meta.sizes.size()), strides(out->meta.strides.size());
        for (size_t i = 0; i < out->meta.sizes.size(); ++i) {
          sizes[i] = out->meta.sizes[i];
          strides[i] = out->meta.strides[i];
        }
        return py::make_tuple(py::reinterpret_borrow<py::object>(out->meta.dtype.get()), sizes, strides,
                              out->meta.requires_grad, out->alias != nullptr);
      },
      py::arg("fn"), py::arg("args"), py::arg("kwargs") = py::none(), py::arg("grad_enabled") = false,
      "(dtype, shape, strides, requires_grad, returns_an_argument) of fn(*args, **kwargs) from the tracer's "
      "elementwise fast path, or None where it defers to a meta call.");
}

}  // namespace fastcomp::bindings
