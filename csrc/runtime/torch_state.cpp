#include "runtime/torch_state.h"

#include <dlfcn.h>

#include "cpython/pyref.h"
#include "runtime/torch_shim.h"
#include "runtime/verified_once.h"

namespace fastcomp::runtime {
namespace {

// Itanium-mangled names (Linux builds of torch): c10::get_default_dtype_as_scalartype() and
// c10::impl::raw_local_dispatch_key_set.
constexpr const char* kDefaultDtype = "_ZN3c1031get_default_dtype_as_scalartypeEv";
constexpr const char* kLocalKeys = "_ZN3c104impl26raw_local_dispatch_key_setE";

}  // namespace

const TorchState* TorchState::get() {
  return verified_once<TorchState>(
      "global-state guards ask torch through Python (two calls per graph and call): this torch's libc10 lacks the "
      "symbols fastcomp reads the default dtype and the autocast state with, or they disagree with torch's Python "
      "answers");
}

LocalDispatchKeys TorchState::local_dispatch_keys() const {
  // dlsym of a thread_local symbol gives the calling thread's instance; looked up once per thread.
  thread_local const uint64_t* keys = static_cast<const uint64_t*>(dlsym(c10_, kLocalKeys));
  return {keys[0], keys[1]};
}

bool TorchState::load() {
  // torch is imported by the time a guard is built, so libc10 is loaded: RTLD_NOLOAD finds it by its soname.
  c10_ = dlopen("libc10.so", RTLD_NOW | RTLD_NOLOAD);
  if (!c10_) return false;
  default_dtype_ = reinterpret_cast<int8_t (*)()>(dlsym(c10_, kDefaultDtype));
  return default_dtype_ && dlsym(c10_, kLocalKeys) && TorchShim::get();
}

// The default dtype must read as torch.get_default_dtype() does, and the key set must change when CPU autocast
// is entered and come back when it is left; otherwise the symbols are not what this file takes them to be.
bool TorchState::probe() const {
  PyRef torch = PyRef::steal(PyImport_ImportModule("torch"));
  PyRef dtype = torch ? PyRef::steal(PyObject_CallMethod(torch.get(), "get_default_dtype", nullptr)) : PyRef();
  if (!dtype || TorchShim::get()->dtype_code(dtype.get()) != default_dtype()) return false;
  PyRef autocast = torch ? PyRef::steal(PyObject_CallMethod(torch.get(), "autocast", "s", "cpu")) : PyRef();
  if (!autocast) return false;
  const LocalDispatchKeys before = local_dispatch_keys();
  PyRef entered = PyRef::steal(PyObject_CallMethod(autocast.get(), "__enter__", nullptr));
  if (!entered) return false;
  const LocalDispatchKeys inside = local_dispatch_keys();
  PyRef left = PyRef::steal(PyObject_CallMethod(autocast.get(), "__exit__", "OOO", Py_None, Py_None, Py_None));
  if (!left) return false;
  return !(inside == before) && local_dispatch_keys() == before;
}

}  // namespace fastcomp::runtime
