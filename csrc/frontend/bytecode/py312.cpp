// CPython 3.12: which real instruction is which neutral Op. Opcode numbers come from the interpreter (see
// opcode_table.h); this file only names them. Every opcode not listed decodes to UNSUPPORTED.
#include "cpython/version.h"
#if FC_PY_MINOR == 12
#include "frontend/bytecode/opcode_table.h"

namespace fastcomp::frontend::detail {
namespace {

using enum ArgForm;
using enum JumpDir;

// CALL_INTRINSIC_1's operands (Include/internal/pycore_intrinsics.h) that have an Op of their own.
constexpr uint8_t kIntrinsicUnaryPositive = 5;
constexpr uint8_t kIntrinsicListToTuple = 6;

constexpr OpcodeRow kRows[] = {
    {"NOP", Op::NOP},
    {"KW_NAMES", Op::NOP, KwNames},
    {"RESUME", Op::RESUME},
    {"POP_TOP", Op::POP_TOP},
    {"END_FOR", Op::END_FOR},
    {"PUSH_NULL", Op::PUSH_NULL},
    {"COPY", Op::COPY},
    {"SWAP", Op::SWAP},
    {"LOAD_CONST", Op::LOAD_CONST},
    {"RETURN_CONST", Op::RETURN_CONST},
    {"RETURN_VALUE", Op::RETURN_VALUE},
    {"LOAD_FAST", Op::LOAD_FAST},
    {"LOAD_FAST_CHECK", Op::LOAD_FAST},
    {"LOAD_FAST_AND_CLEAR", Op::LOAD_FAST_AND_CLEAR},
    {"STORE_FAST", Op::STORE_FAST},
    {"DELETE_FAST", Op::DELETE_FAST},
    {"MAKE_CELL", Op::MAKE_CELL},
    {"COPY_FREE_VARS", Op::COPY_FREE_VARS},
    {"LOAD_CLOSURE", Op::LOAD_CLOSURE},
    {"LOAD_DEREF", Op::LOAD_DEREF},
    {"STORE_DEREF", Op::STORE_DEREF},
    {"DELETE_DEREF", Op::DELETE_DEREF},
    {"LOAD_GLOBAL", Op::LOAD_GLOBAL, LowBitFlag, None, Instr::kPushNull},
    {"STORE_GLOBAL", Op::STORE_GLOBAL},
    {"LOAD_NAME", Op::LOAD_NAME},
    {"STORE_NAME", Op::STORE_NAME},
    {"LOAD_ATTR", Op::LOAD_ATTR, LowBitFlag, None, Instr::kMethod},
    {"LOAD_SUPER_ATTR", Op::LOAD_SUPER_ATTR, SuperAttr},
    {"STORE_ATTR", Op::STORE_ATTR},
    {"DELETE_ATTR", Op::DELETE_ATTR},
    {"BINARY_OP", Op::BINARY_OP},
    {"UNARY_NEGATIVE", Op::UNARY_NEGATIVE},
    {"CALL_INTRINSIC_1", Op::UNARY_POSITIVE, Fixed, None, kIntrinsicUnaryPositive},
    {"UNARY_NOT", Op::UNARY_NOT},
    {"UNARY_INVERT", Op::UNARY_INVERT},
    {"COMPARE_OP", Op::COMPARE_OP, CompareMasked},
    {"IS_OP", Op::IS_OP},
    {"CONTAINS_OP", Op::CONTAINS_OP},
    {"BINARY_SUBSCR", Op::BINARY_SUBSCR},
    {"STORE_SUBSCR", Op::STORE_SUBSCR},
    {"DELETE_SUBSCR", Op::DELETE_SUBSCR},
    {"BINARY_SLICE", Op::BINARY_SLICE},
    {"STORE_SLICE", Op::STORE_SLICE},
    {"BUILD_SLICE", Op::BUILD_SLICE},
    {"BUILD_TUPLE", Op::BUILD_TUPLE},
    {"BUILD_LIST", Op::BUILD_LIST},
    {"BUILD_SET", Op::BUILD_SET},
    {"BUILD_MAP", Op::BUILD_MAP},
    {"BUILD_CONST_KEY_MAP", Op::BUILD_CONST_KEY_MAP},
    {"BUILD_STRING", Op::BUILD_STRING},
    {"LIST_APPEND", Op::LIST_APPEND},
    {"SET_ADD", Op::SET_ADD},
    {"MAP_ADD", Op::MAP_ADD},
    {"LIST_EXTEND", Op::LIST_EXTEND},
    {"SET_UPDATE", Op::SET_UPDATE},
    {"DICT_UPDATE", Op::DICT_UPDATE},
    {"DICT_MERGE", Op::DICT_MERGE},
    {"CALL_INTRINSIC_1", Op::LIST_TO_TUPLE, Fixed, None, kIntrinsicListToTuple},
    {"UNPACK_SEQUENCE", Op::UNPACK_SEQUENCE},
    {"UNPACK_EX", Op::UNPACK_EX},
    {"FORMAT_VALUE", Op::FORMAT_VALUE},
    {"CALL", Op::CALL},
    {"CALL_FUNCTION_EX", Op::CALL_FUNCTION_EX},
    {"CALL_INTRINSIC_1", Op::CALL_INTRINSIC_1},  // after the Fixed rows of the same opcode
    {"CALL_INTRINSIC_2", Op::CALL_INTRINSIC_2},
    {"MAKE_FUNCTION", Op::MAKE_FUNCTION},
    {"JUMP_FORWARD", Op::JUMP, Plain, Forward},
    {"JUMP_BACKWARD", Op::JUMP, Plain, Backward},
    {"JUMP_BACKWARD_NO_INTERRUPT", Op::JUMP, Plain, Backward},
    {"POP_JUMP_IF_FALSE", Op::POP_JUMP_IF_FALSE, Plain, Forward},
    {"POP_JUMP_IF_TRUE", Op::POP_JUMP_IF_TRUE, Plain, Forward},
    {"POP_JUMP_IF_NONE", Op::POP_JUMP_IF_NONE, Plain, Forward},
    {"POP_JUMP_IF_NOT_NONE", Op::POP_JUMP_IF_NOT_NONE, Plain, Forward},
    {"GET_ITER", Op::GET_ITER},
    // Exhausted: jumps to its END_FOR and skips it, popping the iterator itself.
    {"FOR_ITER", Op::FOR_ITER, Plain, ForwardPastNext},
    {"GET_LEN", Op::GET_LEN},
    {"BEFORE_WITH", Op::BEFORE_WITH},
    {"PUSH_EXC_INFO", Op::PUSH_EXC_INFO},
    {"POP_EXCEPT", Op::POP_EXCEPT},
    {"CHECK_EXC_MATCH", Op::CHECK_EXC_MATCH},
    {"WITH_EXCEPT_START", Op::WITH_EXCEPT_START},
    {"RERAISE", Op::RERAISE},
    {"RAISE_VARARGS", Op::RAISE_VARARGS},
    {"LOAD_ASSERTION_ERROR", Op::LOAD_ASSERTION_ERROR},
    {"RETURN_GENERATOR", Op::RETURN_GENERATOR},
    {"YIELD_VALUE", Op::YIELD_VALUE},
    {"SEND", Op::SEND, Plain, Forward},
    {"END_SEND", Op::END_SEND},
    {"GET_YIELD_FROM_ITER", Op::GET_YIELD_FROM_ITER},
    {"IMPORT_NAME", Op::IMPORT_NAME},
    {"IMPORT_FROM", Op::IMPORT_FROM},
};

constexpr VersionSpec kSpec{12, kRows, /*merge_equal_locations=*/true};

}  // namespace

const VersionSpec& version_spec() { return kSpec; }

}  // namespace fastcomp::frontend::detail
#endif  // FC_PY_MINOR == 12
