// Decoding CPython bytecode into the version-neutral InstrStream (and back, for transformed code).
#pragma once
#include <Python.h>

#include <string>

#include "frontend/bytecode/instr.h"

namespace fastcomp::frontend {

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
