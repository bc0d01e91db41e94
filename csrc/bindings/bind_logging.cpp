#include "bindings/bind.h"

namespace fastcomp::bindings {
void bind_logging(py::module_& m) {}
}  // namespace fastcomp::bindings
