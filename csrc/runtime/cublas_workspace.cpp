#include "runtime/cublas_workspace.h"

#include <iterator>
#include <map>
#include <utility>

namespace fastcomp::runtime {

std::shared_ptr<CublasWorkspace> shared_cublas_workspace(int device, cuda::CUstream stream,
                                                         const std::function<std::shared_ptr<CublasWorkspace>()>& allocate) {
  // Weak: a workspace lives as long as an executable holds it (fastcomp.reset() gives its memory back).
  static auto* workspaces = new std::map<std::pair<int, cuda::CUstream>, std::weak_ptr<CublasWorkspace>>();
  for (auto it = workspaces->begin(); it != workspaces->end();)  // streams whose executables are all gone
    it = it->second.expired() ? workspaces->erase(it) : std::next(it);
  std::weak_ptr<CublasWorkspace>& slot = (*workspaces)[{device, stream}];
  if (std::shared_ptr<CublasWorkspace> w = slot.lock()) return w;
  std::shared_ptr<CublasWorkspace> w = allocate();
  slot = w;
  return w;
}

}  // namespace fastcomp::runtime
