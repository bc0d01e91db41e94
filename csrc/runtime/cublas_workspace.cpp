#include "runtime/cublas_workspace.h"

#include <map>
#include <stdexcept>
#include <string>
#include <utility>

#include "frontend/trace/torch_refs.h"
#include "runtime/torch_shim.h"
#include "support/pystr.h"

namespace fastcomp::runtime {
namespace {

std::shared_ptr<CublasWorkspace> allocate(PyObject* device_obj) {
  const auto& T = frontend::torch_refs();
  PyRef empty = PyRef::steal(PyObject_GetAttrString(T.torch.get(), "empty"));
  PyRef u8 = PyRef::steal(PyObject_GetAttrString(T.torch.get(), "uint8"));
  PyRef args = PyRef::steal(Py_BuildValue("(n)", static_cast<Py_ssize_t>(kCublasWorkspaceBytes)));
  PyRef kwargs = PyRef::steal(PyDict_New());
  if (!empty || !u8 || !args || !kwargs || PyDict_SetItemString(kwargs.get(), "dtype", u8.get()) < 0 ||
      PyDict_SetItemString(kwargs.get(), "device", device_obj) < 0)
    throw std::runtime_error("fastcomp: cannot allocate the cuBLASLt workspace: " + take_error_message());
  auto w = std::make_shared<CublasWorkspace>();
  w->tensor = PyRef::steal(PyObject_Call(empty.get(), args.get(), kwargs.get()));
  if (!w->tensor) throw std::runtime_error("fastcomp: cannot allocate the cuBLASLt workspace: " + take_error_message());
  w->data = tensor_data_ptr(w->tensor.get());
  if (!w->data) throw std::runtime_error("fastcomp: cannot read the cuBLASLt workspace's address: " + take_error_message());
  return w;
}

}  // namespace

std::shared_ptr<CublasWorkspace> shared_cublas_workspace(int device, PyObject* device_obj, cuda::CUstream stream) {
  // Weak: a workspace lives as long as an executable holds it (fastcomp.reset() gives its memory back).
  static auto* workspaces = new std::map<std::pair<int, cuda::CUstream>, std::weak_ptr<CublasWorkspace>>();
  for (auto it = workspaces->begin(); it != workspaces->end();)  // streams whose executables are all gone
    it = it->second.expired() ? workspaces->erase(it) : std::next(it);
  std::weak_ptr<CublasWorkspace>& slot = (*workspaces)[{device, stream}];
  if (std::shared_ptr<CublasWorkspace> w = slot.lock()) return w;
  std::shared_ptr<CublasWorkspace> w = allocate(device_obj);
  slot = w;
  return w;
}

std::shared_ptr<CublasWorkspace> private_cublas_workspace(PyObject* device_obj) { return allocate(device_obj); }

}  // namespace fastcomp::runtime
