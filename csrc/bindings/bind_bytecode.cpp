// _C._testing entry points for the bytecode stage: decode, its text form and the decode -> encode round trip.
#include "bindings/bind.h"
#include "frontend/bytecode/decode.h"
#include "frontend/bytecode/opcode_table.h"

namespace fastcomp::bindings {
namespace {

namespace fe = fastcomp::frontend;

PyCodeObject* as_code(py::handle obj) {  // borrowed
  if (!PyCode_Check(obj.ptr()))
    throw py::type_error(std::string("expected a code object, got ") + Py_TYPE(obj.ptr())->tp_name);
  return reinterpret_cast<PyCodeObject*>(obj.ptr());
}

// The stream as fastcomp would build it by hand: no raw opcodes, and no KW_NAMES / PRECALL NOPs (encode()
// puts them back before each CALL), so encoding it exercises the encoder's own choices.
fe::InstrStream forget_raw(fe::InstrStream stream) {
  const auto& table = fe::detail::opcode_table();
  std::vector<int32_t> new_index;
  std::vector<fe::Instr> kept;
  for (fe::Instr& instr : stream.instrs) {
    new_index.push_back(static_cast<int32_t>(kept.size()));
    const auto* row = table.find(instr.raw_opcode, instr.raw_arg);
    if (row && (row->row->form == fe::detail::ArgForm::KwNames || row->row->form == fe::detail::ArgForm::Precall))
      continue;
    if (instr.op != fe::Op::UNSUPPORTED) {
      instr.raw_opcode = 0;
      instr.raw_arg = 0;
    }
    kept.push_back(instr);
  }
  new_index.push_back(static_cast<int32_t>(kept.size()));
  for (fe::Instr& instr : kept)
    if (instr.target >= 0) instr.target = new_index[instr.target];
  for (fe::ExceptionEntry& e : stream.exception_table) {
    e.start = new_index[e.start];
    e.end = new_index[e.end];
    e.target = new_index[e.target];
  }
  stream.instrs = std::move(kept);
  return stream;
}

}  // namespace

void bind_bytecode(py::module_& m) {
  m.def(
      "decode",
      [](py::handle code) {
        fe::InstrStream stream = fe::decode(as_code(code));
        py::list out;
        for (const fe::Instr& i : stream.instrs)
          out.append(py::make_tuple(fe::op_name(i.op), i.arg, i.target, i.line, i.flags, i.kwnames, i.offset));
        return out;
      },
      py::arg("code"),
      "Decoded instructions of a code object: [(opname, arg, target, line, flags, kwnames, offset)].");
  m.def(
      "decode_text", [](py::handle code) { return fe::decode(as_code(code)).to_string(); }, py::arg("code"),
      "InstrStream::to_string() of the decoded code object.");
  m.def(
      "roundtrip",
      [](py::handle code, bool canonical) {
        fe::InstrStream stream = fe::decode(as_code(code));
        fe::EncodedCode encoded = fe::encode(canonical ? forget_raw(std::move(stream)) : stream);
        return py::make_tuple(py::bytes(encoded.co_code), py::bytes(encoded.exception_table),
                              py::bytes(encoded.line_table));
      },
      py::arg("code"), py::kw_only(), py::arg("canonical") = false,
      "(co_code, co_exceptiontable, co_linetable) of encode(decode(code)). canonical=True first drops raw "
      "opcodes and the NOPs that prepare a CALL, so encode() picks every opcode itself.");
}

}  // namespace fastcomp::bindings
