#include "frontend/trace/kernel_layout.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "frontend/trace/attention_meta.h"
#include "frontend/trace/meta.h"
#include "frontend/trace/meta_args.h"
#include "frontend/trace/torch_refs.h"

namespace fastcomp::frontend {
namespace {

int64_t cut(int64_t size) { return size > 1 ? 2 : size; }

// Strides of a dense tensor of `sizes` whose dimensions, outermost first, are `order`.
std::vector<int64_t> dense_in_order(const std::vector<int64_t>& sizes, const std::vector<size_t>& order) {
  std::vector<int64_t> strides(sizes.size());
  int64_t running = 1;
  for (size_t k = order.size(); k-- > 0;) {
    strides[order[k]] = running;
    running *= std::max<int64_t>(sizes[order[k]], 1);
  }
  return strides;
}

// Dimensions outermost first by stride, ties outer dimension first (the order torch gives a dense tensor).
std::vector<size_t> order_of(const std::vector<int64_t>& strides) {
  std::vector<size_t> order(strides.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return strides[a] > strides[b]; });
  return order;
}

// Whether a tensor covers its memory without gaps or overlaps: laid out densely in the order of its strides, or
// so once its size-1 dimensions, whose strides are arbitrary (a permuted contiguous tensor keeps the stride it
// had there), are left out.
bool dense(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  if (dense_in_order(sizes, order_of(strides)) == strides) return true;
  std::vector<size_t> dims;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return false;
    if (sizes[d] > 1) dims.push_back(d);
  }
  std::stable_sort(dims.begin(), dims.end(), [&](size_t a, size_t b) { return strides[a] < strides[b]; });
  int64_t expected = 1;
  for (size_t d : dims) {
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

// Tensors spanning at most this many elements are stood in for exactly.
constexpr int64_t kExactSpan = 4096;

int64_t span(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  int64_t n = 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return 1;
    n += (sizes[d] - 1) * strides[d];
  }
  return n;
}

PyRef int_tuple(const std::vector<int64_t>& values) {
  PyRef t = PyRef::steal(PyTuple_New(values.size()));
  for (size_t i = 0; i < values.size(); ++i) PyTuple_SET_ITEM(t.get(), i, PyLong_FromLongLong(values[i]));
  return t;
}

// torch.empty_strided(sizes, strides, **kwargs): an uninitialised tensor.
PyRef uninitialised(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, PyObject* kwargs) {
  PyRef args = PyRef::steal(PyTuple_Pack(2, int_tuple(sizes).get(), int_tuple(strides).get()));
  return PyRef::steal(PyObject_Call(torch_refs().empty_strided.get(), args.get(), kwargs));
}

// The meta result `out` re-strided to `strides`. Leaves no Python error set.
PyRef with_strides(graph::TensorMeta out, std::vector<int64_t> strides) {
  out.strides = std::move(strides);
  PyRef restrided = make_meta_result(out);
  PyErr_Clear();
  return restrided;
}

// A real CPU tensor of ones standing in for the meta tensor `m`: its own sizes and strides when it has few
// elements and spans few (`*exact`; an expanded tensor spans few, but an op's result on it has all of its elements),
// else sizes cut to 2 with the strides of broadcast (0) and size-1 dimensions kept and the others dense in the order
// of `m`'s strides.
PyRef stand_in(const graph::TensorMeta& m, bool* exact) {
  const auto& T = torch_refs();
  std::vector<int64_t> sizes = m.sizes, strides = m.strides;
  int64_t elements = 1;
  for (int64_t s : sizes) elements = s > 0 && elements > kExactSpan / s ? kExactSpan + 1 : elements * s;
  if (span(sizes, strides) > kExactSpan || elements > kExactSpan) {
    for (int64_t s : m.sizes)
      if (s == 0) return {};
    *exact = false;
    for (int64_t& s : sizes) s = cut(s);
    strides = dense_in_order(sizes, order_of(m.strides));
    for (size_t d = 0; d < sizes.size(); ++d)
      if (m.strides[d] == 0 || m.sizes[d] == 1) strides[d] = m.strides[d];
  }
  const int64_t storage = span(sizes, strides);
  PyRef ones = PyRef::steal(PyObject_GetAttrString(T.torch.get(), "ones"));
  PyRef kwargs = PyRef::steal(PyDict_New());
  PyDict_SetItemString(kwargs.get(), "dtype", m.dtype.get());
  PyRef n = PyRef::steal(Py_BuildValue("(L)", static_cast<long long>(storage)));
  PyRef flat = ones ? PyRef::steal(PyObject_Call(ones.get(), n.get(), kwargs.get())) : PyRef();
  if (!flat) return {};
  return PyRef::steal(PyObject_CallMethod(flat.get(), "as_strided", "OO", int_tuple(sizes).get(),
                                          int_tuple(strides).get()));
}

// The arguments with each top-level meta tensor replaced by its stand-in; false when one cannot be made or a
// tensor hides in a container (the cut sizes would have to agree across it).
bool stand_ins(PyObject* args, PyObject* kwargs, PyRef* real_args, PyRef* real_kwargs, bool* mixed, bool* exact) {
  const auto& T = torch_refs();
  *mixed = false;
  *exact = true;
  auto replace = [&](PyObject* o) -> PyRef {
    if ((PyTuple_Check(o) || PyList_Check(o))) {
      for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); ++i)
        if (T.is_tensor(PySequence_Fast_GET_ITEM(o, i))) return {};
      return PyRef::borrow(o);
    }
    if (!T.is_tensor(o)) return PyRef::borrow(o);
    graph::TensorMeta m = meta_of_tensor(o, nullptr);
    *mixed |= !meta_args::row_major(m.sizes, m.strides);
    return stand_in(m, exact);
  };
  *real_args = PyRef::steal(PyTuple_New(PyTuple_GET_SIZE(args)));
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args); ++i) {
    PyRef r = replace(PyTuple_GET_ITEM(args, i));
    if (!r) return false;
    PyTuple_SET_ITEM(real_args->get(), i, r.release());
  }
  *real_kwargs = PyRef::steal(PyDict_New());
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (kwargs && PyDict_Next(kwargs, &pos, &key, &value)) {
    if (PyUnicode_CompareWithASCIIString(key, "out") == 0 || PyUnicode_CompareWithASCIIString(key, "device") == 0)
      return false;
    PyRef r = replace(value);
    if (!r) return false;
    PyDict_SetItem(real_kwargs->get(), key, r.get());
  }
  return true;
}

// Whether `target` on "meta" copies of the stand-ins returns a tensor of `cut_sizes`. Leaves no Python error set.
bool result_follows_stand_ins(PyObject* target, PyObject* real_args, PyObject* real_kwargs,
                              const std::vector<int64_t>& cut_sizes) {
  const auto& T = torch_refs();
  auto to_meta = [&](PyObject* o) {
    return T.is_tensor(o) ? PyRef::steal(PyObject_CallMethod(o, "to", "s", "meta")) : PyRef::borrow(o);
  };
  PyRef args = PyRef::steal(PyTuple_New(PyTuple_GET_SIZE(real_args)));
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(real_args); ++i) {
    PyRef m = to_meta(PyTuple_GET_ITEM(real_args, i));
    if (!m) return PyErr_Clear(), false;
    PyTuple_SET_ITEM(args.get(), i, m.release());
  }
  PyRef kwargs = PyRef::steal(PyDict_New());
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(real_kwargs, &pos, &key, &value)) {
    PyRef m = to_meta(value);
    if (!m) return PyErr_Clear(), false;
    PyDict_SetItem(kwargs.get(), key, m.get());
  }
  PyRef out = call_keeping_rng(target, args.get(), kwargs.get());
  const bool follows = out && T.is_tensor(out.get()) && meta_of_tensor(out.get(), nullptr).sizes == cut_sizes;
  PyErr_Clear();
  return follows;
}

// Convolutions, whose CUDA result layout cuDNN decides (channels-last in, channels-last out), and attention, whose
// flash, memory-efficient and cuDNN kernels each lay their result out their own way ([B, L, H, E] in memory, or the
// query's layout), where the meta function runs the math path (contiguous).
bool lays_out_by_library(PyObject* target, const std::string& name) {
  static const char* const kOps[] = {"conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                                     "conv_transpose3d", "convolution", "_convolution"};
  const std::string base = name.substr(name.rfind('.') + 1);
  return is_scaled_dot_product_attention(target) ||
         std::any_of(std::begin(kOps), std::end(kOps), [&](const char* op) { return base == op; });
}

// Whether the call draws random numbers on the device (attention with dropout): a probe would advance the
// program's CUDA generator.
bool draws_on_device(PyObject* target, PyObject* args, PyObject* kwargs) {
  std::vector<PyObject*> a;
  if (!is_scaled_dot_product_attention(target) || !bind_attention_args(args, kwargs, &a)) return false;
  PyObject* p = a[sdpa_param::kDropout];
  return p && !(PyFloat_Check(p) && PyFloat_AS_DOUBLE(p) == 0.0) && !(PyLong_Check(p) && PyLong_AsLong(p) == 0);
}

// A real CPU tensor with `m`'s sizes, strides, dtype and requires_grad, for torch._fused_sdp_choice, which reads
// only metadata: uninitialised, and where its span would pass kChoiceBytes, one whose dimensions but the last are
// broadcast (stride 0): the CPU choice reads sizes and the last stride only.
PyRef choice_stand_in(const graph::TensorMeta& m) {
  constexpr int64_t kChoiceBytes = int64_t(256) << 20;
  std::vector<int64_t> strides = m.strides;
  PyRef itemsize = PyRef::steal(PyObject_GetAttrString(m.dtype.get(), "itemsize"));
  if (!itemsize || m.sizes.empty()) return PyErr_Clear(), PyRef();
  if (span(m.sizes, strides) * PyLong_AsLongLong(itemsize.get()) > kChoiceBytes)
    for (size_t d = 0; d + 1 < strides.size(); ++d) strides[d] = 0;
  PyRef kwargs = PyRef::steal(Py_BuildValue("{sOsO}", "dtype", m.dtype.get(), "requires_grad",
                                            m.requires_grad ? Py_True : Py_False));
  return uninitialised(m.sizes, strides, kwargs.get());
}

// The strides of torch's CPU flash attention result of `sizes` for arguments `a` (meta tensors, indexed by
// sdpa_param) where torch._fused_sdp_choice picks that kernel for them: as the kernel's own meta function lays it
// out (the query's layout, in torch 2.4 to 2.13). Empty where it picks the math path.
std::vector<int64_t> cpu_flash_strides(const std::vector<PyObject*>& a, const std::vector<int64_t>& sizes) {
  using namespace sdpa_param;  // NOLINT: the parameters' indices
  const auto& T = torch_refs();
  PyRef choice_kwargs = PyRef::steal(PyDict_New());
  for (int i = 0; i < kCount; ++i) {
    if (!a[i]) continue;
    PyRef arg = T.is_tensor(a[i]) ? choice_stand_in(meta_of_tensor(a[i], nullptr)) : PyRef::borrow(a[i]);
    if (!arg) return PyErr_Clear(), std::vector<int64_t>();
    PyDict_SetItemString(choice_kwargs.get(), kNames[i], arg.get());
  }
  PyRef torch_choice = PyRef::steal(PyObject_GetAttrString(T.torch.get(), "_fused_sdp_choice"));
  PyRef empty = PyRef::steal(PyTuple_New(0));
  PyRef choice = torch_choice ? PyRef::steal(PyObject_Call(torch_choice.get(), empty.get(), choice_kwargs.get())) : PyRef();
  constexpr long kFlash = 1;  // torch.nn.attention.SDPBackend.FLASH_ATTENTION
  if (!choice || !PyLong_Check(choice.get()) || PyLong_AsLong(choice.get()) != kFlash)
    return PyErr_Clear(), std::vector<int64_t>();
  // aten._scaled_dot_product_flash_attention_for_cpu(query, key, value, dropout_p, is_causal, *, attn_mask, scale)
  PyRef ops = PyRef::steal(PyObject_GetAttrString(T.torch.get(), "ops"));
  PyRef aten = ops ? PyRef::steal(PyObject_GetAttrString(ops.get(), "aten")) : PyRef();
  PyRef flash = aten ? PyRef::steal(PyObject_GetAttrString(aten.get(), "_scaled_dot_product_flash_attention_for_cpu")) : PyRef();
  if (!flash) return PyErr_Clear(), std::vector<int64_t>();
  PyRef zero = PyRef::steal(PyFloat_FromDouble(0.0));
  PyRef flash_args = PyRef::steal(PyTuple_Pack(5, a[kQuery], a[kKey], a[kValue], a[kDropout] ? a[kDropout] : zero.get(),
                                               a[kCausal] ? a[kCausal] : Py_False));
  PyRef flash_kwargs = PyRef::steal(PyDict_New());
  if (a[kMask]) PyDict_SetItemString(flash_kwargs.get(), "attn_mask", a[kMask]);
  if (a[kScale]) PyDict_SetItemString(flash_kwargs.get(), "scale", a[kScale]);
  PyRef outs = PyRef::steal(PyObject_Call(flash.get(), flash_args.get(), flash_kwargs.get()));
  PyObject* kernel_out = outs && PyTuple_Check(outs.get()) && PyTuple_GET_SIZE(outs.get()) > 0
                             ? PyTuple_GET_ITEM(outs.get(), 0) : nullptr;
  if (!kernel_out || !T.is_tensor(kernel_out)) return PyErr_Clear(), std::vector<int64_t>();
  const graph::TensorMeta kernel = meta_of_tensor(kernel_out, nullptr);
  return kernel.sizes == sizes && dense(kernel.sizes, kernel.strides) ? kernel.strides : std::vector<int64_t>();
}

// F.scaled_dot_product_attention on CPU: on arguments of a few thousand elements at most, the call itself on
// stand-ins of their exact sizes and strides (cheaper than the meta call, and exact where cpu_flash_strides is not:
// empty tensors, whose strides the math path's bmm picks); otherwise cpu_flash_strides, or where torch runs the
// math path the layout the meta call (the math path on "meta") gave. Null when the meta result stands.
PyRef cpu_attention_layout(PyObject* target, PyObject* meta_args, PyObject* meta_kwargs, PyObject* meta_out) {
  const auto& T = torch_refs();
  const graph::TensorMeta out = meta_of_tensor(meta_out, nullptr);
  PyRef real_args, real_kwargs;
  bool mixed = false, exact = false;
  std::vector<int64_t> strides;
  if (stand_ins(meta_args, meta_kwargs, &real_args, &real_kwargs, &mixed, &exact) && exact) {
    PyRef real = call_keeping_rng(target, real_args.get(), real_kwargs.get());
    if (!real || !T.is_tensor(real.get())) return PyErr_Clear(), PyRef();
    const graph::TensorMeta kernel = meta_of_tensor(real.get(), nullptr);
    if (kernel.sizes == out.sizes) strides = kernel.strides;
  } else {
    PyErr_Clear();
    std::vector<PyObject*> a;
    if (!bind_attention_args(meta_args, meta_kwargs, &a)) return {};
    strides = cpu_flash_strides(a, out.sizes);
  }
  if (strides.empty() || strides == out.strides) return {};
  return with_strides(out, std::move(strides));
}

// An uninitialised tensor of `m`'s exact sizes, strides and dtype on `device`; adds its bytes to `*bytes` and gives
// null once they pass kCudaProbeBytes.
PyRef device_stand_in(const graph::TensorMeta& m, PyObject* device, int64_t* bytes) {
  PyRef itemsize = PyRef::steal(PyObject_GetAttrString(m.dtype.get(), "itemsize"));
  if (!itemsize) return {};
  for (int64_t s : m.sizes)
    if (s == 0) return {};
  *bytes += span(m.sizes, m.strides) * PyLong_AsLongLong(itemsize.get());
  if (*bytes > kCudaProbeBytes) return {};
  PyRef kwargs = PyRef::steal(Py_BuildValue("{sOsO}", "dtype", m.dtype.get(), "device", device));
  return uninitialised(m.sizes, m.strides, kwargs.get());
}

}  // namespace

PyRef cuda_kernel_layout(const std::string& name, PyObject* target, PyObject* meta_args, PyObject* meta_kwargs,
                         PyObject* meta_out, PyObject* device) {
  const auto& T = torch_refs();
  if (!lays_out_by_library(target, name) || !T.is_tensor(meta_out) || draws_on_device(target, meta_args, meta_kwargs))
    return {};
  int64_t bytes = 0;
  auto stand_in_for = [&](PyObject* a) {
    return T.is_tensor(a) ? device_stand_in(meta_of_tensor(a, nullptr), device, &bytes) : PyRef::borrow(a);
  };
  PyRef args = PyRef::steal(PyTuple_New(PyTuple_GET_SIZE(meta_args)));
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(meta_args); ++i) {
    PyRef real = stand_in_for(PyTuple_GET_ITEM(meta_args, i));
    if (!real) return PyErr_Clear(), PyRef();
    PyTuple_SET_ITEM(args.get(), i, real.release());
  }
  PyRef kwargs = PyRef::steal(PyDict_New());
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (meta_kwargs && PyDict_Next(meta_kwargs, &pos, &key, &value)) {
    PyRef real = stand_in_for(value);
    if (!real) return PyErr_Clear(), PyRef();
    PyDict_SetItem(kwargs.get(), key, real.get());
  }
  PyRef real = PyRef::steal(PyObject_Call(target, args.get(), kwargs.get()));
  if (!real || !T.is_tensor(real.get())) return PyErr_Clear(), PyRef();
  const graph::TensorMeta out = meta_of_tensor(meta_out, nullptr);
  const graph::TensorMeta kernel = meta_of_tensor(real.get(), nullptr);
  if (kernel.sizes != out.sizes || kernel.strides == out.strides || !dense(kernel.sizes, kernel.strides)) return {};
  return with_strides(out, kernel.strides);
}

PyRef call_keeping_rng(PyObject* target, PyObject* args, PyObject* kwargs) {
  const auto& T = torch_refs();
  PyRef state = PyRef::steal(PyObject_CallMethod(T.torch.get(), "get_rng_state", nullptr));
  if (!state) return {};
  PyRef out = PyRef::steal(PyObject_Call(target, args, kwargs));
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);  // the call's error, kept across the restore
  PyRef restored = PyRef::steal(PyObject_CallMethod(T.torch.get(), "set_rng_state", "O", state.get()));
  if (!restored) PyErr_Clear();
  PyErr_Restore(type, value, tb);
  return out;
}

PyRef kernel_layout(const std::string& name, PyObject* target, PyObject* meta_args, PyObject* meta_kwargs,
                    PyObject* meta_out) {
  const auto& T = torch_refs();
  if (!T.is_tensor(meta_out)) return {};
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(meta_args); ++i)
    if (PyTuple_GET_ITEM(meta_args, i) == meta_out) return {};  // in place: the argument's own layout
  // Attention picks its kernel by the arguments (and lays the result out by the kernel): stand-ins of other sizes
  // would show another kernel's layout.
  if (is_scaled_dot_product_attention(target)) return cpu_attention_layout(target, meta_args, meta_kwargs, meta_out);
  PyRef real_args, real_kwargs;
  bool mixed = false, exact = true;
  if (!stand_ins(meta_args, meta_kwargs, &real_args, &real_kwargs, &mixed, &exact) || !mixed) {
    PyErr_Clear();
    return {};
  }
  graph::TensorMeta out = meta_of_tensor(meta_out, nullptr);
  std::vector<int64_t> cut_sizes;
  for (int64_t s : out.sizes) cut_sizes.push_back(cut(s));
  // Cut stand-ins tell the layout only where the result follows their sizes; an op whose sizes come from its other
  // arguments (x.new_zeros(x.shape) at a dynamic-shape probe's far larger sizes) would allocate its whole result
  // for real, gigabytes. Asked on "meta" first.
  if (!exact && !result_follows_stand_ins(target, real_args.get(), real_kwargs.get(), cut_sizes)) return {};
  PyRef real = call_keeping_rng(target, real_args.get(), real_kwargs.get());
  PyErr_Clear();
  if (!real || !T.is_tensor(real.get())) return {};
  graph::TensorMeta kernel = meta_of_tensor(real.get(), nullptr);
  std::vector<int64_t> strides;
  if (exact) {
    if (kernel.sizes != out.sizes) return {};
    strides = kernel.strides;
  } else {
    if (kernel.sizes != cut_sizes) return {};
    // The kernel's order, trusted only when it explains the kernel's strides exactly (a dense result).
    std::vector<size_t> order = order_of(kernel.strides);
    if (dense_in_order(cut_sizes, order) != kernel.strides) return {};
    strides = dense_in_order(out.sizes, order);
  }
  // Only a dense meta result is re-strided: one that overlaps or has gaps is a view, laid out by its base.
  if (strides == out.strides || !dense(out.sizes, out.strides)) return {};
  return with_strides(out, std::move(strides));
}

}  // namespace fastcomp::frontend
