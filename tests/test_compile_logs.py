"""FASTCOMP_LOGS / set_logs topics carry what the compiler decided: recompiles, guards, graphs, breaks."""
import logging

import pytest
import torch

import fastcomp


@pytest.fixture
def logs(caplog):
    caplog.set_level(logging.DEBUG, logger="fastcomp")
    yield caplog
    fastcomp.set_logs()


def messages(caplog, topic):
    return [r.getMessage() for r in caplog.records if r.name == f"fastcomp.{topic}"]


def f(x):
    return torch.relu(x) * 2


def test_recompiles_topic_logs_dynamo_style_reason(logs):
    fastcomp.set_logs(recompiles=True)
    compiled = fastcomp.compile(f)
    compiled(torch.randn(8))
    compiled(torch.randn(8))
    assert messages(logs, "recompiles") == []
    compiled(torch.randn(16))
    msg, decision = messages(logs, "recompiles")
    assert msg.startswith(f"Recompiling function f in {__file__}:{f.__code__.co_firstlineno}")
    assert "triggered by the following guard failure(s):" in msg
    assert "- " in msg and "/0: tensor 'L['x']' size mismatch at index 0. expected 8, actual 16" in msg
    # dynamic=None: the recompile traces that dimension as a symbol, and says so.
    assert decision == "dimension 0 of L['x'] became dynamic after size 8 → 16"


def test_guards_and_graph_topics_print_each_new_entry(logs):
    fastcomp.set_logs(guards=True, graph=True)
    fastcomp.compile(f)(torch.randn(4))
    (guards,) = messages(logs, "guards")
    assert "TENSOR_MATCH: L['x'] is Tensor f32[4] cpu" in guards
    (graph,) = messages(logs, "graph")
    assert "torch.relu(%0)" in graph and "operator.mul(%1, 2)" in graph


def test_disabled_topics_emit_nothing(logs):
    compiled = fastcomp.compile(f)
    compiled(torch.randn(2))
    compiled(torch.randn(3))
    assert [r for r in logs.records if r.name.startswith("fastcomp.") and r.levelno < logging.WARNING] == []


def test_graph_breaks_topic_names_the_user_line(logs):
    def g(x):
        return x.sum().item()

    fastcomp.set_logs(graph_breaks=True)
    fastcomp.compile(g)(torch.randn(3))
    (msg,) = messages(logs, "graph_breaks")
    assert "GB002" in msg and "return x.sum().item()" in msg and f"{__file__}:{g.__code__.co_firstlineno + 1}" in msg


def two_breaks(x):
    y = x + 1
    print("first")
    y = y * 2
    print("second")
    return y - 1


def resume_offsets(fn):
    """Byte offsets where fn's resume functions start: after each print call returns (CALL, then POP_TOP), which
    differ between CPython versions."""
    import dis

    instrs = list(dis.get_instructions(fn))
    calls = [i for i, ins in enumerate(instrs) if ins.opname in ("CALL", "PRECALL") and instrs[i + 1].opname == "POP_TOP"]
    return [instrs[i + 1].offset for i in calls]


def line_of(fn, text):
    """The line number of the first line of `fn`'s source containing `text`."""
    import inspect

    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def test_bytecode_topic_logs_original_and_generated_code(logs, capsys):
    fastcomp.set_logs(bytecode=True)
    fastcomp.compile(two_breaks)(torch.randn(4))
    heads = [m.split("\n", 1)[0] for m in messages(logs, "bytecode")]
    where = f"{__file__} line {two_breaks.__code__.co_firstlineno}"
    print_1, print_2 = line_of(two_breaks, '"first"'), line_of(two_breaks, '"second"')
    at_1, at_2 = resume_offsets(two_breaks)
    assert heads == [
        f"ORIGINAL BYTECODE two_breaks {where}",
        f"MODIFIED BYTECODE two_breaks.__resume_at_{at_1} {where}",
        f"MODIFIED BYTECODE two_breaks (break code at line {print_1}) {where}",
        f"MODIFIED BYTECODE two_breaks.__resume_at_{at_2} {where}",
        f"MODIFIED BYTECODE two_breaks (break code at line {print_2}) {where}",
    ]
    original = messages(logs, "bytecode")[0]
    assert f"L{print_1}    LOAD_GLOBAL" in original and "(NULL + print)" in original and "RETURN_VALUE" in original


def test_debug_level_gives_compile_stages_and_no_line_twice(logs, capsys):
    fastcomp.set_logs(fastcomp=logging.DEBUG)
    compiled = fastcomp.compile(two_breaks)
    compiled(torch.randn(4))
    compiled(torch.randn(8))  # a recompile whose dimension 0 becomes dynamic, traced twice (up to each break)
    debug = [r.getMessage() for r in logs.records if r.name == "fastcomp.compile" and r.levelno == logging.DEBUG]
    where = f"({__file__}:{two_breaks.__code__.co_firstlineno})"
    assert debug[0] == f"compiling two_breaks {where} with mode=default backend=default fullgraph=false dynamic=None"
    assert debug[1].startswith("traced two_breaks in ") and debug[1].endswith(
        f"ms: 2 nodes, 5 guards, stopped at {__file__}:{line_of(two_breaks, 'first')} (print() inside a compiled function)")
    assert any(m.startswith("planned the graph break of two_breaks in ") for m in debug)
    assert any(m.startswith("built the executable of two_breaks in ") for m in debug)
    # Each frame's decisions once (two_breaks, then its two resume functions), though each frame was traced twice.
    assert messages(logs, "dynamic") == [
        "dimension 0 of L['x'] became dynamic after size 4 → 8", "dimension 0 of L['x'] is dynamic: s0 (size 8 while tracing)",
        *["dimension 0 of L['y'] became dynamic after size 4 → 8", "dimension 0 of L['y'] is dynamic: s0 (size 8 while tracing)"] * 2]


def test_break_in_a_resume_function_lists_no_earlier_break_as_its_caller(capsys):
    out = fastcomp.explain(two_breaks)(torch.randn(4))
    assert [b.user_stack for b in out.break_reasons] == [
        [(f"{__file__}:{line_of(two_breaks, 'first')}", 'print("first")')],
        [(f"{__file__}:{line_of(two_breaks, 'second')}", 'print("second")')],
    ]


def test_recompile_of_a_resume_function_is_logged_under_its_own_name(logs, capsys):
    fastcomp.set_logs(recompiles=True)
    compiled = fastcomp.compile(two_breaks, dynamic=False)
    compiled(torch.randn(4))
    compiled(torch.randn(8))
    heads = [m.split("\n", 1)[0] for m in messages(logs, "recompiles")]
    where = f"{__file__}:{two_breaks.__code__.co_firstlineno}"
    at_1, at_2 = resume_offsets(two_breaks)
    assert heads == [f"Recompiling function two_breaks in {where}",
                     f"Recompiling function two_breaks.__resume_at_{at_1} in {where}",
                     f"Recompiling function two_breaks.__resume_at_{at_2} in {where}"]


def helper_that_prints(x):
    print("hello")
    return x


def calls_helper(x):
    y = helper_that_prints(x + 1)
    return y * 2


def test_fullgraph_error_shows_the_user_stack_outermost_first():
    with pytest.raises(fastcomp.Unsupported) as info:
        fastcomp.compile(calls_helper, fullgraph=True)(torch.randn(2))
    msg = str(info.value)
    assert (f'User code traceback (outermost first):\n'
            f'  File "{__file__}", line {line_of(calls_helper, "helper_that_prints(")}\n'
            f'    y = helper_that_prints(x + 1)\n'
            f'  File "{__file__}", line {line_of(helper_that_prints, "print(")}\n'
            f'    print("hello")\n'
            f'  hint: ') in msg, msg
