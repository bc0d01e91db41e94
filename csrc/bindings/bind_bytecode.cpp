#include "bindings/bind.h"

namespace fastcomp::bindings {
void bind_bytecode(py::module_& m) {}
}  // namespace fastcomp::bindings
