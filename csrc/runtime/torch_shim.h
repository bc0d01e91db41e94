// Tensor metadata and grad mode read through torch's stable C shim: the aoti_torch_* functions that
// AOTInductor's compiled libraries call, looked up in the libtorch the process has already loaded (nothing is
// linked). One guard check reads a tensor's sizes, strides, dtype and device with a handful of plain C calls,
// where torch's Python getters cost one call into torch each and allocate a torch.Size, a stride tuple and a
// torch.device per read.
#pragma once
#include <Python.h>

#include <cstdint>

namespace fastcomp::runtime {

// A tensor's metadata as the shim numbers it. `sizes` and `strides` point into the tensor and stay valid while
// it is alive and unchanged.
struct ShimTensorMeta {
  int64_t ndim = 0;
  const int64_t* sizes = nullptr;
  const int64_t* strides = nullptr;
  int32_t layout = -1;        // c10::Layout
  int32_t dtype = -1;         // c10::ScalarType
  int32_t device_type = -1;   // c10::DeviceType
  int32_t device_index = -1;  // -1 where the device has no index (cpu)
};

class TorchShim {
 public:
  template <class Reader>
  friend const Reader* verified_once(const char*);

  // The shim, or null when this torch lacks one of its functions or reads a probe tensor differently from its
  // Python getters (then callers keep to the getters). Resolved on the first call; needs the GIL.
  static const TorchShim* get();

  // Reads `tensor`, which must be an instance of torch.Tensor (Parameter included). False with no error set
  // when it cannot be read this way (a nested tensor has no sizes); `sizes` and `strides` are only meaningful
  // when `layout` is strided_layout() (a sparse tensor reads without error but has no strides).
  bool read(PyObject* tensor, ShimTensorMeta* out) const;
  // The shim's number for a torch.dtype object, or -1 when it has none.
  int32_t dtype_code(PyObject* dtype) const;
  // The shim's numbers for a torch.device object; false when its type has none.
  bool device_code(PyObject* device, int32_t* type, int32_t* index) const;
  // The address of the tensor's first element (Tensor.data_ptr()), or null when it cannot be read so (then no
  // error is set; callers fall back to the Python method).
  void* data_ptr(PyObject* tensor) const;
  bool grad_mode_enabled() const { return grad_mode_is_enabled_(); }
  int32_t strided_layout() const { return strided_; }

  using Handle = void*;  // AtenTensorHandle: an at::Tensor*, i.e. the address of a TensorImpl pointer
  using GetInt64 = int32_t (*)(Handle, int64_t*);
  using GetInt32 = int32_t (*)(Handle, int32_t*);
  using GetInts = int32_t (*)(Handle, int64_t**);
  using GetPtr = int32_t (*)(Handle, void**);

 private:
  bool load();
  bool probe();
  // The TensorImpl* of a torch.Tensor, null (no error set) when unreadable. An at::Tensor is one intrusive
  // pointer to its TensorImpl, so the address of a local holding it is a handle (an at::Tensor*) that borrows the
  // caller's reference: the shim's getters neither keep nor release it.
  void* impl_of(PyObject* tensor) const;
  // A handle to `tensor`'s at::Tensor: the one inside the Python object where its layout is known (see
  // CdataLayout), else `*scratch` set to impl_of(tensor). Null (no error set) when unreadable.
  Handle handle_of(PyObject* tensor, void** scratch) const;
  bool find_cdata_layout(PyObject* probe);

  // Where torch's Python tensor object (THPVariable) keeps its at::Tensor, found by comparing the words after
  // the PyObject header with what Tensor._cdata says (probe() then checks every read made through it).
  // Reading it there saves making and unpacking a Python int per tensor and call.
  enum class CdataLayout : uint8_t {
    Getter,      // unknown: ask Tensor._cdata
    Plain,       // `at::Tensor cdata` right after the header (torch 2.10 and later)
    MaybeOwned,  // `c10::MaybeOwned<at::Tensor> cdata`: a bool "borrowed", then the tensor when owned
  };
  CdataLayout cdata_layout_ = CdataLayout::Getter;

  GetInt64 get_dim_ = nullptr;
  GetInts get_sizes_ = nullptr, get_strides_ = nullptr;
  GetInt32 get_layout_ = nullptr, get_dtype_ = nullptr, get_device_type_ = nullptr, get_device_index_ = nullptr;
  GetPtr get_data_ptr_ = nullptr;
  bool (*grad_mode_is_enabled_)() = nullptr;
  getter cdata_ = nullptr;  // torch.Tensor._cdata: the TensorImpl's address as an int
  void* cdata_closure_ = nullptr;
  int32_t cpu_ = -1, cuda_ = -1;  // device type numbers
  int32_t strided_ = -1;          // torch.strided's number
};

// A tensor's data address: through the shim where it can read it (no call into torch's Python layer), else
// Tensor.data_ptr(). Null with a Python error set on failure; an empty tensor's may be null without one.
char* tensor_data_ptr(PyObject* tensor);

}  // namespace fastcomp::runtime
