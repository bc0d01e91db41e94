#include "bindings/bind.h"

namespace fastcomp::bindings {
void bind_api(py::module_& m) {}
}  // namespace fastcomp::bindings
