// fastcomp._C._testing: cuBLASLt matmul plans for tests, driven with torch tensors' data_ptr() and streams. A
// MatmulDesc crosses as keyword arguments named like its fields; dtype and epilogue as their names.
#include <pybind11/stl.h>

#include <memory>
#include <string>

#include "bindings/bind.h"
#include "runtime/cuda/cublaslt.h"

namespace fastcomp::bindings {
namespace {
namespace cuda = runtime::cuda;

cuda::ScalarType scalar_type_arg(const std::string& name) {
  for (auto type : {cuda::ScalarType::F16, cuda::ScalarType::BF16, cuda::ScalarType::F32})
    if (name == cuda::scalar_type_name(type)) return type;
  if (name == "float16") return cuda::ScalarType::F16;
  if (name == "bfloat16") return cuda::ScalarType::BF16;
  if (name == "float32") return cuda::ScalarType::F32;
  throw py::value_error("dtype must be 'f16', 'bf16' or 'f32' (or float16, bfloat16, float32), not '" + name + "'");
}

cuda::Epilogue epilogue_arg(const std::string& name) {
  using E = cuda::Epilogue;
  for (E e : {E::None, E::Bias, E::Gelu, E::GeluBias, E::Relu, E::ReluBias})
    if (name == cuda::epilogue_name(e)) return e;
  throw py::value_error("epilogue must be one of none, bias, gelu_tanh, gelu_tanh_bias, relu, relu_bias; not '" +
                        name + "'");
}

// Every field by name; an unknown name is an error, so that a misspelt stride cannot silently stay 0.
cuda::MatmulDesc desc_arg(const py::kwargs& fields) {
  cuda::MatmulDesc d;
  for (auto [key, value] : fields) {
    std::string name = py::str(key);
    auto i64 = [&](int64_t& field) { field = value.cast<int64_t>(); };
    if (name == "m") i64(d.m);
    else if (name == "n") i64(d.n);
    else if (name == "k") i64(d.k);
    else if (name == "batch") i64(d.batch);
    else if (name == "dtype") d.dtype = scalar_type_arg(py::str(value));
    else if (name == "a_row_stride") i64(d.a_row_stride);
    else if (name == "a_col_stride") i64(d.a_col_stride);
    else if (name == "a_batch_stride") i64(d.a_batch_stride);
    else if (name == "b_row_stride") i64(d.b_row_stride);
    else if (name == "b_col_stride") i64(d.b_col_stride);
    else if (name == "b_batch_stride") i64(d.b_batch_stride);
    else if (name == "d_row_stride") i64(d.d_row_stride);
    else if (name == "d_batch_stride") i64(d.d_batch_stride);
    else if (name == "has_c") d.has_c = value.cast<bool>();
    else if (name == "c_row_stride") i64(d.c_row_stride);
    else if (name == "c_batch_stride") i64(d.c_batch_stride);
    else if (name == "alpha") d.alpha = value.cast<float>();
    else if (name == "beta") d.beta = value.cast<float>();
    else if (name == "epilogue") d.epilogue = epilogue_arg(py::str(value));
    else if (name == "bias_batch_stride") i64(d.bias_batch_stride);
    else if (name == "allow_tf32") d.allow_tf32 = value.cast<bool>();
    else if (name == "allow_reduced_precision_reduction") d.allow_reduced_precision_reduction = value.cast<bool>();
    else throw py::type_error("unknown MatmulDesc field '" + name + "'");
  }
  return d;
}

const void* pointer(uintptr_t address) { return reinterpret_cast<const void*>(address); }

}  // namespace

void bind_cublaslt(py::module_& m) {
  using namespace pybind11::literals;
  py::register_exception<cuda::CublasError>(m, "CublasError", PyExc_RuntimeError);

  m.def("cublaslt_version", &cuda::cublaslt_version, "cuBLASLt's version, '13.1.1'; loads it.");
  m.def("describe_cublas_status", &cuda::describe_cublas_status, "status"_a,
        "'CUBLAS_STATUS_NOT_SUPPORTED (the requested ...); what to do' for a cublasStatus_t; loads cuBLASLt.");
  m.def(
      "matmul_desc_to_string", [](const py::kwargs& fields) { return desc_arg(fields).to_string(); },
      "MatmulDesc::to_string() of the desc given as keyword arguments.");
  m.def(
      "matmul_unsupported_reason", [](const py::kwargs& fields) { return cuda::matmul_unsupported_reason(desc_arg(fields)); },
      "Why cuBLASLt cannot run the desc; '' when it can. Needs no library.");
  m.def(
      "lower_matmul", [](const py::kwargs& fields) { return cuda::lower_matmul(desc_arg(fields)).to_string(); },
      "cuBLASLt's column-major view of the desc, as text. Needs no library.");
  m.def(
      "check_matmul_descriptors",
      [](size_t workspace_bytes, const py::kwargs& fields) {
        return cuda::check_matmul_descriptors(desc_arg(fields), workspace_bytes);
      },
      "workspace_bytes"_a,
      "Builds and frees cuBLASLt's descriptors for the desc (no GPU needed); returns lower_matmul's text.");

  py::class_<cuda::MatmulPlan>(m, "MatmulPlan")
      .def(py::init([](int device, size_t workspace_bytes, const py::kwargs& fields) {
             cuda::MatmulDesc desc = desc_arg(fields);
             py::gil_scoped_release release;
             return std::make_unique<cuda::MatmulPlan>(desc, device, workspace_bytes);
           }),
           "device"_a, "workspace_bytes"_a, "Plans the desc given as keyword arguments.")
      .def(
          "run",
          [](const cuda::MatmulPlan& plan, uintptr_t a, uintptr_t b, uintptr_t c, uintptr_t d, uintptr_t bias,
             uintptr_t workspace, uintptr_t stream) {
            py::gil_scoped_release release;
            plan.run(pointer(a), pointer(b), pointer(c), const_cast<void*>(pointer(d)), pointer(bias),
                     const_cast<void*>(pointer(workspace)), reinterpret_cast<cuda::CUstream>(stream));
          },
          "a"_a, "b"_a, "c"_a, "d"_a, "bias"_a, "workspace"_a, "stream"_a,
          "Queues the matmul on `stream` (an integer CUstream, e.g. torch.cuda.current_stream().cuda_stream); "
          "pointers are data_ptr() values, 0 for none. Does not wait.")
      .def_property_readonly("device", &cuda::MatmulPlan::device)
      .def_property_readonly("workspace_bytes", &cuda::MatmulPlan::workspace_bytes)
      .def_property_readonly("workspace_used", &cuda::MatmulPlan::workspace_used)
      .def_property_readonly("tuning", &cuda::MatmulPlan::tuning)
      .def("__str__", &cuda::MatmulPlan::to_string);
}

}  // namespace fastcomp::bindings
