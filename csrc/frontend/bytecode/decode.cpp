// decode(): the version-neutral walk over a code object. The opcode table (per version) says what each real
// instruction means; this file folds EXTENDED_ARG prefixes, skips inline caches and turns every code-unit
// offset (jumps, positions, the exception table) into instruction indices.
#include "frontend/bytecode/decode.h"

#include <string_view>

#include "frontend/bytecode/opcode_table.h"
#include "frontend/bytecode/tables.h"

namespace fastcomp::frontend {
namespace {

using detail::JumpDir;

std::string_view bytes_view(PyObject* bytes /* borrowed */, const char* what) {
  if (!PyBytes_Check(bytes)) throw BytecodeError(std::string("fastcomp.decode: ") + what + " is not bytes");
  return {PyBytes_AS_STRING(bytes), static_cast<size_t>(PyBytes_GET_SIZE(bytes))};
}

// Where each instruction sits, in code units.
struct Layout {
  std::vector<int32_t> first_unit;     // its first unit, EXTENDED_ARG prefixes included (jumps land there)
  std::vector<int32_t> end_unit;       // one past its last inline cache
  std::vector<int32_t> index_of_unit;  // the instruction each unit belongs to

  // The instruction that starts exactly at `unit`; the end of the code gives the instruction count.
  int32_t instr_at(int64_t unit, const char* what) const {
    const int64_t end = static_cast<int64_t>(index_of_unit.size());
    if (unit == end) return static_cast<int32_t>(first_unit.size());
    if (unit < 0 || unit > end || first_unit[index_of_unit[unit]] != unit)
      throw BytecodeError("fastcomp.decode: " + std::string(what) + " at byte offset " +
                          std::to_string(unit * 2) + " is not the start of an instruction");
    return index_of_unit[unit];
  }
};

// Splits co_code into instructions: raw opcode and oparg (EXTENDED_ARG folded in), offsets, the unit layout.
void split_instructions(std::string_view code, const detail::OpcodeTable& table, InstrStream& out,
                        Layout& layout) {
  if (code.size() % 2) throw BytecodeError("fastcomp.decode: co_code has an odd length");
  const int32_t n_units = static_cast<int32_t>(code.size() / 2);
  layout.index_of_unit.assign(n_units, -1);
  uint32_t extended = 0;
  int32_t first = -1;  // first EXTENDED_ARG unit of the instruction being read, -1 when none
  for (int32_t unit = 0; unit < n_units;) {
    const uint8_t opcode = static_cast<uint8_t>(code[2 * unit]);
    const uint32_t oparg = static_cast<uint8_t>(code[2 * unit + 1]) | extended;
    if (first < 0) first = unit;
    if (opcode == table.extended_arg) {
      extended = oparg << 8;
      ++unit;
      continue;
    }
    const int32_t end = unit + 1 + table.caches[opcode];
    if (end > n_units) throw BytecodeError("fastcomp.decode: co_code ends inside inline caches");
    Instr instr;
    instr.offset = 2 * unit;
    instr.raw_opcode = opcode;
    instr.raw_arg = static_cast<int32_t>(oparg);
    const int32_t index = static_cast<int32_t>(out.instrs.size());
    for (int32_t u = first; u < end; ++u) layout.index_of_unit[u] = index;
    layout.first_unit.push_back(first);
    layout.end_unit.push_back(end);
    out.instrs.push_back(instr);
    extended = 0;
    first = -1;
    unit = end;
  }
  if (first >= 0) throw BytecodeError("fastcomp.decode: co_code ends with EXTENDED_ARG");
}

// Gives every instruction its neutral op, arg, flags, jump target and keyword names.
void translate(const detail::OpcodeTable& table, const Layout& layout, InstrStream& out) {
  int32_t kwnames = -1;  // KW_NAMES seen, waiting for its CALL
  for (size_t i = 0; i < out.instrs.size(); ++i) {
    Instr& instr = out.instrs[i];
    const detail::OpcodeTable::Resolved* resolved = table.find(instr.raw_opcode, instr.raw_arg);
    if (!resolved) {
      instr.op = Op::UNSUPPORTED;
      instr.arg = instr.raw_arg;
      continue;
    }
    const detail::OpcodeRow& row = *resolved->row;
    instr.op = row.op;
    detail::decode_arg(row, instr.raw_arg, instr);
    if (row.form == detail::ArgForm::KwNames) kwnames = instr.arg;
    if (row.op == Op::CALL) {
      instr.kwnames = kwnames;
      kwnames = -1;
    }
    if (row.jump == JumpDir::None) continue;
    const int64_t after = layout.end_unit[i];
    const int64_t dest = row.jump == JumpDir::Backward ? after - instr.raw_arg : after + instr.raw_arg;
    const int32_t target = layout.instr_at(dest, "the jump target of the instruction") +
                           (row.jump == JumpDir::ForwardPastNext ? 1 : 0);
    if (target >= static_cast<int32_t>(out.instrs.size()))
      throw BytecodeError("fastcomp.decode: the jump at byte offset " + std::to_string(instr.offset) +
                          " leaves the code");
    instr.target = target;
  }
}

// Gives every instruction the position of its opcode's code unit (the one dis reports).
void assign_positions(std::string_view line_table, InstrStream& stream) {
  std::vector<Instr>& instrs = stream.instrs;
  size_t next = 0;
  int32_t unit = 0;
  for (const detail::LocationEntry& entry : detail::read_location_table(line_table, stream.first_line)) {
    unit += entry.units;
    for (; next < instrs.size() && instrs[next].offset / 2 < unit; ++next) {
      instrs[next].line = entry.pos.line;
      instrs[next].end_line = entry.pos.end_line;
      instrs[next].col = entry.pos.col;
      instrs[next].end_col = entry.pos.end_col;
    }
  }
}

void read_exceptions(std::string_view exception_table, const Layout& layout, InstrStream& out) {
  for (const detail::RawExceptionEntry& raw : detail::read_exception_table(exception_table)) {
    ExceptionEntry e;
    e.start = layout.instr_at(raw.start, "an exception table range start");
    e.end = layout.instr_at(raw.end, "an exception table range end");
    e.target = layout.instr_at(raw.target, "an exception handler");
    e.depth = raw.depth;
    e.push_lasti = raw.lasti;
    if (e.target >= static_cast<int32_t>(out.instrs.size()))
      throw BytecodeError("fastcomp.decode: an exception handler lies past the end of the code");
    out.exception_table.push_back(e);
  }
}

}  // namespace

InstrStream decode(PyCodeObject* code /* borrowed */) {
  const detail::OpcodeTable& table = detail::opcode_table();
  // co_code as the compiler wrote it: the live bytecode is quickened and may be instrumented.
  PyRef co_code = PyRef::steal(PyCode_GetCode(code));
  if (!co_code) detail::throw_python_error("fastcomp.decode: reading co_code");

  InstrStream stream;
  stream.code = PyRef::borrow(reinterpret_cast<PyObject*>(code));
  stream.first_line = code->co_firstlineno;
  Layout layout;
  split_instructions(bytes_view(co_code.get(), "co_code"), table, stream, layout);
  translate(table, layout, stream);
  assign_positions(bytes_view(code->co_linetable, "co_linetable"), stream);
  read_exceptions(bytes_view(code->co_exceptiontable, "co_exceptiontable"), layout, stream);
  return stream;
}

}  // namespace fastcomp::frontend
