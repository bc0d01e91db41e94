// The extension module fastcomp._C. Only composition here: each area binds itself.
#include "bindings/bind.h"

PYBIND11_MODULE(_C, m) {
  namespace b = fastcomp::bindings;
  m.doc() = "fastcomp native core";
  auto testing = m.def_submodule("_testing", "stage entry points for tests");
  b::bind_logging(m);
  b::bind_bytecode(testing);
  b::bind_hook(testing);
  b::bind_cuda(testing);
  b::bind_cublaslt(testing);
  b::bind_trace(testing);
  b::bind_codegen(testing);
  b::bind_scratch_arena(testing);
  b::bind_api(m);
}
