#include "sdpa_choice.h"

#include <optional>
#include <vector>

#include "cpython/gil_once.h"
#include "cpython/pyref.h"
#include "frontend/trace/torch_refs.h"

namespace fastcomp {
namespace {

using plan::SdpKernel;

// torch's SDPBackend numbers (stable since torch 2.3).
SdpKernel from_backend_number(long n) {
  switch (n) {
    case 0: return SdpKernel::Math;
    case 1: return SdpKernel::Flash;
    case 2: return SdpKernel::MemoryEfficient;
    case 3: return SdpKernel::Cudnn;
    default: return SdpKernel::Unknown;
  }
}

PyRef torch_c_function(const char* name) {
  PyRef c = PyRef::steal(PyObject_GetAttrString(frontend::torch_refs().torch.get(), "_C"));
  PyRef fn = c ? PyRef::steal(PyObject_GetAttrString(c.get(), name)) : PyRef();
  if (!fn) PyErr_Clear();
  return fn;
}

// The value of torch._C.<name>(), or none where this torch lacks it or it raised.
PyRef read_setting(const char* name) {
  PyRef fn = torch_c_function(name);
  PyRef value = fn ? PyRef::steal(PyObject_CallNoArgs(fn.get())) : PyRef();
  if (!value) PyErr_Clear();
  return value;
}

// The math path computes f16 and bf16 heads in f32 (as the Output rounding does) unless
// torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True); a torch without that setting is not trusted to.
SdpKernel unless_math_in_half(SdpKernel k) {
  if (k != SdpKernel::Math) return k;
  PyRef reduced = read_setting("_get_math_sdp_allow_fp16_bf16_reduction");
  return reduced.get() == Py_False ? k : SdpKernel::Unknown;
}

// ((sizes...), (strides...)) of a traced tensor (the traced values of symbolic sizes): torch.empty_strided's
// arguments, and how fastcomp._attention_bias takes layouts.
PyRef layout(const graph::TensorMeta& m) {
  PyRef sizes = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(m.sizes.size())));
  PyRef strides = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(m.strides.size())));
  for (size_t i = 0; i < m.sizes.size(); ++i) PyTuple_SET_ITEM(sizes.get(), i, PyLong_FromLongLong(m.sizes[i]));
  for (size_t i = 0; i < m.strides.size(); ++i) PyTuple_SET_ITEM(strides.get(), i, PyLong_FromLongLong(m.strides[i]));
  return PyRef::steal(PyTuple_Pack(2, sizes.get(), strides.get()));
}

// An uninitialised tensor of `m`'s layout, dtype and device.
PyRef stand_in(const graph::TensorMeta& m) {
  PyRef args = layout(m);
  PyRef kwargs = PyRef::steal(Py_BuildValue("{s:O,s:O}", "dtype", m.dtype.get(), "device", m.device.get()));
  PyRef t = args && kwargs ? PyRef::steal(PyObject_Call(frontend::torch_refs().empty_strided.get(), args.get(),
                                                        kwargs.get()))
                           : PyRef();
  if (!t) PyErr_Clear();
  return t;
}

// The bytes a tensor of `m`'s layout spans.
int64_t storage_bytes(const graph::TensorMeta& m, int64_t element_size) {
  int64_t last = 0;
  for (size_t i = 0; i < m.sizes.size(); ++i) {
    if (m.sizes[i] == 0) return 0;
    last += (m.sizes[i] - 1) * m.strides[i];
  }
  return (last + 1) * element_size;
}

// Stand-ins beyond this stay unasked (the head stays torch's call): the question should cost no memory to speak of.
constexpr int64_t kMaxStandInBytes = int64_t{256} << 20;

SdpKernel ask_torch(const plan::SdpQuery& q) {
  const int64_t bytes = storage_bytes(*q.q, 2) + storage_bytes(*q.k, 2) + storage_bytes(*q.v, 2) +
                        storage_bytes(*q.mask, 2);  // f16 or bf16; a bool mask counts double, harmlessly
  if (bytes > kMaxStandInBytes) return SdpKernel::Unknown;
  PyRef choice_fn = PyRef::steal(PyObject_GetAttrString(frontend::torch_refs().torch.get(), "_fused_sdp_choice"));
  if (!choice_fn || !q.q->device || !q.mask->device) return PyErr_Clear(), SdpKernel::Unknown;
  PyRef query = stand_in(*q.q), key = stand_in(*q.k), value = stand_in(*q.v), mask = stand_in(*q.mask);
  if (!query || !key || !value || !mask) return SdpKernel::Unknown;
  PyRef args = PyRef::steal(PyTuple_Pack(4, query.get(), key.get(), value.get(), mask.get()));
  PyRef kwargs = PyRef::steal(Py_BuildValue("{s:d,s:O,s:d}", "dropout_p", 0.0, "is_causal",
                                            q.causal ? Py_True : Py_False, "scale", q.scale));
  if (kwargs && q.gqa) PyDict_SetItemString(kwargs.get(), "enable_gqa", Py_True);  // torch >= 2.5 takes it
  PyRef choice = args && kwargs ? PyRef::steal(PyObject_Call(choice_fn.get(), args.get(), kwargs.get())) : PyRef();
  if (!choice || !PyLong_Check(choice.get())) return PyErr_Clear(), SdpKernel::Unknown;
  return unless_math_in_half(from_backend_number(PyLong_AsLong(choice.get())));
}

// The settings torch's choice reads, as torch._C functions and as a guard names them.
struct SdpSetting {
  const char* fn;
  const char* what;
};
constexpr SdpSetting kSdpSettings[] = {
    {"_get_flash_sdp_enabled", "torch.backends.cuda.flash_sdp_enabled()"},
    {"_get_mem_efficient_sdp_enabled", "torch.backends.cuda.mem_efficient_sdp_enabled()"},
    {"_get_math_sdp_enabled", "torch.backends.cuda.math_sdp_enabled()"},
    {"_get_cudnn_sdp_enabled", "torch.backends.cuda.cudnn_sdp_enabled()"},
    {"_get_sdp_priority_order", "torch._C._get_sdp_priority_order()"},
    {"_get_math_sdp_allow_fp16_bf16_reduction", "torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()"},
};

SdpKernel rehearse_choice() {
  PyRef order = read_setting("_get_sdp_priority_order");
  if (!order || !PyList_Check(order.get())) return SdpKernel::Unknown;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(order.get()); ++i) {
    const SdpKernel k = from_backend_number(PyLong_AsLong(PyList_GET_ITEM(order.get(), i)));
    const char* enabled = k == SdpKernel::MemoryEfficient ? "_get_mem_efficient_sdp_enabled"
                          : k == SdpKernel::Math          ? "_get_math_sdp_enabled"
                          : k == SdpKernel::Cudnn         ? "_get_cudnn_sdp_enabled"
                                                          : nullptr;  // flash takes no mask
    if (enabled && read_setting(enabled).get() == Py_True) return unless_math_in_half(k);
  }
  PyErr_Clear();
  return SdpKernel::Unknown;
}

std::optional<plan::SdpMaskBias> ask_torch_for_bias(const plan::SdpQuery& q) {
  const int64_t bytes = storage_bytes(*q.q, 2) + storage_bytes(*q.k, 2) + storage_bytes(*q.v, 2) +
                        storage_bytes(*q.mask, 4);  // the mask, and the bias made of it
  if (bytes > kMaxStandInBytes || !q.q->device) return std::nullopt;
  static cpython::GilOnce<PyObject> probe;
  PyObject* fn = probe.get([] { return cpython::import_attr("fastcomp._attention_bias", "cudnn_bias_of_bool_mask"); });
  if (!fn) return PyErr_Clear(), std::nullopt;
  PyRef lq = layout(*q.q), lk = layout(*q.k), lv = layout(*q.v), lm = layout(*q.mask);
  PyRef scale = PyRef::steal(PyFloat_FromDouble(q.scale));
  if (!lq || !lk || !lv || !lm || !scale) return PyErr_Clear(), std::nullopt;
  PyObject* argv[] = {lq.get(), lk.get(), lv.get(), lm.get(), q.q->dtype.get(), q.q->device.get(), scale.get(),
                      q.causal ? Py_True : Py_False, q.gqa ? Py_True : Py_False};
  PyRef got = PyRef::steal(PyObject_Vectorcall(fn, argv, 9, nullptr));
  if (!got) return PyErr_Clear(), std::nullopt;  // torch raised on the stand-ins: its call will tell the user
  plan::SdpMaskBias bias;
  PyObject* strides = nullptr;
  if (got.get() == Py_None || !PyArg_ParseTuple(got.get(), "ddO!", &bias.where_true, &bias.where_false, &PyTuple_Type,
                                                &strides))
    return PyErr_Clear(), std::nullopt;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(strides); ++i) bias.strides.push_back(PyLong_AsLongLong(PyTuple_GET_ITEM(strides, i)));
  if (PyErr_Occurred() || bias.strides.size() != q.mask->sizes.size()) return PyErr_Clear(), std::nullopt;
  return bias;
}

}  // namespace

plan::SdpMaskBiasQuery torch_sdp_mask_bias() { return ask_torch_for_bias; }

plan::SdpMaskBiasQuery rehearsed_sdp_mask_bias() {
  return [](const plan::SdpQuery& q) -> std::optional<plan::SdpMaskBias> {
    plan::SdpMaskBias bias{0.0, -65504.0, {}};
    for (const codegen::Size& s : plan::contiguous_strides(codegen::to_sizes(q.mask->sizes)))
      bias.strides.push_back(s.hint());
    return bias;
  };
}

plan::SdpKernelQuery torch_sdp_kernel(bool* asked) {
  return [asked](const plan::SdpQuery& q) {
    *asked = true;
    return ask_torch(q);
  };
}

plan::SdpKernelQuery rehearsed_sdp_kernel(bool* asked) {
  return [asked](const plan::SdpQuery&) {
    *asked = true;
    return rehearse_choice();
  };
}

void add_sdp_setting_guards(frontend::GuardSet& guards) {
  for (const SdpSetting& s : kSdpSettings) {
    PyRef fn = torch_c_function(s.fn);
    frontend::Guard g;
    if (fn && frontend::make_global_state_guard(fn.get(), s.what, frontend::StateProbe::None, &g))
      guards.guards.push_back(std::move(g));
  }
}

}  // namespace fastcomp
