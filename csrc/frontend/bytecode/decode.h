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

/** Decodes `code` (borrowed; the stream keeps a reference) into one Instr per real instruction, reading its
    unquickened co_code, exception table and location table. Needs the GIL (the first call reads the opcode
    tables from the `opcode` module). */
InstrStream decode(PyCodeObject* code);

/** Encodes a stream into co_code bytes, the exception table and the location table of this CPython version;
    decode() followed by encode() reproduces the original three byte strings exactly. Arguments come from the
    neutral fields (op, arg, flags, target, kwnames, positions); raw_opcode only picks among opcodes with the
    same meaning (LOAD_FAST_CHECK, JUMP_BACKWARD_NO_INTERRUPT, PRECALL...). An Instr fastcomp made has
    raw_opcode 0 and gets the canonical opcode, and such a CALL also gets the KW_NAMES / PRECALL CPython
    expects before it (a decoded CALL keeps its own, as the NOPs before it). Needs the GIL on first use. */
struct EncodedCode {
  std::string co_code;
  std::string exception_table;
  std::string line_table;
};
EncodedCode encode(const InstrStream& stream);

/** The first instruction CPython must execute to run instruction `index` on its own: a decoded CALL's
    KW_NAMES / PRECALL (kept as NOPs before it) set up the call, so execution entering at the CALL must enter
    at them. Other instructions are their own group. */
int call_group_start(const InstrStream& stream, int index);

}  // namespace fastcomp::frontend
