// Automatic dynamic shapes: what the tracer remembers about the sizes each input of a code object had, so that a
// dimension whose size changed between compiles is traced as a symbol from then on (Dynamo's "automatic
// dynamic"). With fastcomp.config.automatic_dynamic_on_disk (off by default) the decision to make a dimension
// dynamic is also written under FASTCOMP_CACHE_DIR/dynamic, so a new process traces it as a symbol on its first
// compile instead of paying the static compile first.
#pragma once

#include <Python.h>

#include <cstdint>
#include <string>
#include <vector>

namespace fastcomp::frontend {

// Identity of a code object across processes: "qualname@file:line#<hash of its bytecode>".
std::string code_identity(PyObject* code);

// Which dimensions of the tensor at `source` (a guard source name such as "L['x']") are dynamic for `code_key`,
// after recording `sizes`: a dimension is dynamic once it has been seen with two different sizes, here or in an
// earlier process. `became` gets a line for each dimension that became dynamic on this call.
std::vector<bool> automatic_dynamic_dims(const std::string& code_key, const std::string& source,
                                         const std::vector<int64_t>& sizes, std::vector<std::string>* became);

// Forgets the sizes seen and the decisions made (fastcomp.reset()): codes are traced static first again. The
// decisions on disk (when kept there) stay, for the next process.
void reset_dynamic_memory();

}  // namespace fastcomp::frontend
