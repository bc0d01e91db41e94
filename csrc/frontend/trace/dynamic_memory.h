// Automatic dynamic shapes: what the tracer remembers about the sizes each input of a code object had, so that a
// dimension whose size changed between compiles is traced as a symbol from then on (Dynamo's "automatic
// dynamic"). With fastcomp.config.automatic_dynamic_on_disk (off by default) the decision to make a dimension
// dynamic is also written under FASTCOMP_CACHE_DIR/dynamic, so a new process traces it as a symbol on its first
// compile instead of paying the static compile first.
#pragma once

#include <Python.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace fastcomp::frontend {

// What one code object's compiles have seen (kept by the code object, see code_info.h). Needs the GIL.
struct DynamicMemory {
  struct Sizes {
    std::vector<int64_t> sizes;  // the sizes last seen
    std::set<int> dynamic;       // dimensions seen with two sizes
  };
  // This process has read the decisions earlier processes left on disk for the code: read once per code
  // object, so that after forget() it is traced static first again.
  bool disk_read = false;
  std::map<std::string, std::set<int>> on_disk;  // source -> dimensions made dynamic by earlier processes
  std::unordered_map<std::string, Sizes> inputs;  // source -> sizes seen in this process

  // Forgets the sizes seen and the decisions made (fastcomp.reset()); the decisions on disk stay, for the next
  // process.
  void forget() {
    on_disk.clear();
    inputs.clear();
  }
};

// Identity of a code object across processes: "qualname@file:line#<hash of its bytecode>".
std::string code_identity(PyObject* code);

// Which dimensions of the tensor at `source` (a guard source name such as "L['x']") are dynamic for the code
// whose memory is `m` and identity `code_key`, after recording `sizes`: a dimension is dynamic once it has been
// seen with two different sizes, here or in an earlier process. `became` gets a line for each dimension that
// became dynamic on this call.
std::vector<bool> automatic_dynamic_dims(DynamicMemory& m, const std::string& code_key, const std::string& source,
                                         const std::vector<int64_t>& sizes, std::vector<std::string>* became);

}  // namespace fastcomp::frontend
