// The version-neutral instruction stream: the output of decode(), the input of the tracer.
#pragma once
#include <Python.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cpython/pyref.h"

namespace fastcomp::frontend {

enum class Op : uint8_t {
#define FC_OP(name, doc) name,
#include "frontend/bytecode/op.def"
#undef FC_OP
};
const char* op_name(Op op);

// CPython's NB_* numbering for BINARY_OP (identical on 3.11 and 3.12).
enum class BinaryOpKind : uint8_t {
  Add, And, FloorDivide, Lshift, MatrixMultiply, Multiply, Remainder, Or, Power, Rshift, Subtract,
  TrueDivide, Xor, InplaceAdd, InplaceAnd, InplaceFloorDivide, InplaceLshift, InplaceMatrixMultiply,
  InplaceMultiply, InplaceRemainder, InplaceOr, InplacePower, InplaceRshift, InplaceSubtract,
  InplaceTrueDivide, InplaceXor
};
enum class CompareKind : uint8_t { Lt, Le, Eq, Ne, Gt, Ge };  // Py_LT .. Py_GE order

struct Instr {
  static constexpr uint8_t kMethod = 1;        // LOAD_ATTR / LOAD_SUPER_ATTR loads a method (pushes 2)
  static constexpr uint8_t kPushNull = 2;      // LOAD_GLOBAL pushes NULL before the value
  static constexpr uint8_t kTwoArgSuper = 4;   // LOAD_SUPER_ATTR of super(cls, self)

  Op op = Op::NOP;
  uint8_t flags = 0;
  int32_t arg = 0;        // meaning per op, see op.def
  int32_t target = -1;    // jump target as an index into InstrStream::instrs
  int32_t kwnames = -1;   // CALL: index into co_consts of the keyword-names tuple, -1 if none
  int32_t offset = 0;     // byte offset of the instruction's opcode in co_code (after EXTENDED_ARG prefixes)
  int32_t line = -1;      // source line, -1 when none
  int32_t end_line = -1;  // last source line of the instruction's span, -1 when none
  int32_t col = -1;       // UTF-8 byte column where the span starts, -1 when none
  int32_t end_col = -1;   // UTF-8 byte column where the span ends, -1 when none
  uint8_t raw_opcode = 0; // the real opcode, for dumps and encode; 0 (CACHE) for an Instr made by fastcomp
  int32_t raw_arg = 0;    // the real oparg including EXTENDED_ARG bits
};

// Whether `op`'s argument is an index into co_localsplusnames (fast locals, cells and free variables).
bool uses_local_slot(Op op);

struct ExceptionEntry {
  int32_t start = 0;   // first covered instruction index
  int32_t end = 0;     // one past the last covered instruction index
  int32_t target = 0;  // handler instruction index
  int32_t depth = 0;   // stack depth at the handler
  bool push_lasti = false;
};

struct InstrStream {
  PyRef code;  // the code object that was decoded
  std::vector<Instr> instrs;
  std::vector<ExceptionEntry> exception_table;
  int32_t first_line = 0;  // co_firstlineno, the base of the line table's deltas

  // Index of the instruction whose opcode sits at `byte_offset`, or -1.
  int index_of_offset(int byte_offset) const;
  // One instruction per line: "  12 L34    LOAD_FAST               0 (x)" (index, line, op, arg and what the arg
  // names: constant, name, local, comparison, "to <index>" for jumps), then the exception table as
  // "  3 to 7 -> 9 depth 1 lasti". Stable for golden tests; needs the GIL to print constants. `of`: the code the
  // names and constants come from, where `code` is empty (a stream kept by its code object, see code_info.h).
  std::string to_string(PyCodeObject* of = nullptr) const;
};

}  // namespace fastcomp::frontend
