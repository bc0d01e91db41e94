// The per-version half of decode/encode: which real CPython instruction is which neutral Op, and how its oparg
// carries Instr::arg, Instr::flags and Instr::target. py311.cpp and py312.cpp each list their version's rows by
// CPython opcode *name*; opcode numbers and inline-cache sizes are read once from the running interpreter's
// `opcode` module, so no opcode number is typed by hand and the table cannot drift from the interpreter.
#pragma once
#include <array>
#include <span>
#include <string>
#include <vector>

#include "frontend/bytecode/instr.h"

namespace fastcomp::frontend::detail {

// How a real instruction's oparg carries Instr::arg and Instr::flags.
enum class ArgForm : uint8_t {
  Plain,          // arg = oparg
  AlwaysFlag,     // arg = oparg, flags = param (3.11 LOAD_METHOD is LOAD_ATTR with kMethod)
  LowBitFlag,     // arg = oparg >> 1, bit 0 is the flag `param`
  SuperAttr,      // arg = oparg >> 2, bit 0 is kMethod, bit 1 is kTwoArgSuper
  CompareMasked,  // arg = oparg >> 4 (a CompareKind); the low 4 bits are the kind's COMPARISON_* mask (3.12)
  Fixed,          // matches only oparg == param; arg = 0 (3.12 intrinsics that have an Op of their own)
  KwNames,        // NOP whose oparg (a co_consts index) becomes the next CALL's Instr::kwnames
  Precall,        // NOP whose oparg repeats the next CALL's count (3.11 PRECALL)
};

// Which way a jump's oparg counts code units, starting after the instruction and its inline caches.
enum class JumpDir : uint8_t {
  None,
  Forward,
  Backward,
  // Forward, and execution resumes one instruction past the encoded destination: 3.12's FOR_ITER jumps to its
  // END_FOR but skips it, so Instr::target names the instruction after the END_FOR.
  ForwardPastNext,
};

struct OpcodeRow {
  const char* name;  // CPython's opname
  Op op;
  ArgForm form = ArgForm::Plain;
  JumpDir jump = JumpDir::None;  // a jump's arg is 0 and its flags are 0
  uint8_t param = 0;             // AlwaysFlag, LowBitFlag: the flag; Fixed: the oparg
};

// What one supported CPython version contributes; defined by exactly one of py311.cpp / py312.cpp.
struct VersionSpec {
  int minor;
  // Rows in preference order: when encoding an Instr fastcomp made, the first row that can express it wins.
  // Rows sharing an opcode are tried in order when decoding, so Fixed rows come before their Plain fallback.
  std::span<const OpcodeRow> rows;
  // 3.12's assembler writes one location entry per run of instructions with equal positions; 3.11's writes
  // one per instruction.
  bool merge_equal_locations;
};
const VersionSpec& version_spec();

// The rows resolved against the running interpreter.
class OpcodeTable {
 public:
  struct Resolved {
    const OpcodeRow* row;
    uint8_t opcode;
  };

  int extended_arg = 0;
  int kw_names = -1;  // the KwNames row's opcode
  int precall = -1;   // the Precall row's opcode, -1 where the version has none (3.12)
  std::array<uint8_t, 256> caches{};                 // inline CACHE code units after each opcode
  std::array<std::vector<Resolved>, 256> by_opcode;  // rows of each opcode, in decode order
  std::vector<std::vector<Resolved>> by_op;          // rows of each Op, in preference order

  // The row a raw instruction decodes through, or null for an instruction that becomes UNSUPPORTED.
  const Resolved* find(int opcode, int oparg) const;
};

// The table for the running interpreter, built on first use (the GIL must be held). Throws BytecodeError when
// the `opcode` module does not describe an interpreter this table was written for.
const OpcodeTable& opcode_table();

// Fills instr.arg and instr.flags from a raw oparg read through `row` (a jump's target is the caller's job).
void decode_arg(const OpcodeRow& row, int oparg, Instr& instr);
// Whether `row` can carry instr.arg and instr.flags (jump direction aside).
bool can_encode(const OpcodeRow& row, const Instr& instr);
// The oparg that carries instr.arg and instr.flags through `row`; requires can_encode (jumps: the caller's job).
int encode_arg(const OpcodeRow& row, const Instr& instr);

// Throws BytecodeError with `context` and the pending Python exception's type and message (which it clears).
[[noreturn]] void throw_python_error(const std::string& context);

}  // namespace fastcomp::frontend::detail
