// Decoding CPython bytecode into the version-neutral InstrStream (and back, for transformed code).
#pragma once
#include <Python.h>

#include <stdexcept>
#include <string>

#include "frontend/bytecode/instr.h"

namespace fastcomp::frontend {

// Thrown by decode() on malformed code objects and by encode() on streams this CPython cannot express (e.g. a
// backward conditional jump on 3.12). The message says which and where.
struct BytecodeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/** Decodes `code` (its unquickened co_code, exception table and line table) into one Instr per real instruction. */
InstrStream decode(PyCodeObject* code);

/** Encodes a stream back into co_code bytes, the exception table and the line table of this CPython version.
    decode() followed by encode() reproduces the original three byte strings exactly. */
struct EncodedCode {
  std::string co_code;
  std::string exception_table;
  std::string line_table;
};
EncodedCode encode(const InstrStream& stream);

}  // namespace fastcomp::frontend
