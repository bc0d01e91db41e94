// Names and the stable text form of the neutral instruction stream.
#include "frontend/bytecode/instr.h"

#include <fmt/format.h>

#include <algorithm>

namespace fastcomp::frontend {
namespace {

constexpr const char* kOpNames[] = {
#define FC_OP(name, doc) #name,
#include "frontend/bytecode/op.def"
#undef FC_OP
};

constexpr const char* kCompareSymbols[] = {"<", "<=", "==", "!=", ">", ">="};
constexpr const char* kBinarySymbols[] = {"+",  "&",  "//",  "<<",  "@",  "*",  "%",  "|",  "**",
                                          ">>", "-",  "/",   "^",   "+=", "&=", "//=", "<<=", "@=",
                                          "*=", "%=", "|=",  "**=", ">>=", "-=", "/=", "^="};
constexpr size_t kMaxConstText = 60;

bool is_jump(Op op) {
  switch (op) {
    case Op::JUMP:
    case Op::POP_JUMP_IF_FALSE:
    case Op::POP_JUMP_IF_TRUE:
    case Op::POP_JUMP_IF_NONE:
    case Op::POP_JUMP_IF_NOT_NONE:
    case Op::JUMP_IF_FALSE_OR_POP:
    case Op::JUMP_IF_TRUE_OR_POP:
    case Op::FOR_ITER:
    case Op::SEND:
      return true;
    default:
      return false;
  }
}

// Text of a new reference (consumed) from str() or repr(), or a placeholder when that call failed.
std::string take_text(PyObject* text /* stolen */) {
  PyRef owned = PyRef::steal(text);
  const char* utf8 = owned ? PyUnicode_AsUTF8(owned.get()) : nullptr;
  if (!utf8) {
    PyErr_Clear();
    return "<unprintable>";
  }
  return utf8;
}

// The i-th item of a tuple (borrowed) as text via `render`, or "?" when out of range.
template <typename Render>
std::string item_text(PyObject* tuple /* borrowed */, int32_t i, Render render) {
  if (!tuple || !PyTuple_Check(tuple) || i < 0 || i >= PyTuple_GET_SIZE(tuple)) return "?";
  return render(PyTuple_GET_ITEM(tuple, i));
}

// A constant (borrowed) as stable text: no addresses (code objects) and no hash order (frozensets), cut at
// kMaxConstText bytes on a UTF-8 character boundary.
std::string const_text(PyObject* value /* borrowed */) {
  std::string text;
  if (PyCode_Check(value)) {
    text = "<code " + take_text(PyObject_Str(reinterpret_cast<PyCodeObject*>(value)->co_name)) + ">";
  } else if (PyFrozenSet_Check(value)) {
    std::vector<std::string> items;
    PyRef it = PyRef::steal(PyObject_GetIter(value));
    while (PyRef item = PyRef::steal(it ? PyIter_Next(it.get()) : nullptr))
      items.push_back(take_text(PyObject_Repr(item.get())));
    PyErr_Clear();
    std::sort(items.begin(), items.end());
    text = "frozenset({";
    for (size_t i = 0; i < items.size(); ++i) text += (i ? ", " : "") + items[i];
    text += "})";
  } else {
    text = take_text(PyObject_Repr(value));
  }
  if (text.size() <= kMaxConstText) return text;
  size_t cut = kMaxConstText;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut) + "...";
}

std::string name_text(PyObject* name /* borrowed */) { return take_text(PyObject_Str(name)); }

// What an instruction's arg refers to, for the text form; empty when nothing more than the number.
std::string arg_text(const Instr& instr, PyCodeObject* code /* borrowed, may be null */) {
  if (is_jump(instr.op)) return fmt::format("to {}", instr.target);
  if (instr.op == Op::COMPARE_OP && instr.arg >= 0 && instr.arg < 6) return kCompareSymbols[instr.arg];
  if (instr.op == Op::BINARY_OP && instr.arg >= 0 && instr.arg < 26) return kBinarySymbols[instr.arg];
  if (instr.op == Op::UNSUPPORTED) return fmt::format("opcode {}", instr.raw_opcode);
  if (!code) return {};
  if (uses_local_slot(instr.op)) return item_text(code->co_localsplusnames, instr.arg, name_text);
  switch (instr.op) {
    case Op::LOAD_CONST:
    case Op::RETURN_CONST:
      return item_text(code->co_consts, instr.arg, const_text);
    case Op::LOAD_GLOBAL:
      return (instr.flags & Instr::kPushNull ? "NULL + " : "") + item_text(code->co_names, instr.arg, name_text);
    case Op::LOAD_ATTR:
    case Op::LOAD_SUPER_ATTR:
      return (instr.flags & Instr::kTwoArgSuper ? "super(cls, self) " : "") +
             std::string(instr.flags & Instr::kMethod ? "method " : "") +
             item_text(code->co_names, instr.arg, name_text);
    case Op::STORE_GLOBAL:
    case Op::LOAD_NAME:
    case Op::STORE_NAME:
    case Op::STORE_ATTR:
    case Op::DELETE_ATTR:
    case Op::IMPORT_NAME:
    case Op::IMPORT_FROM:
      return item_text(code->co_names, instr.arg, name_text);
    case Op::CALL:
      return instr.kwnames < 0 ? std::string() : "kw " + item_text(code->co_consts, instr.kwnames, const_text);
    default:
      return {};
  }
}

}  // namespace

const char* op_name(Op op) { return kOpNames[static_cast<size_t>(op)]; }

bool uses_local_slot(Op op) {
  switch (op) {
    case Op::LOAD_FAST:
    case Op::LOAD_FAST_AND_CLEAR:
    case Op::STORE_FAST:
    case Op::DELETE_FAST:
    case Op::MAKE_CELL:
    case Op::LOAD_CLOSURE:
    case Op::LOAD_DEREF:
    case Op::STORE_DEREF:
    case Op::DELETE_DEREF: return true;
    default: return false;
  }
}

int InstrStream::index_of_offset(int byte_offset) const {
  // Decoded streams list instructions in code order, so offsets ascend.
  auto it = std::lower_bound(instrs.begin(), instrs.end(), byte_offset,
                             [](const Instr& instr, int offset) { return instr.offset < offset; });
  return it != instrs.end() && it->offset == byte_offset ? static_cast<int>(it - instrs.begin()) : -1;
}

std::string InstrStream::to_string(PyCodeObject* of) const {
  PyCodeObject* co = code && PyCode_Check(code.get()) ? reinterpret_cast<PyCodeObject*>(code.get()) : of;
  std::string out;
  for (size_t i = 0; i < instrs.size(); ++i) {
    const Instr& instr = instrs[i];
    const std::string line = instr.line < 0 ? "L-" : fmt::format("L{}", instr.line);
    std::string text = arg_text(instr, co);
    fmt::format_to(std::back_inserter(out), "{:>4} {:<6} {:<21} {:>3}", i, line, op_name(instr.op), instr.arg);
    if (!text.empty()) fmt::format_to(std::back_inserter(out), " ({})", text);
    out += '\n';
  }
  if (!exception_table.empty()) out += "exception table:\n";
  for (const ExceptionEntry& e : exception_table) {
    fmt::format_to(std::back_inserter(out), "  {} to {} -> {} depth {}{}\n", e.start, e.end, e.target, e.depth,
                   e.push_lasti ? " lasti" : "");
  }
  return out;
}

}  // namespace fastcomp::frontend
