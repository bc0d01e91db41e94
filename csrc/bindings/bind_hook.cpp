#include "bindings/bind.h"

namespace fastcomp::bindings {
void bind_hook(py::module_& m) {}
}  // namespace fastcomp::bindings
