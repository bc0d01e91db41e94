// _C._testing entry points for the tracer's helpers: the fast metadata paths that stand in for meta calls.
#include "bindings/bind.h"
#include "frontend/trace/unsupported.h"
#include "frontend/trace/attention_meta.h"
#include "frontend/trace/elementwise_meta.h"
#include "frontend/trace/nn_meta.h"

namespace fastcomp::bindings {
namespace {

using FastPath = std::optional<frontend::ComputedMeta> (*)(PyObject*, PyObject*, PyObject*, bool);

// (dtype, shape, strides, requires_grad, returns_an_argument).
py::object describe(const std::optional<frontend::ComputedMeta>& out) {
  if (!out) return py::none();
  py::tuple sizes(out->meta.sizes.size()), strides(out->meta.strides.size());
  for (size_t i = 0; i < out->meta.sizes.size(); ++i) {
    sizes[i] = out->meta.sizes[i];
    strides[i] = out->meta.strides[i];
  }
  return py::make_tuple(py::reinterpret_borrow<py::object>(out->meta.dtype.get()), sizes, strides,
                        out->meta.requires_grad, out->alias != nullptr);
}

// describe() of the path's answer, or None where the path defers to a meta call.
py::object run(FastPath path, py::handle fn, py::tuple args, py::object kwargs, bool grad_enabled) {
  return describe(path(fn.ptr(), args.ptr(), kwargs.is_none() ? nullptr : kwargs.ptr(), grad_enabled));
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
  m.def(
      "scaled_dot_product_attention_meta",
      [](py::handle fn, py::tuple args, py::object kwargs, bool grad) {
        return run(frontend::scaled_dot_product_attention_meta, fn, args, kwargs, grad);
      },
      py::arg("fn"), py::arg("args"), py::arg("kwargs") = py::none(), py::arg("grad_enabled") = false, doc);
  m.def(
      "attention_meta",
      [](py::handle fn, py::tuple args, py::object kwargs, bool grad) -> py::object {
        auto out = frontend::attention_meta(fn.ptr(), args.ptr(), kwargs.is_none() ? nullptr : kwargs.ptr(), grad);
        if (!out) return py::none();
        return py::make_tuple(describe(out->output), describe(out->weights));
      },
      py::arg("fn"), py::arg("args"), py::arg("kwargs") = py::none(), py::arg("grad_enabled") = false,
      "(describe(attn_output), describe(attn_weights) or None) as the tracer computes them, or None.");
  m.def(
      "break_codes",
      [] {
        py::list out;
        for (int i = 0; i <= static_cast<int>(frontend::BreakCode::Other); ++i) {
          auto c = static_cast<frontend::BreakCode>(i);
          out.append(py::make_tuple(frontend::break_code_id(c), frontend::break_code_headline(c),
                                    frontend::break_code_explanation(c), frontend::break_code_hint(c)));
        }
        return out;
      },
      "(code, headline, explanation, hint) of every graph-break code");
}

}  // namespace fastcomp::bindings
