#include "frontend/resume/region.h"

#include <fmt/format.h>

#include "frontend/bytecode/decode.h"

namespace fastcomp::frontend {
namespace {

bool is_conditional_jump(Op op) {
  return op == Op::POP_JUMP_IF_FALSE || op == Op::POP_JUMP_IF_TRUE || op == Op::POP_JUMP_IF_NONE ||
         op == Op::POP_JUMP_IF_NOT_NONE;
}

// Applies the stack effect of `in` to `st`. False when the effect is not modelled here (or the stack is too
// shallow), in which case the break is not resumed.
bool apply(const Instr& in, std::vector<Slot>& st) {
  auto pop = [&](int n) {
    if (n < 0 || static_cast<int>(st.size()) < n) return false;
    st.resize(st.size() - n);
    return true;
  };
  auto push = [&](int n) {
    st.insert(st.end(), n, Slot::Value);
    return true;
  };
  switch (in.op) {
    case Op::NOP: return true;
    case Op::CALL: return pop(in.arg + 2) && push(1);
    case Op::CALL_FUNCTION_EX: return pop(3 + (in.arg & 1)) && push(1);
    case Op::LOAD_CONST:
    case Op::LOAD_FAST:
    case Op::LOAD_DEREF:
    case Op::IMPORT_FROM: return push(1);
    case Op::LOAD_GLOBAL:
      if (in.flags & Instr::kPushNull) st.push_back(Slot::Null);
      return push(1);
    case Op::LOAD_ATTR: return !(in.flags & Instr::kMethod) && pop(1) && push(1);
    case Op::STORE_ATTR: return pop(2);
    case Op::STORE_SUBSCR: return pop(3);
    case Op::DELETE_SUBSCR: return pop(2);
    case Op::STORE_GLOBAL:
    case Op::DELETE_ATTR:
    case Op::POP_TOP: return pop(1);
    case Op::BINARY_OP:
    case Op::COMPARE_OP:
    case Op::IS_OP:
    case Op::CONTAINS_OP:
    case Op::BINARY_SUBSCR:
    case Op::IMPORT_NAME: return pop(2) && push(1);
    case Op::BINARY_SLICE: return pop(3) && push(1);
    case Op::UNARY_NEGATIVE:
    case Op::UNARY_POSITIVE:
    case Op::UNARY_NOT:
    case Op::UNARY_INVERT:
    case Op::GET_ITER: return pop(1) && push(1);
    case Op::GET_LEN: return push(1);
    case Op::BUILD_TUPLE:
    case Op::BUILD_LIST:
    case Op::BUILD_SET:
    case Op::BUILD_STRING:
    case Op::BUILD_SLICE: return pop(in.arg) && push(1);
    case Op::BUILD_MAP: return pop(2 * in.arg) && push(1);
    case Op::FORMAT_VALUE: return pop((in.arg & 0x04) ? 2 : 1) && push(1);
    case Op::UNPACK_SEQUENCE: return pop(1) && push(in.arg);
    case Op::POP_JUMP_IF_FALSE:
    case Op::POP_JUMP_IF_TRUE:
    case Op::POP_JUMP_IF_NONE:
    case Op::POP_JUMP_IF_NOT_NONE: return pop(1);
    default: return false;
  }
}

// Instructions that may follow the break inside its region: they compute a condition from its result.
bool extends_region(Op op) {
  return op == Op::NOP || op == Op::LOAD_CONST || op == Op::LOAD_FAST || op == Op::COMPARE_OP || op == Op::IS_OP ||
         op == Op::CONTAINS_OP || op == Op::BINARY_OP || op == Op::UNARY_NOT || op == Op::UNARY_NEGATIVE;
}

}  // namespace

std::string loop_around(const InstrStream& stream, int instr) {
  const auto& ins = stream.instrs;
  for (int j = instr; j < static_cast<int>(ins.size()); ++j)
    if (ins[j].target >= 0 && ins[j].target <= instr)
      return "the break is inside a loop (the loop runs in CPython; the functions it calls are compiled)";
  return "";
}

std::string find_tail_region(const InstrStream& stream, int instr, int first_allowed, BreakRegion* out) {
  const int n = static_cast<int>(stream.instrs.size());
  if (instr < 0 || instr >= n) return "the break is outside the code";
  BreakRegion r;
  r.first = call_group_start(stream, instr);
  if (r.first < first_allowed) return "the break is in the prologue of a resume function";
  r.last = n - 1;
  *out = std::move(r);
  return "";
}

std::string find_region(const InstrStream& stream, int instr, const std::vector<Slot>& stack, int first_allowed,
                        BreakRegion* out) {
  const auto& ins = stream.instrs;
  const int n = static_cast<int>(ins.size());
  if (instr < 0 || instr >= n) return "the break is outside the code";
  for (const Instr& in : ins)
    if (in.op == Op::UNSUPPORTED) return fmt::format("the code contains {} (opcode {})", op_name(in.op), in.raw_opcode);
  BreakRegion r;
  r.first = call_group_start(stream, instr);
  if (r.first < first_allowed) return "the break is in the prologue of a resume function";
  std::vector<Slot> st = stack;
  for (int i = r.first; i <= instr; ++i)
    if (!apply(ins[i], st)) return fmt::format("instruction {} at the break is not resumable yet", op_name(ins[i].op));
  r.last = instr;
  if (!is_conditional_jump(ins[instr].op)) {
    // `<break> [LOAD_CONST|LOAD_FAST|op]* POP_JUMP_IF_*`: CPython also evaluates the condition and jumps.
    std::vector<Slot> ext = st;
    for (int j = instr + 1; j < n && j <= instr + 8; ++j) {
      if (is_conditional_jump(ins[j].op)) {
        if (apply(ins[j], ext)) {
          st = std::move(ext);
          r.last = j;
        }
        break;
      }
      if (!extends_region(ins[j].op) || !apply(ins[j], ext)) break;
    }
  }
  for (int i : {r.first, r.last}) {
    std::string loop = loop_around(stream, i);
    if (!loop.empty()) return loop;
  }
  const Instr& last = ins[r.last];
  if (last.op != Op::JUMP) {
    r.fallthrough_exit = static_cast<int>(r.exits.size());
    r.exits.push_back({r.last + 1, st});
  }
  for (int i = r.first; i <= r.last; ++i) {
    if (ins[i].target < 0) continue;
    if (ins[i].target >= r.first && ins[i].target <= r.last) return "a jump inside the break's region";
    r.jumps.emplace_back(i, static_cast<int>(r.exits.size()));
    r.exits.push_back({ins[i].target, st});
  }
  for (const auto& e : r.exits)
    if (e.target >= n) return "the break is at the end of the code";
  *out = std::move(r);
  return "";
}

}  // namespace fastcomp::frontend
