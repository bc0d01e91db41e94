// pybind11 glue: one bind_<area>() per area, each in its own bind_<area>.cpp, called from module.cpp.
#pragma once
#include <pybind11/pybind11.h>

namespace fastcomp::bindings {
namespace py = pybind11;

void bind_bytecode(py::module_& m);  // _C._testing.decode(...) and friends
void bind_hook(py::module_& m);      // hook diagnostics for tests
void bind_logging(py::module_& m);   // topic levels, Python sink
void bind_api(py::module_& m);       // Dispatcher, reset, compile observer, config
void bind_cuda(py::module_& m);      // CUDA libraries, NVRTC, kernel cache, module launch (for tests)
void bind_cublaslt(py::module_& m);  // cuBLASLt matmul plans (for tests)
void bind_trace(py::module_& m);     // tracer helpers for tests (metadata without meta calls)
void bind_codegen(py::module_& m);   // _C._testing.emit_kernel / emit_program from kernel specs
void bind_scratch_arena(py::module_& m);  // _C._testing.scratch_arena: slots and offsets of scratch buffers

}  // namespace fastcomp::bindings
