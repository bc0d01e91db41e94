// encode(): lays an InstrStream out as this CPython's bytecode, exception table and location table.
// Each Instr becomes one real instruction, chosen from the opcode table; a CALL that fastcomp made (raw_opcode
// 0) is also given the KW_NAMES / PRECALL that CPython expects before it, while decoded CALLs keep theirs as
// NOPs. Jump distances are found by iterating to a fix-point because EXTENDED_ARG prefixes move the code
// they jump over.
#include "frontend/bytecode/decode.h"
#include "frontend/bytecode/opcode_table.h"
#include "frontend/bytecode/tables.h"

namespace fastcomp::frontend {
namespace {

using detail::ArgForm;
using detail::JumpDir;
using detail::OpcodeRow;
using detail::OpcodeTable;

// One real instruction to emit.
struct Part {
  uint8_t opcode;
  uint8_t caches;
  JumpDir jump = JumpDir::None;
  int32_t oparg = 0;  // for a jump, set by lay_out()
  int32_t dest = -1;  // for a jump, the instruction index its oparg counts to
};

int prefix_count(int32_t oparg) { return (oparg > 0xFFFFFF) + (oparg > 0xFFFF) + (oparg > 0xFF); }
int32_t units(const Part& p) { return prefix_count(p.oparg) + 1 + p.caches; }

std::string describe(const Instr& instr, size_t index) {
  std::string text = "fastcomp.encode: instruction " + std::to_string(index) + " (" + op_name(instr.op);
  if (instr.target >= 0) text += " to " + std::to_string(instr.target);
  return text + ")";
}

// The instruction a jump's oparg counts to through `row`: 3.12's FOR_ITER counts to the END_FOR it skips.
int32_t encoded_dest(const OpcodeRow& row, const Instr& instr) {
  return instr.target - (row.jump == JumpDir::ForwardPastNext ? 1 : 0);
}

bool fits(const OpcodeRow& row, const Instr& instr, int32_t index, int32_t count) {
  if (!detail::can_encode(row, instr)) return false;
  if (row.jump == JumpDir::None) return true;
  const int32_t dest = encoded_dest(row, instr);
  if (dest < 0 || dest >= count) return false;
  return row.jump == JumpDir::Backward ? dest <= index + 1 : dest >= index + 1;
}

// The decoded row when it still expresses the instruction (which keeps LOAD_FAST_CHECK, PRECALL or
// JUMP_BACKWARD_NO_INTERRUPT exact), else the first row that can.
const OpcodeTable::Resolved* choose_row(const OpcodeTable& table, const Instr& instr, int32_t index,
                                        int32_t count) {
  if (instr.raw_opcode != 0) {
    const OpcodeTable::Resolved* decoded = table.find(instr.raw_opcode, instr.raw_arg);
    if (decoded && decoded->row->op == instr.op && fits(*decoded->row, instr, index, count)) return decoded;
  }
  for (const OpcodeTable::Resolved& r : table.by_op[static_cast<int>(instr.op)]) {
    if (r.row->form == ArgForm::KwNames || r.row->form == ArgForm::Precall) continue;  // only before a CALL
    if (fits(*r.row, instr, index, count)) return &r;
  }
  return nullptr;
}

// The decoded oparg when it decodes to the same arg and flags: it may carry bits the neutral form drops
// (3.12 COMPARE_OP's mask is implied by the kind, but keeping it costs nothing).
int32_t oparg_for(const OpcodeTable::Resolved& r, const Instr& instr) {
  if (r.opcode == instr.raw_opcode) {
    Instr probe;
    detail::decode_arg(*r.row, instr.raw_arg, probe);
    if (probe.arg == instr.arg && probe.flags == instr.flags) return instr.raw_arg;
  }
  return detail::encode_arg(*r.row, instr);
}

// The real instructions of every Instr; first_part[i] is Instr i's first, first_part[n] the part count.
std::vector<Part> choose_parts(const OpcodeTable& table, const std::vector<Instr>& instrs,
                               std::vector<int32_t>& first_part) {
  std::vector<Part> parts;
  parts.reserve(instrs.size());
  const int32_t count = static_cast<int32_t>(instrs.size());
  for (int32_t i = 0; i < count; ++i) {
    const Instr& instr = instrs[i];
    first_part.push_back(static_cast<int32_t>(parts.size()));
    if (instr.op == Op::UNSUPPORTED) {
      if (instr.raw_opcode == 0) throw BytecodeError(describe(instr, i) + " has no raw opcode to emit");
      parts.push_back({instr.raw_opcode, table.caches[instr.raw_opcode], JumpDir::None, instr.arg});
      continue;
    }
    const OpcodeTable::Resolved* r = choose_row(table, instr, i, count);
    if (!r)
      throw BytecodeError(describe(instr, i) + " with arg " + std::to_string(instr.arg) + " and flags " +
                          std::to_string(instr.flags) + " has no encoding on CPython 3." +
                          std::to_string(detail::version_spec().minor));
    if (instr.op == Op::CALL && instr.raw_opcode == 0) {
      auto prelude = [&](int opcode, int32_t oparg) {
        parts.push_back({static_cast<uint8_t>(opcode), table.caches[opcode], JumpDir::None, oparg});
      };
      if (instr.kwnames >= 0) prelude(table.kw_names, instr.kwnames);
      if (table.precall >= 0) prelude(table.precall, instr.arg);
    }
    if (r->row->jump == JumpDir::None)
      parts.push_back({r->opcode, table.caches[r->opcode], JumpDir::None, oparg_for(*r, instr)});
    else
      parts.push_back({r->opcode, table.caches[r->opcode], r->row->jump, 0, encoded_dest(*r->row, instr)});
  }
  first_part.push_back(static_cast<int32_t>(parts.size()));
  return parts;
}

// Sets every jump's oparg and returns each part's first code unit (plus the total at the end). Jumps start
// with oparg 0, so sizes only grow from pass to pass and the loop stops at the smallest consistent layout,
// the one CPython's assembler reaches.
std::vector<int32_t> lay_out(std::vector<Part>& parts, const std::vector<int32_t>& first_part) {
  std::vector<int32_t> start(parts.size() + 1);
  for (bool grew = true; grew;) {
    int32_t unit = 0;
    for (size_t p = 0; p < parts.size(); ++p) {
      start[p] = unit;
      unit += units(parts[p]);
    }
    start[parts.size()] = unit;
    grew = false;
    for (size_t p = 0; p < parts.size(); ++p) {
      Part& part = parts[p];
      if (part.jump == JumpDir::None) continue;
      const int32_t after = start[p + 1];
      const int32_t dest = start[first_part[part.dest]];
      const int32_t oparg = part.jump == JumpDir::Backward ? after - dest : dest - after;
      grew = grew || prefix_count(oparg) != prefix_count(part.oparg);
      part.oparg = oparg;
    }
  }
  return start;
}

std::string emit_code(const std::vector<Part>& parts, int extended_arg) {
  std::string code;
  for (const Part& part : parts) {
    for (int k = prefix_count(part.oparg); k > 0; --k) {
      code += static_cast<char>(extended_arg);
      code += static_cast<char>((part.oparg >> (8 * k)) & 0xFF);
    }
    code += static_cast<char>(part.opcode);
    code += static_cast<char>(part.oparg & 0xFF);
    code.append(2 * part.caches, '\0');
  }
  return code;
}

std::string emit_exceptions(const InstrStream& stream, const std::vector<int32_t>& start,
                            const std::vector<int32_t>& first_part) {
  const int32_t count = static_cast<int32_t>(stream.instrs.size());
  std::vector<detail::RawExceptionEntry> raw;
  for (const ExceptionEntry& e : stream.exception_table) {
    if (e.start < 0 || e.start > e.end || e.end > count || e.target < 0 || e.target >= count)
      throw BytecodeError("fastcomp.encode: exception table entry " + std::to_string(e.start) + ".." +
                          std::to_string(e.end) + " -> " + std::to_string(e.target) + " is out of range");
    const int32_t from = start[first_part[e.start]], to = start[first_part[e.end]];
    if (from == to) continue;  // an empty range protects nothing, and CPython never writes one
    raw.push_back({from, to, start[first_part[e.target]], e.depth, e.push_lasti});
  }
  return detail::write_exception_table(raw);
}

std::string emit_locations(const InstrStream& stream, const std::vector<Part>& parts,
                           const std::vector<int32_t>& first_part) {
  const bool merge = detail::version_spec().merge_equal_locations;
  detail::LocationWriter writer(stream.first_line);
  detail::Position run;
  int32_t run_units = 0;
  for (size_t i = 0; i < stream.instrs.size(); ++i) {
    const Instr& instr = stream.instrs[i];
    const detail::Position pos{instr.line, instr.end_line, instr.col, instr.end_col};
    for (int32_t p = first_part[i]; p < first_part[i + 1]; ++p) {
      if (merge && run_units > 0 && pos == run) {
        run_units += units(parts[p]);
        continue;
      }
      writer.add(run, run_units);
      run = pos;
      run_units = units(parts[p]);
    }
  }
  writer.add(run, run_units);
  return writer.take();
}

}  // namespace

EncodedCode encode(const InstrStream& stream) {
  const OpcodeTable& table = detail::opcode_table();
  std::vector<int32_t> first_part;
  std::vector<Part> parts = choose_parts(table, stream.instrs, first_part);
  const std::vector<int32_t> start = lay_out(parts, first_part);
  return {emit_code(parts, table.extended_arg), emit_exceptions(stream, start, first_part),
          emit_locations(stream, parts, first_part)};
}

int call_group_start(const InstrStream& stream, int index) {
  const OpcodeTable& table = detail::opcode_table();
  if (index <= 0 || index >= static_cast<int>(stream.instrs.size()) || stream.instrs[index].op != Op::CALL) return index;
  auto is_prelude = [&](const Instr& in) {
    return in.op == Op::NOP && in.raw_opcode != 0 && (in.raw_opcode == table.kw_names || in.raw_opcode == table.precall);
  };
  while (index > 0 && is_prelude(stream.instrs[index - 1])) --index;
  return index;
}

}  // namespace fastcomp::frontend
