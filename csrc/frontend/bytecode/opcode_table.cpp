// Resolves the version's rows against the running interpreter's `opcode` module, and the oparg forms.
#include "frontend/bytecode/opcode_table.h"

#include <memory>

#include "cpython/pyref.h"
#include "cpython/version.h"
#include "frontend/bytecode/decode.h"

#if FC_PY_MINOR != 11 && FC_PY_MINOR != 12
#error "fastcomp: no opcode rows for this CPython version; audit its bytecode and add a pyXY.cpp"
#endif

namespace fastcomp::frontend::detail {
namespace {

constexpr int kOpCount = static_cast<int>(Op::UNSUPPORTED) + 1;

// The COMPARISON_* bits 3.12's compiler stores under each comparison kind (Python/compile.c compare_masks),
// in CompareKind order: unordered 1, less 2, greater 4, equal 8.
constexpr int kCompareMasks[] = {2, 10, 8, 7, 4, 12};

// Returns a new reference to `name` of `module`, or throws.
PyRef attr(PyObject* module /* borrowed */, const char* name) {
  PyRef value = PyRef::steal(PyObject_GetAttrString(module, name));
  if (!value) throw_python_error(std::string("fastcomp: reading opcode.") + name);
  return value;
}

// Reads an int in [0, 255] (an opcode or a cache size) from a borrowed object, or throws.
uint8_t as_byte(PyObject* value /* borrowed */, const std::string& what) {
  long v = PyLong_Check(value) ? PyLong_AsLong(value) : -1;
  if (v < 0 || v > 255) {
    PyErr_Clear();
    throw BytecodeError("fastcomp: " + what + " is not an int in [0, 255]");
  }
  return static_cast<uint8_t>(v);
}

std::unique_ptr<OpcodeTable> build_table() {
  const VersionSpec& spec = version_spec();
  const std::string where = "the opcode module of CPython 3." + std::to_string(spec.minor);
  PyRef module = PyRef::steal(PyImport_ImportModule("opcode"));
  if (!module) throw_python_error("fastcomp: importing opcode");
  PyRef opmap = attr(module.get(), "opmap");
  PyRef cache_sizes = attr(module.get(), "_inline_cache_entries");

  auto table = std::make_unique<OpcodeTable>();
  table->by_op.resize(kOpCount);
  table->extended_arg = as_byte(attr(module.get(), "EXTENDED_ARG").get(), "opcode.EXTENDED_ARG");
  for (int opcode = 0; opcode < 256; ++opcode) {
    PyRef size = PyRef::steal(PySequence_GetItem(cache_sizes.get(), opcode));
    if (!size) throw_python_error("fastcomp: reading opcode._inline_cache_entries");
    table->caches[opcode] = as_byte(size.get(), "opcode._inline_cache_entries[" + std::to_string(opcode) + "]");
  }
  if (!PyDict_Check(opmap.get())) throw BytecodeError("fastcomp: opcode.opmap is not a dict");
  for (const OpcodeRow& row : spec.rows) {
    PyObject* number = PyDict_GetItemString(opmap.get(), row.name);  // borrowed
    if (!number) throw BytecodeError("fastcomp: " + where + " has no opcode " + row.name);
    uint8_t opcode = as_byte(number, std::string("opcode.opmap['") + row.name + "']");
    table->by_opcode[opcode].push_back({&row, opcode});
    table->by_op[static_cast<int>(row.op)].push_back({&row, opcode});
    if (row.form == ArgForm::KwNames) table->kw_names = opcode;
    if (row.form == ArgForm::Precall) table->precall = opcode;
  }

  // Every relative jump must decode through a jump row: an UNSUPPORTED jump would keep a stale distance when the
  // code around it moves. No supported version has absolute jumps.
  auto check_jumps = [&](const char* name, bool relative) {
    PyRef list = attr(module.get(), name);
    Py_ssize_t n = PySequence_Size(list.get());
    if (n < 0) throw_python_error(std::string("fastcomp: reading opcode.") + name);
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyRef item = PyRef::steal(PySequence_GetItem(list.get(), i));
      if (!item) throw_python_error(std::string("fastcomp: reading opcode.") + name);
      long opcode = PyLong_AsLong(item.get());
      if (opcode < 0 || opcode > 255) {  // pseudo-ops (3.12) and errors; only real opcodes reach co_code
        PyErr_Clear();
        continue;
      }
      bool ok = relative && !table->by_opcode[opcode].empty();
      for (const auto& r : table->by_opcode[opcode]) ok = ok && r.row->jump != JumpDir::None;
      if (!ok) throw BytecodeError("fastcomp: opcode " + std::to_string(opcode) + " of " + where +
                                   " is a jump the decoder does not know");
    }
  };
  check_jumps("hasjrel", true);
  check_jumps("hasjabs", false);
  return table;
}

}  // namespace

const OpcodeTable::Resolved* OpcodeTable::find(int opcode, int oparg) const {
  for (const Resolved& r : by_opcode[opcode])
    if (r.row->form != ArgForm::Fixed || r.row->param == oparg) return &r;
  return nullptr;
}

const OpcodeTable& opcode_table() {
  // Built under the GIL. Importing may release it, so a second thread can build too; the first result stays.
  static std::unique_ptr<OpcodeTable> table;
  if (!table) {
    auto built = build_table();
    if (!table) table = std::move(built);
  }
  return *table;
}

void decode_arg(const OpcodeRow& row, int oparg, Instr& instr) {
  instr.flags = 0;
  instr.arg = oparg;
  if (row.jump != JumpDir::None) {
    instr.arg = 0;
    return;
  }
  switch (row.form) {
    case ArgForm::Plain:
    case ArgForm::KwNames:
    case ArgForm::Precall:
      break;
    case ArgForm::AlwaysFlag:
      instr.flags = row.param;
      break;
    case ArgForm::LowBitFlag:
      instr.arg = oparg >> 1;
      instr.flags = (oparg & 1) ? row.param : 0;
      break;
    case ArgForm::SuperAttr:
      instr.arg = oparg >> 2;
      instr.flags = ((oparg & 1) ? Instr::kMethod : 0) | ((oparg & 2) ? Instr::kTwoArgSuper : 0);
      break;
    case ArgForm::CompareMasked:
      instr.arg = oparg >> 4;
      break;
    case ArgForm::Fixed:
      instr.arg = 0;
      break;
  }
}

bool can_encode(const OpcodeRow& row, const Instr& instr) {
  if (row.jump != JumpDir::None) return instr.flags == 0;
  switch (row.form) {
    case ArgForm::AlwaysFlag:
      return instr.flags == row.param;
    case ArgForm::LowBitFlag:
      return (instr.flags & ~row.param) == 0 && instr.arg >= 0;
    case ArgForm::SuperAttr:
      return (instr.flags & ~(Instr::kMethod | Instr::kTwoArgSuper)) == 0 && instr.arg >= 0;
    case ArgForm::CompareMasked:
      return instr.flags == 0 && instr.arg >= 0 && instr.arg < static_cast<int>(std::size(kCompareMasks));
    default:
      return instr.flags == 0 && instr.arg >= 0;
  }
}

int encode_arg(const OpcodeRow& row, const Instr& instr) {
  if (row.jump != JumpDir::None) return 0;
  switch (row.form) {
    case ArgForm::LowBitFlag:
      return instr.arg << 1 | ((instr.flags & row.param) ? 1 : 0);
    case ArgForm::SuperAttr:
      return instr.arg << 2 | ((instr.flags & Instr::kMethod) ? 1 : 0) |
             ((instr.flags & Instr::kTwoArgSuper) ? 2 : 0);
    case ArgForm::CompareMasked:
      return instr.arg << 4 | kCompareMasks[instr.arg];
    case ArgForm::Fixed:
      return row.param;
    default:
      return instr.arg;
  }
}

void throw_python_error(const std::string& context) {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);  // new references (each may be null)
  PyRef t = PyRef::steal(type), v = PyRef::steal(value), tb = PyRef::steal(traceback);
  std::string message = context;
  if (t) {
    message += ": ";
    message += reinterpret_cast<PyTypeObject*>(t.get())->tp_name;
  }
  if (v) {
    PyRef text = PyRef::steal(PyObject_Str(v.get()));
    const char* utf8 = text ? PyUnicode_AsUTF8(text.get()) : nullptr;
    if (utf8) message += std::string(": ") + utf8;
    PyErr_Clear();
  }
  throw BytecodeError(message);
}

}  // namespace fastcomp::frontend::detail
