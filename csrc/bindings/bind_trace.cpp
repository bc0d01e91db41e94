// _C._testing entry points for the tracer's helpers: the fast metadata paths that stand in for meta calls.
#include "bindings/bind.h"
#include "frontend/trace/elementwise_meta.h"
#include "frontend/trace/nn_meta.h"

namespace fastcomp::bindings {
namespace {

using FastPath = std::optional<frontend::ComputedMeta> (*)(PyObject*, PyObject*, PyObject*, bool);

// (dtype, shape, strides, requires_grad, returns_an_argument), or None where the path defers to a meta call.
py::object run(FastPath path, py::handle fn, py::tuple args, py::object kwargs, bool grad_enabled) {
  auto out = path(fn.ptr(), args.ptr(), kwargs.is_none() ? nullptr : kwargs.ptr(), grad_enabled);
  if (!out) return py::none();
  py::tuple sizes(out->meta.sizes.size()), strides(out->meta.strides.size());
  for (size_t i = 0; i < out->meta.sizes.size(); ++i) {
    sizes[i] = out->meta.sizes[i];
    strides[i] = out->meta.strides[i];
  }
  return py::make_tuple(py::reinterpret_borrow<py::object>(out->meta.dtype.get()), sizes, strides,
                        out->meta.requires_grad, out->alias != nullptr);
}

}  // namespace

void bind_trace(py::module_& m) {
  const char* doc =
      "(dtype, shape, strides, requires_grad, returns_an_argument) of fn(*args, **kwargs) as the tracer computes "
      "it without a meta call, or None where it defers to one.";
  m.def(
      "elementwise_meta",
      [](py::handle fn, py::tuple args, py::object kwargs, bool grad) {
        return run(frontend::elementwise_meta, fn, args, kwargs, grad);
      },
      py::arg("fn"), py::arg("args"), py::arg("kwargs") = py::none(), py::arg("grad_enabled") = false, doc);
  m.def(
      "nn_meta",
      [](py::handle fn, py::tuple args, py::object kwargs, bool grad) {
        return run(frontend::nn_meta, fn, args, kwargs, grad);
      },
      py::arg("fn"), py::arg("args"), py::arg("kwargs") = py::none(), py::arg("grad_enabled") = false, doc);
}

}  // namespace fastcomp::bindings
