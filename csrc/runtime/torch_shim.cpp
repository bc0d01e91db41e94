#include "runtime/torch_shim.h"

#include <dlfcn.h>

#include <string>
#include <utility>
#include <vector>

#include "cpython/pyref.h"
#include "runtime/verified_once.h"
#include "support/log.h"

namespace fastcomp::runtime {
namespace {

// Every dtype the shim names (aoti_torch_dtype_<name>), with its torch.dtype object; filled by load().
std::vector<std::pair<PyRef, int32_t>>& dtype_table() {
  static auto* table = new std::vector<std::pair<PyRef, int32_t>>();  // never destroyed: holds Python objects
  return *table;
}

template <class F>
bool lookup(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  return *out != nullptr;
}

// The ints of a Python sequence of ints (a torch.Size or a stride tuple); empty on error.
std::vector<int64_t> ints_of(PyObject* seq) {
  std::vector<int64_t> out;
  PyRef fast = PyRef::steal(PySequence_Fast(seq, "not a sequence"));
  if (!fast) return PyErr_Clear(), out;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast.get()); ++i)
    out.push_back(PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast.get(), i)));
  if (PyErr_Occurred()) PyErr_Clear(), out.clear();
  return out;
}

}  // namespace

const TorchShim* TorchShim::get() {
  return verified_once<TorchShim>(
      "guards read tensors through torch's Python getters (five calls into torch per tensor and call instead of "
      "two): this torch lacks the C shim functions (aoti_torch_*) fastcomp reads them with, or they disagree with "
      "the getters");
}

bool TorchShim::load() {
  // torch is imported by the time a guard runs, so libtorch_cpu is loaded: RTLD_NOLOAD finds it by its soname
  // without loading a second copy from elsewhere.
  void* lib = dlopen("libtorch_cpu.so", RTLD_NOW | RTLD_NOLOAD);
  if (!lib) return false;
  int32_t (*device_cpu)() = nullptr;
  int32_t (*device_cuda)() = nullptr;
  int32_t (*layout_strided)() = nullptr;
  if (!(lookup(lib, "aoti_torch_get_dim", &get_dim_) && lookup(lib, "aoti_torch_get_sizes", &get_sizes_) &&
        lookup(lib, "aoti_torch_get_strides", &get_strides_) && lookup(lib, "aoti_torch_get_layout", &get_layout_) &&
        lookup(lib, "aoti_torch_layout_strided", &layout_strided) && lookup(lib, "aoti_torch_get_dtype", &get_dtype_) &&
        lookup(lib, "aoti_torch_get_device_type", &get_device_type_) &&
        lookup(lib, "aoti_torch_get_device_index", &get_device_index_) &&
        lookup(lib, "aoti_torch_grad_mode_is_enabled", &grad_mode_is_enabled_) &&
        lookup(lib, "aoti_torch_get_data_ptr", &get_data_ptr_) &&
        lookup(lib, "aoti_torch_device_type_cpu", &device_cpu) && lookup(lib, "aoti_torch_device_type_cuda", &device_cuda)))
    return false;
  cpu_ = device_cpu();
  cuda_ = device_cuda();
  strided_ = layout_strided();

  PyRef torch = PyRef::steal(PyImport_ImportModule("torch"));
  PyRef tensor_type = torch ? PyRef::steal(PyObject_GetAttrString(torch.get(), "Tensor")) : PyRef();
  if (!tensor_type || !PyType_Check(tensor_type.get())) return false;
  PyRef name = PyRef::steal(PyUnicode_FromString("_cdata"));
  PyObject* d = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(tensor_type.get()), name.get());  // borrowed
  if (!d || Py_TYPE(d) != &PyGetSetDescr_Type) return false;
  cdata_ = reinterpret_cast<PyGetSetDescrObject*>(d)->d_getset->get;
  cdata_closure_ = reinterpret_cast<PyGetSetDescrObject*>(d)->d_getset->closure;
  if (!cdata_) return false;

  static const char* const kDtypes[] = {"float32", "float64", "float16", "bfloat16", "int64", "int32", "int16",
                                        "int8", "uint8", "bool", "complex64", "complex128", "uint16", "uint32",
                                        "uint64", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"};
  for (const char* dt : kDtypes) {
    int32_t (*code)() = nullptr;
    PyRef obj = PyRef::steal(PyObject_GetAttrString(torch.get(), dt));
    if (!obj) PyErr_Clear();
    if (obj && lookup(lib, ("aoti_torch_dtype_" + std::string(dt)).c_str(), &code))
      dtype_table().emplace_back(std::move(obj), code());
  }
  return !dtype_table().empty();
}

// Reads two tensors, and grad mode, both ways (shim and Python); any difference means this torch lays things
// out differently from what the shim assumes, and the shim is not used. Also finds where the Python tensor
// object keeps its at::Tensor, used only when it holds the getter's TensorImpl for both tensors.
bool TorchShim::probe() {
  PyRef torch = PyRef::steal(PyImport_ImportModule("torch"));
  PyRef empty_strided = torch ? PyRef::steal(PyObject_GetAttrString(torch.get(), "empty_strided")) : PyRef();
  PyRef f64 = empty_strided ? PyRef::steal(PyObject_GetAttrString(torch.get(), "float64")) : PyRef();
  PyRef i32 = f64 ? PyRef::steal(PyObject_GetAttrString(torch.get(), "int32")) : PyRef();
  if (!i32) return false;
  auto make = [&](PyObject* args, PyObject* dtype) {
    PyRef a = PyRef::steal(args);
    PyRef kwargs = PyRef::steal(Py_BuildValue("{sO}", "dtype", dtype));
    return a && kwargs ? PyObject_Call(empty_strided.get(), a.get(), kwargs.get()) : nullptr;
  };
  PyRef probes = PyRef::steal(Py_BuildValue("(NN)", make(Py_BuildValue("((ii)(ii))", 2, 3, 1, 2), f64.get()),
                                            make(Py_BuildValue("((i)(i))", 5, 3), i32.get())));
  if (!probes) return false;
  PyRef grad_enabled = PyRef::steal(PyObject_CallMethod(torch.get(), "is_grad_enabled", nullptr));
  if (!grad_enabled || (grad_enabled.get() == Py_True) != grad_mode_enabled()) return false;
  if (!find_cdata_layout(PyTuple_GET_ITEM(probes.get(), 0))) return false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(probes.get()); ++i) {
    void* scratch = nullptr;
    PyObject* t = PyTuple_GET_ITEM(probes.get(), i);
    Handle h = handle_of(t, &scratch);
    if (!h || *static_cast<void**>(h) != impl_of(t)) cdata_layout_ = CdataLayout::Getter;
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(probes.get()); ++i) {
    PyObject* t = PyTuple_GET_ITEM(probes.get(), i);
    ShimTensorMeta m;
    if (!read(t, &m)) return false;
    PyRef shape = PyRef::steal(PyObject_GetAttrString(t, "shape"));
    PyRef strides = PyRef::steal(PyObject_CallMethod(t, "stride", nullptr));
    PyRef dtype = PyRef::steal(PyObject_GetAttrString(t, "dtype"));
    PyRef device = PyRef::steal(PyObject_GetAttrString(t, "device"));
    if (!shape || !strides || !dtype || !device) return false;
    PyRef address = PyRef::steal(PyObject_CallMethod(t, "data_ptr", nullptr));
    if (!address || PyLong_AsVoidPtr(address.get()) != data_ptr(t)) return false;
    std::vector<int64_t> want_sizes = ints_of(shape.get()), want_strides = ints_of(strides.get());
    int32_t type = -1, index = -1;
    if (m.layout != strided_ || m.ndim != static_cast<int64_t>(want_sizes.size()) || want_strides.size() != want_sizes.size() ||
        std::vector<int64_t>(m.sizes, m.sizes + m.ndim) != want_sizes ||
        std::vector<int64_t>(m.strides, m.strides + m.ndim) != want_strides || m.dtype != dtype_code(dtype.get()) ||
        !device_code(device.get(), &type, &index) || m.device_type != type || m.device_index != index)
      return false;
  }
  if (cdata_layout_ == CdataLayout::Getter)
    FC_LOG(perf_hints, info, "guards find each tensor's at::Tensor through Tensor._cdata (a Python int made per "
                             "tensor and call): this torch keeps it where fastcomp does not look");
  return true;
}

void* TorchShim::impl_of(PyObject* tensor) const {
  PyObject* address = cdata_(tensor, cdata_closure_);  // new reference
  if (!address) return PyErr_Clear(), nullptr;
  void* impl = PyLong_AsVoidPtr(address);
  Py_DECREF(address);
  if (!impl) PyErr_Clear();
  return impl;
}

TorchShim::Handle TorchShim::handle_of(PyObject* tensor, void** scratch) const {
  char* payload = reinterpret_cast<char*>(tensor) + sizeof(PyObject);
  switch (cdata_layout_) {
    case CdataLayout::Plain: return payload;
    case CdataLayout::MaybeOwned:
      if (!*reinterpret_cast<const bool*>(payload)) return payload + sizeof(void*);
      break;  // a borrowed tensor: its owner is elsewhere, ask the getter
    case CdataLayout::Getter: break;
  }
  *scratch = impl_of(tensor);
  return *scratch ? scratch : nullptr;
}

// Sets cdata_layout_ from one tensor whose TensorImpl the getter gives; stays Getter when no layout fits.
bool TorchShim::find_cdata_layout(PyObject* probe) {
  void* impl = impl_of(probe);
  if (!impl) return false;
  char* payload = reinterpret_cast<char*>(probe) + sizeof(PyObject);
  if (*reinterpret_cast<void**>(payload) == impl)
    cdata_layout_ = CdataLayout::Plain;
  else if (!*reinterpret_cast<const bool*>(payload) && *reinterpret_cast<void**>(payload + sizeof(void*)) == impl)
    cdata_layout_ = CdataLayout::MaybeOwned;
  return true;
}

bool TorchShim::read(PyObject* tensor, ShimTensorMeta* out) const {
  void* scratch = nullptr;
  Handle h = handle_of(tensor, &scratch);
  if (!h) return false;
  int64_t* sizes = nullptr;
  int64_t* strides = nullptr;
  if (get_layout_(h, &out->layout) || get_dim_(h, &out->ndim) || get_sizes_(h, &sizes) ||
      (out->layout == strided_ && get_strides_(h, &strides)) || get_dtype_(h, &out->dtype) ||
      get_device_type_(h, &out->device_type) || get_device_index_(h, &out->device_index))
    return false;
  out->sizes = sizes;
  out->strides = strides;
  return true;
}

void* TorchShim::data_ptr(PyObject* tensor) const {
  void* scratch = nullptr;
  Handle h = handle_of(tensor, &scratch);
  if (!h) return nullptr;
  void* data = nullptr;
  return get_data_ptr_(h, &data) == 0 ? data : nullptr;
}

char* tensor_data_ptr(PyObject* tensor) {
  if (const TorchShim* shim = TorchShim::get())
    if (void* p = shim->data_ptr(tensor)) return static_cast<char*>(p);
  static PyObject* name = PyUnicode_InternFromString("data_ptr");
  PyRef p = PyRef::steal(PyObject_CallMethodNoArgs(tensor, name));
  return p ? static_cast<char*>(PyLong_AsVoidPtr(p.get())) : nullptr;
}

int32_t TorchShim::dtype_code(PyObject* dtype) const {
  for (const auto& [obj, code] : dtype_table())
    if (obj.get() == dtype) return code;
  return -1;
}

bool TorchShim::device_code(PyObject* device, int32_t* type, int32_t* index) const {
  PyRef type_name = PyRef::steal(PyObject_GetAttrString(device, "type"));
  PyRef index_obj = type_name ? PyRef::steal(PyObject_GetAttrString(device, "index")) : PyRef();
  if (!index_obj) return PyErr_Clear(), false;
  const char* name = PyUnicode_Check(type_name.get()) ? PyUnicode_AsUTF8(type_name.get()) : nullptr;
  if (!name) return PyErr_Clear(), false;
  if (std::string(name) == "cpu") *type = cpu_;
  else if (std::string(name) == "cuda") *type = cuda_;
  else return false;
  *index = index_obj.get() == Py_None ? -1 : static_cast<int32_t>(PyLong_AsLong(index_obj.get()));
  if (PyErr_Occurred()) return PyErr_Clear(), false;
  return true;
}

}  // namespace fastcomp::runtime
