// A plan's matrix-product steps as cuBLASLt descs: the fields of a MatmulStep, torch's switches, and the plans
// made at the trace-time shapes (see matmul_steps.h).
#include "runtime/matmul_steps.h"

#include "frontend/trace/torch_refs.h"
#include "runtime/cublas_workspace.h"

namespace fastcomp::runtime {
namespace {

cuda::ScalarType scalar_type(codegen::DType t) {
  switch (t) {
    case codegen::DType::F16: return cuda::ScalarType::F16;
    case codegen::DType::BF16: return cuda::ScalarType::BF16;
    default: return cuda::ScalarType::F32;
  }
}

cuda::Epilogue epilogue(plan::MatmulStep::Epilogue e) {
  switch (e) {
    case plan::MatmulStep::Epilogue::None: return cuda::Epilogue::None;
    case plan::MatmulStep::Epilogue::Bias: return cuda::Epilogue::Bias;
    case plan::MatmulStep::Epilogue::Relu: return cuda::Epilogue::Relu;
    case plan::MatmulStep::Epilogue::ReluBias: return cuda::Epilogue::ReluBias;
    case plan::MatmulStep::Epilogue::GeluTanh: return cuda::Epilogue::Gelu;
    case plan::MatmulStep::Epilogue::GeluTanhBias: return cuda::Epilogue::GeluBias;
  }
  return cuda::Epilogue::None;
}

// A torch global flag read through its getter, e.g. torch._C._get_cublas_allow_tf32().
bool torch_flag(const char* getter) {
  PyRef fn = PyRef::steal(PyObject_GetAttrString(frontend::torch_refs().torch.get(), "_C"));
  if (fn) fn = PyRef::steal(PyObject_GetAttrString(fn.get(), getter));
  PyRef v = fn ? PyRef::steal(PyObject_CallNoArgs(fn.get())) : PyRef();
  if (!v) {
    PyErr_Clear();
    return false;
  }
  return v.get() == Py_True;
}

}  // namespace

std::array<const codegen::Size*, 12> shape_fields(const plan::MatmulStep& s) {
  return {&s.m, &s.n, &s.k, &s.batch, &s.a_row_stride, &s.a_col_stride, &s.a_batch_stride,
          &s.b_row_stride, &s.b_col_stride, &s.b_batch_stride, &s.d_row_stride, &s.d_batch_stride};
}

cuda::MatmulDesc unshaped_desc(const plan::MatmulStep& s, const MatmulSwitches& switches) {
  cuda::MatmulDesc d;
  d.dtype = scalar_type(s.dtype);
  d.epilogue = epilogue(s.epilogue);
  d.allow_tf32 = switches.tf32;
  d.allow_reduced_precision_reduction =
      s.dtype == codegen::DType::F16 ? switches.fp16_reduction : switches.bf16_reduction;
  return d;
}

cuda::MatmulDesc with_shape(cuda::MatmulDesc d, const MatmulShape& f) {
  d.m = f[0], d.n = f[1], d.k = f[2], d.batch = f[3];
  d.a_row_stride = f[4], d.a_col_stride = f[5], d.a_batch_stride = f[6];
  d.b_row_stride = f[7], d.b_col_stride = f[8], d.b_batch_stride = f[9];
  d.d_row_stride = f[10], d.d_batch_stride = f[11];
  return d;
}

// One product (count 1) is also the plan made when the executable is built: the batched ones need the distances
// between the weights, known only at run time.
cuda::MatmulDesc products_of_group(cuda::MatmulDesc d, int64_t count, int64_t b_step, int64_t bias_step) {
  d.batch = count;
  d.b_batch_stride = count > 1 ? b_step : 0;
  d.bias_batch_stride = count > 1 && cuda::epilogue_has_bias(d.epilogue) ? bias_step : 0;
  if (count == 1) d.a_batch_stride = d.d_batch_stride = 0;
  return d;
}

cuda::MatmulDesc trace_time_desc(const plan::MatmulStep& s, const MatmulSwitches& switches) {
  MatmulShape hints;
  const auto fields = shape_fields(s);
  for (size_t i = 0; i < fields.size(); ++i) hints[i] = fields[i]->hint();
  const cuda::MatmulDesc d = with_shape(unshaped_desc(s, switches), hints);
  return s.b_next.empty() ? d : products_of_group(d, 1, 0, 0);
}

MatmulSwitches read_matmul_switches() {
  return {torch_flag("_get_cublas_allow_tf32"), torch_flag("_get_cublas_allow_fp16_reduced_precision_reduction"),
          torch_flag("_get_cublas_allow_bf16_reduced_precision_reduction")};
}

MatmulPlans plan_matmuls(const plan::Program& program, const MatmulSwitches& switches) {
  MatmulPlans plans;
  for (const plan::MatmulStep& s : program.matmul_steps)
    plans.push_back(std::make_unique<cuda::MatmulPlan>(trace_time_desc(s, switches), program.device,
                                                       kCublasWorkspaceBytes));
  return plans;
}

bool matmuls_plan_quickly(const plan::Program& program) {
  for (const plan::MatmulStep& s : program.matmul_steps)
    if (!cuda::heuristic_warm(scalar_type(s.dtype), program.device)) return false;
  return true;
}

}  // namespace fastcomp::runtime
