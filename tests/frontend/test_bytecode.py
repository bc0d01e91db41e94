"""Bytecode decode/encode: byte-exact round trips over real code objects, agreement with `dis`, and each
normalisation the tracer relies on. Runs on CPython 3.11 and 3.12; expectations branch on sys.version_info."""
import dis
import importlib
import importlib.util
import inspect
import re
import sys
import textwrap
import types

import pytest

from fastcomp._C import _testing as T

PY312 = sys.version_info >= (3, 12)
K_METHOD, K_PUSH_NULL, K_TWO_ARG_SUPER = 1, 2, 4
COMPARE_KINDS = ("<", "<=", "==", "!=", ">", ">=")
JUMP_OPS = {"JUMP", "POP_JUMP_IF_FALSE", "POP_JUMP_IF_TRUE", "POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE",
            "JUMP_IF_FALSE_OR_POP", "JUMP_IF_TRUE_OR_POP", "FOR_ITER", "SEND"}

STDLIB_MODULES = ["json.decoder", "json.encoder", "ast", "dataclasses", "functools", "collections", "argparse",
                  "inspect", "typing", "asyncio.tasks", "re._parser", "enum", "contextlib", "pathlib"]
TORCH_MODULES = ["torch.nn.modules.linear", "torch.nn.functional", "torch.nn.modules.activation"]


# ---------------------------------------------------------------------------------------------------------
# Collecting code objects


def nested_code(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from nested_code(const)


def module_code_objects(name):
    """The module's code compiled from source (module body, class bodies, functions, lambdas, comprehensions),
    plus the live functions' code, which has run and is quickened, so co_code must be read unquickened."""
    if name.startswith("torch"):
        pytest.importorskip("torch")
    module = importlib.import_module(name)
    origin = importlib.util.find_spec(name).origin
    with open(origin, encoding="utf-8") as f:
        codes = list(nested_code(compile(f.read(), origin, "exec")))
    seen = set()
    for value in vars(module).values():
        members = vars(value).values() if isinstance(value, type) else [value]
        for member in members:
            function = inspect.unwrap(member) if callable(member) else member
            code = getattr(function, "__code__", None)
            if isinstance(code, types.CodeType) and id(code) not in seen:
                seen.add(id(code))
                codes.extend(nested_code(code))
    return codes


def compile_function(source, name="f", **env):
    namespace = dict(env)
    exec(compile(textwrap.dedent(source), "<test>", "exec"), namespace)
    return namespace[name]


def decode(fn_or_code):
    code = getattr(fn_or_code, "__code__", fn_or_code)
    return [dict(zip(("op", "arg", "target", "line", "flags", "kwnames", "offset"), t)) for t in T.decode(code)]


def ops(instrs):
    return [i["op"] for i in instrs]


def exception_entries(code):
    """(start, end, target, depth, lasti) from the stable text form."""
    text = T.decode_text(code)
    pattern = r"^  (\d+) to (\d+) -> (\d+) depth (\d+)( lasti)?$"
    return [(int(a), int(b), int(t), int(d), bool(l)) for a, b, t, d, l in re.findall(pattern, text, re.M)]


# ---------------------------------------------------------------------------------------------------------
# (a) Byte-exact round trips


@pytest.mark.parametrize("module", STDLIB_MODULES + TORCH_MODULES)
def test_roundtrip_reproduces_code_tables_exactly(module):
    codes = module_code_objects(module)
    assert len(codes) > 10
    for code in codes:
        expected = (code.co_code, code.co_exceptiontable, code.co_linetable)
        assert T.roundtrip(code) == expected, f"{module}: {code.co_qualname} (line {code.co_firstlineno})"


def canonical_code_bytes(code):
    """co_code with the opcodes that share a neutral op replaced by the one encode() picks itself."""
    canonical = {"LOAD_FAST_CHECK": "LOAD_FAST", "JUMP_BACKWARD_NO_INTERRUPT": "JUMP_BACKWARD"}
    data = bytearray(code.co_code)
    for instr in dis.get_instructions(code):
        if instr.opname in canonical:
            data[instr.offset] = dis.opmap[canonical[instr.opname]]
    return bytes(data)


@pytest.mark.parametrize("module", ["ast", "argparse", "inspect", "asyncio.tasks", "torch.nn.functional"])
def test_encoding_without_raw_opcodes_picks_the_compilers_instructions(module):
    # With every raw opcode and every KW_NAMES / PRECALL dropped, encode() chooses all instructions from the
    # neutral fields alone (as it must for code fastcomp writes) and lands on the compiler's bytes.
    for code in module_code_objects(module):
        co_code, exception_table, _ = T.roundtrip(code, canonical=True)
        assert co_code == canonical_code_bytes(code), f"{module}: {code.co_qualname}"
        assert exception_table == code.co_exceptiontable, f"{module}: {code.co_qualname}"


def test_canonically_encoded_code_runs():
    f = compile_function("""
        def f(xs, *args, key=None, **kw):
            total = 0
            for i, x in enumerate(xs):
                if x > 2 and key is not None:
                    total += sorted([x, i], key=key, reverse=True)[0]
                else:
                    total -= max(x, 0, *args, **kw)
            try:
                total //= len(xs) - 3
            except ZeroDivisionError as e:
                total = str(e).upper()
            with memoryview(b"ab") as view:
                total = total if len(view) == 2 else None
            return total, [y * 2 for y in xs if y], +total if isinstance(total, int) else total
        """)
    co_code, exception_table, line_table = T.roundtrip(f.__code__, canonical=True)
    g = types.FunctionType(f.__code__.replace(co_code=co_code, co_exceptiontable=exception_table,
                                              co_linetable=line_table), f.__globals__)
    for args in [([1, 2, 3, 4], ), ([0, 5, 1], -1), ([], ), ([3, 3, 3], 9)]:
        for key in (None, abs):
            assert g(*args, key=key) == f(*args, key=key)


# ---------------------------------------------------------------------------------------------------------
# (b) Agreement with dis, and the normalisation rules, over real code

# CPython opcodes the tracer never handles: decoded as UNSUPPORTED with the raw oparg.
UNSUPPORTED = {
    "ASYNC_GEN_WRAP", "BEFORE_ASYNC_WITH", "CHECK_EG_MATCH", "CLEANUP_THROW", "DELETE_GLOBAL", "DELETE_NAME",
    "END_ASYNC_FOR", "GET_AITER", "GET_ANEXT", "GET_AWAITABLE", "IMPORT_STAR", "INTERPRETER_EXIT",
    "LOAD_BUILD_CLASS", "LOAD_CLASSDEREF", "LOAD_FROM_DICT_OR_DEREF", "LOAD_FROM_DICT_OR_GLOBALS", "LOAD_LOCALS",
    "MATCH_CLASS", "MATCH_KEYS", "MATCH_MAPPING", "MATCH_SEQUENCE", "PREP_RERAISE_STAR", "PRINT_EXPR",
    "RESERVED", "SETUP_ANNOTATIONS",
}
RENAMED = {
    "LOAD_METHOD": "LOAD_ATTR", "PRECALL": "NOP", "KW_NAMES": "NOP", "LOAD_FAST_CHECK": "LOAD_FAST",
    "JUMP_FORWARD": "JUMP", "JUMP_BACKWARD": "JUMP", "JUMP_BACKWARD_NO_INTERRUPT": "JUMP",
}
INTRINSICS = {"INTRINSIC_UNARY_POSITIVE": "UNARY_POSITIVE", "INTRINSIC_LIST_TO_TUPLE": "LIST_TO_TUPLE"}


def expected_neutral(ins):
    """(op, arg, flags) an independent reading of the dis instruction predicts for the decoded Instr."""
    name, arg = ins.opname, ins.arg or 0
    if name in UNSUPPORTED:
        return "UNSUPPORTED", arg, 0
    if name == "LOAD_GLOBAL" or (PY312 and name == "LOAD_ATTR"):
        return name, arg >> 1, (arg & 1) * (K_PUSH_NULL if name == "LOAD_GLOBAL" else K_METHOD)
    if name == "LOAD_METHOD":
        return "LOAD_ATTR", arg, K_METHOD
    if name == "LOAD_SUPER_ATTR":
        return name, arg >> 2, (K_METHOD if arg & 1 else 0) | (K_TWO_ARG_SUPER if arg & 2 else 0)
    if name == "COMPARE_OP":
        return name, COMPARE_KINDS.index(ins.argval), 0
    if name == "CALL_INTRINSIC_1" and ins.argrepr in INTRINSICS:
        return INTRINSICS[ins.argrepr], 0, 0
    name = RENAMED.get(name, re.sub(r"^POP_JUMP_(FORWARD|BACKWARD)_IF_", "POP_JUMP_IF_", name))
    if name in JUMP_OPS:
        return name, 0, 0
    return name, arg, 0


def check_against_dis(code):
    where = f"{code.co_qualname} (line {code.co_firstlineno})"
    every = list(dis.get_instructions(code))
    real = [i for i in every if i.opname != "EXTENDED_ARG"]
    ours = decode(code)
    assert len(ours) == len(real), where
    # A jump lands on the first EXTENDED_ARG of its target; the Instr's offset is its opcode's.
    opcode_offset = {}
    for i in reversed(every):
        opcode_offset[i.offset] = i.offset if i.opname != "EXTENDED_ARG" else next_real
        next_real = opcode_offset[i.offset]
    index_of = {i["offset"]: n for n, i in enumerate(ours)}
    kwnames = -1
    for n, (mine, ins) in enumerate(zip(ours, real)):
        at = f"{where}: instruction {n} {ins.opname} at {ins.offset}"
        assert mine["offset"] == ins.offset, at
        lineno = ins.positions.lineno if ins.positions else None
        assert mine["line"] == (-1 if lineno is None else lineno), at
        assert (mine["op"], mine["arg"], mine["flags"]) == expected_neutral(ins), at
        if ins.opname == "KW_NAMES":
            kwnames = ins.arg
        if ins.opname == "CALL":
            assert mine["kwnames"] == kwnames, at
            kwnames = -1
        else:
            assert mine["kwnames"] == -1, at
        if ins.opcode not in dis.hasjrel:
            assert mine["target"] == -1, at
            continue
        encoded = index_of[opcode_offset[ins.argval]]
        if PY312 and ins.opname == "FOR_ITER":  # resumes after the END_FOR that dis names
            assert ours[encoded]["op"] == "END_FOR", at
            encoded += 1
        assert mine["target"] == encoded, at


@pytest.mark.parametrize("module", STDLIB_MODULES + TORCH_MODULES)
def test_decode_agrees_with_dis(module):
    for code in module_code_objects(module):
        check_against_dis(code)


# ---------------------------------------------------------------------------------------------------------
# (c) Each normalisation on small functions


def test_text_form_is_stable():
    f = compile_function("""
        def f(x, y):
            return x + y
        """)
    assert T.decode_text(f.__code__).splitlines() == [
        "   0 L2     RESUME                  0",
        "   1 L3     LOAD_FAST               0 (x)",
        "   2 L3     LOAD_FAST               1 (y)",
        "   3 L3     BINARY_OP               0 (+)",
        "   4 L3     RETURN_VALUE            0",
    ]


def test_method_call_is_load_attr_with_method_flag():
    instrs = decode(lambda o: o.scale(2))
    load = next(i for i in instrs if i["op"] == "LOAD_ATTR")
    assert load["flags"] == K_METHOD and (lambda o: o.scale(2)).__code__.co_names[load["arg"]] == "scale"
    call = next(i for i in instrs if i["op"] == "CALL")
    assert call["arg"] == 1 and call["kwnames"] == -1
    assert "RETURN_VALUE" in ops(instrs) and "UNSUPPORTED" not in ops(instrs)


def test_plain_attribute_load_has_no_flags():
    f = lambda o: o.weight  # noqa: E731
    [load] = [i for i in decode(f) if i["op"] == "LOAD_ATTR"]
    assert load["flags"] == 0 and f.__code__.co_names[load["arg"]] == "weight"


def test_keyword_call_counts_all_arguments_and_carries_kwnames():
    f = lambda g, a: g(a, 1, key=a, reverse=True)  # noqa: E731
    instrs = decode(f)
    [call] = [i for i in instrs if i["op"] == "CALL"]
    assert call["arg"] == 4
    assert f.__code__.co_consts[call["kwnames"]] == ("key", "reverse")
    # 3.11's KW_NAMES and PRECALL, 3.12's KW_NAMES: NOPs right before the CALL.
    index = instrs.index(call)
    assert ops(instrs[index - (2 if not PY312 else 1):index]) == ["NOP"] * (2 if not PY312 else 1)


def test_global_load_pushes_null_only_for_calls():
    f = compile_function("""
        def f(x):
            print(x)
            return LIMIT
        """)
    loads = [i for i in decode(f) if i["op"] == "LOAD_GLOBAL"]
    names = f.__code__.co_names
    assert [(names[i["arg"]], i["flags"]) for i in loads] == [("print", K_PUSH_NULL), ("LIMIT", 0)]


def test_comparisons_decode_to_compare_kind():
    f = lambda a, b: (a < b, a <= b, a == b, a != b, a > b, a >= b)  # noqa: E731
    assert [i["arg"] for i in decode(f) if i["op"] == "COMPARE_OP"] == [0, 1, 2, 3, 4, 5]


def test_binary_op_keeps_nb_numbering():
    f = lambda a, b: (a + b, a @ b, a - b, a / b)  # noqa: E731
    assert [i["arg"] for i in decode(f) if i["op"] == "BINARY_OP"] == [0, 4, 10, 11]


def test_for_loop_target_is_where_execution_continues_when_exhausted():
    f = compile_function("""
        def f(xs):
            total = 0
            for x in xs:
                total += x
            return total
        """)
    instrs = decode(f)
    loop = next(i for i in instrs if i["op"] == "FOR_ITER")
    after = instrs[loop["target"]]
    assert (after["op"], after["line"]) == ("LOAD_FAST", 6)  # `return total`
    if PY312:
        assert instrs[loop["target"] - 1]["op"] == "END_FOR"
    back = next(i for i in instrs if i["op"] == "JUMP")
    assert back["target"] == instrs.index(loop)


def test_conditional_jumps_have_instruction_targets():
    f = compile_function("""
        def f(a, b):
            if a is None:
                return 1
            if not b:
                return 2
            return 3
        """)
    instrs = decode(f)
    jumps = [i for i in instrs if i["op"].startswith("POP_JUMP_IF")]
    assert [j["op"] for j in jumps] == ["POP_JUMP_IF_NOT_NONE", "POP_JUMP_IF_TRUE"]
    assert [instrs[j["target"]]["line"] for j in jumps] == [5, 7]


def test_with_block_has_an_exception_table():
    f = compile_function("""
        def f(lock, x):
            with lock:
                x = x + 1
            return x
        """)
    instrs = decode(f)
    entries = exception_entries(f.__code__)
    assert entries
    body = next(n for n, i in enumerate(instrs) if i["op"] == "BINARY_OP")
    start, end, target, depth, lasti = next(e for e in entries if e[0] <= body < e[1])
    assert instrs[target]["op"] == "PUSH_EXC_INFO" and lasti
    assert "BEFORE_WITH" in ops(instrs) and "WITH_EXCEPT_START" in ops(instrs)
    assert T.roundtrip(f.__code__) == (f.__code__.co_code, f.__code__.co_exceptiontable, f.__code__.co_linetable)


def test_try_except_handler_and_cleanup_lines():
    f = compile_function("""
        def f(x):
            try:
                return 1 / x
            except ZeroDivisionError:
                return 0
        """)
    instrs = decode(f)
    handlers = {e[2] for e in exception_entries(f.__code__)}
    assert any(instrs[t]["op"] == "PUSH_EXC_INFO" for t in handlers)
    assert "CHECK_EXC_MATCH" in ops(instrs)
    assert any(i["line"] == -1 for i in instrs)  # the compiler's cleanup handler has no line


def test_list_comprehension():
    f = lambda xs: [x * 2 for x in xs if x]  # noqa: E731
    instrs = decode(f)
    if PY312:  # inlined (PEP 709)
        assert "LOAD_FAST_AND_CLEAR" in ops(instrs) and "LIST_APPEND" in ops(instrs)
    else:
        inner = next(c for c in f.__code__.co_consts if isinstance(c, types.CodeType))
        assert "MAKE_FUNCTION" in ops(instrs) and "LIST_APPEND" in ops(decode(inner))
    for code in nested_code(f.__code__):
        assert T.roundtrip(code) == (code.co_code, code.co_exceptiontable, code.co_linetable)


def test_star_args_calls():
    one = decode(lambda f, a, k: f(*a, **k))
    assert [i["arg"] for i in one if i["op"] == "CALL_FUNCTION_EX"] == [1]
    two = decode(lambda f, a, b: f(1, *a, *b))
    assert "LIST_TO_TUPLE" in ops(two) and "CALL_INTRINSIC_1" not in ops(two)
    assert [i["arg"] for i in two if i["op"] == "CALL_FUNCTION_EX"] == [0]


def test_unary_positive():
    assert "UNARY_POSITIVE" in ops(decode(lambda x: +x))


def test_possibly_unbound_local_is_load_fast():
    f = compile_function("""
        def f(c):
            if c:
                x = 1
            del c
            return x
        """)
    assert "LOAD_FAST" in ops(decode(f)) and "UNSUPPORTED" not in ops(decode(f))
    if PY312:
        assert "LOAD_FAST_CHECK" in {i.opname for i in dis.get_instructions(f)}


def test_return_of_constant():
    expected = ["RESUME", "RETURN_CONST"] if PY312 else ["RESUME", "LOAD_CONST", "RETURN_VALUE"]
    assert ops(decode(lambda: None)) == expected


@pytest.mark.skipif(not PY312, reason="LOAD_SUPER_ATTR is new in 3.12")
def test_super_attribute_flags():
    class A:
        def m(self):
            return super().m(), super().x, super(A, self).m(), super(A, self).x

    loads = [i for i in decode(A.m) if i["op"] == "LOAD_SUPER_ATTR"]
    names = A.m.__code__.co_names
    assert [(names[i["arg"]], i["flags"]) for i in loads] == [
        ("m", K_METHOD), ("x", 0), ("m", K_METHOD | K_TWO_ARG_SUPER), ("x", K_TWO_ARG_SUPER)]


def test_untraceable_instructions_are_unsupported_and_round_trip():
    source = """
        async def f(xs):
            async with xs as y:
                await y
        class C:
            a: int = 1
        def g(p):
            match p:
                case [a, b]:
                    return a
                case {"k": v}:
                    return v
        """
    module = compile(textwrap.dedent(source), "<test>", "exec")
    unsupported = 0
    for code in nested_code(module):
        instrs = decode(code)
        unsupported += ops(instrs).count("UNSUPPORTED")
        assert T.roundtrip(code) == (code.co_code, code.co_exceptiontable, code.co_linetable)
        check_against_dis(code)
    assert unsupported >= 5


def test_long_jumps_and_many_constants_use_extended_arg():
    body = "".join(f"        x = x + {i}\n" for i in range(300))
    f = compile_function("def f(x):\n    while x:\n" + body + "    return x\n")
    assert "EXTENDED_ARG" in {i.opname for i in dis.get_instructions(f)}
    instrs = decode(f)
    assert len({i["arg"] for i in instrs if i["op"] == "LOAD_CONST"}) == 300
    check_against_dis(f.__code__)
    code = f.__code__
    assert T.roundtrip(code) == (code.co_code, code.co_exceptiontable, code.co_linetable)
    assert T.roundtrip(code, canonical=True)[0] == canonical_code_bytes(code)


def test_decode_rejects_non_code():
    with pytest.raises(TypeError, match="expected a code object"):
        T.decode(len)


def test_malformed_tables_raise_clear_errors():
    code = (lambda x: x).__code__
    with pytest.raises(RuntimeError, match="truncated exception table"):
        T.decode(code.replace(co_exceptiontable=b"\x82"))
    with pytest.raises(RuntimeError, match="location table entry without its start bit"):
        T.decode(code.replace(co_linetable=b"\x01"))
