import warnings
"""Graph breaks: the graph so far runs, CPython runs what cannot be captured, and capture resumes after it.

Every test compares with eager on fresh random inputs and checks exact graph and break counts. A break is
counted once, by the frame whose own code holds it (a break inside a helper also ends the caller's graph
before the call, but it is one break); graphs are counted when they hold at least one op.
"""
import gc
import logging
import sys

import numpy as np
import pytest
import torch

import fastcomp
from fastcomp.testing import CompileCounter


def run(fn, *args, compiled=None, calls=3, make_args=None, steady=True):
    """Runs compiled and eager `calls` times on fresh inputs; returns the counter of the first call."""
    compiled = compiled or fastcomp.compile(fn)
    first = None
    for i in range(calls):
        inputs = make_args() if make_args else args
        eager_inputs = [a.clone() if isinstance(a, torch.Tensor) else a for a in inputs]
        with CompileCounter() as cc:
            got = compiled(*inputs)
        expected = fn(*eager_inputs)
        torch.testing.assert_close(got, expected)
        for a, b in zip(inputs, eager_inputs):
            if isinstance(a, torch.Tensor):
                torch.testing.assert_close(a, b)
        if i == 0:
            first = cc
        elif steady:
            assert cc.frame_count == 0, cc.records  # later calls reuse the transformed code and resume functions
    return first


def counts(cc):
    return cc.graph_count, cc.break_count


def test_print_between_tensor_ops_breaks_once_and_prints_the_same(capsys):
    def f(x):
        y = x.sin() + 1
        print("shape", y.shape)
        return y * 2

    cc = run(f, make_args=lambda: (torch.randn(4, 3),))
    assert counts(cc) == (2, 1)
    assert capsys.readouterr().out == "shape torch.Size([4, 3])\n" * 6


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_branch_on_item_resumes_in_the_branch_taken(sign):
    def f(x):
        y = x.abs() * sign
        if y.mean().item() > 0:
            return y + 1
        return y - 1

    cc = run(f, make_args=lambda: (torch.randn(8),))
    assert counts(cc) == (2, 1)
    (r,) = [r for r in cc.records if r["breaks"]]
    assert r["break_code"] == "GB002" and r["source_line"] == "if y.mean().item() > 0:"


def test_both_branches_of_item_condition_are_compiled_once_each():
    def f(x):
        if x.mean().item() > 0:
            return x * 2
        return x * 3

    compiled = fastcomp.compile(f)
    pos, neg = torch.rand(5) + 0.1, -torch.rand(5) - 0.1
    with CompileCounter() as cc:
        for x in (pos, neg, pos * 2, neg * 2):
            torch.testing.assert_close(compiled(x), f(x))
    # the prefix, then one resume function per branch: no recompiles for new values
    assert cc.frame_count == 3 and counts(cc) == (3, 1)


def test_branch_on_tensor_condition_breaks_there():
    def f(x):
        y = x * 2
        if y.sum() > 0:
            y = y + 10
        else:
            y = y - 10
        return y.cos()

    compiled = fastcomp.compile(f)
    with CompileCounter() as cc:
        for x in (torch.rand(6), -torch.rand(6), torch.rand(6), -torch.rand(6)):
            torch.testing.assert_close(compiled(x), f(x))
    # the prefix graph, and the code after the branch once per branch
    assert cc.frame_count == 3 and counts(cc) == (3, 1)
    assert [r["break_code"] for r in cc.records if r["breaks"]] == ["GB001"]


def test_item_bool_and_int_return_real_python_values():
    def f(x):
        a = x.sum().item()
        b = bool(x.max() > 100)
        n = int(x.numel() + x.abs().argmax())
        return x * a, b, n, type(a), type(b), type(n)

    x = torch.randn(5)
    got = fastcomp.compile(f)(x)
    exp = f(x)
    torch.testing.assert_close(got[0], exp[0])
    assert got[1:] == exp[1:] and got[3:] == (float, bool, int)


def test_numpy_round_trip():
    def f(x):
        y = (x * 2).numpy()
        z = torch.from_numpy(np.cos(y))
        return z + x

    cc = run(f, make_args=lambda: (torch.randn(4),))
    # .numpy(), np.cos and torch.from_numpy of an array from the frame each run in CPython
    assert counts(cc) == (2, 3)
    assert [r["break_code"] for r in cc.records if r["breaks"]] == ["GB002", "GB009", "GB007"]


SIDE_CHANNEL = []


@fastcomp.disable
def eager_side_channel(t):
    SIDE_CHANNEL.append(float(t.detach().sum()))
    return 0.5


class DisabledInForward(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 8)
        self.fc2 = torch.nn.Linear(8, 4)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        scale = eager_side_channel(h)
        return self.fc2(h) * scale


def test_disabled_function_in_the_middle_of_forward():
    m = DisabledInForward()
    compiled = fastcomp.compile(m)
    SIDE_CHANNEL.clear()
    with CompileCounter() as cc:
        for _ in range(3):
            x = torch.randn(2, 8)
            torch.testing.assert_close(compiled(x), m(x))
    assert counts(cc) == (2, 1) and cc.frame_count == 2
    assert [r["break_code"] for r in cc.records if r["breaks"]] == ["GB006"]
    assert len(SIDE_CHANNEL) == 6 and SIDE_CHANNEL[0] == SIDE_CHANNEL[1]


def helper_two(x):
    x = x + 1
    print("helper_two", x.shape)
    return x * 3


def helper_one(x):
    return helper_two(x.cos()) - 1


def test_break_inside_a_helper_two_levels_deep(capsys):
    def f(x):
        return helper_one(x.sin()) * 2

    cc = run(f, make_args=lambda: (torch.randn(3),))
    # f, helper_one and helper_two each end a graph before the break and resume after it: 6 graphs, 1 break
    assert counts(cc) == (6, 1)
    assert [r["name"] for r in cc.records] == ["test_break_inside_a_helper_two_levels_deep.<locals>.f", "helper_one",
                                               "helper_two", *(r["name"] for r in cc.records[3:])]
    (r,) = [r for r in cc.records if r["breaks"]]
    stack = [loc for loc, _ in r["user_stack"]]
    assert len(stack) == 3 and stack[-1].endswith(f":{helper_two.__code__.co_firstlineno + 2}")
    assert capsys.readouterr().out.count("helper_two") == 6


class PrintingLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 6)

    def forward(self, x):
        y = torch.tanh(self.fc(x))
        print("layer", tuple(y.shape))
        return y + x


class LayerStack(torch.nn.Module):
    def __init__(self, n=3):
        super().__init__()
        self.layers = torch.nn.ModuleList(PrintingLayer() for _ in range(n))

    def forward(self, x):
        x = x * 2
        for layer in self.layers:
            x = layer(x)
        return x.sum(-1)


def test_break_inside_a_loop_over_a_module_list(capsys):
    m = LayerStack()
    compiled = fastcomp.compile(m)
    x = torch.randn(2, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing runs eagerly as a whole
        with CompileCounter() as cc:
            got = compiled(x)
    torch.testing.assert_close(got, m(x))
    # The graph before the loop (x * 2) runs, then CPython runs the rest of the frame: the loop calls the layers,
    # whose forward is a graph before its print and a resume function after it. The three instances share their
    # compiled versions: one for the first layer's input (no grad), one for the others' (requires grad).
    (outer,) = [r for r in cc.records if r["name"] == "LayerStack.forward"]
    assert outer["graphs"] == 1 and "inside a loop" in outer["rest_in_cpython"]
    assert [r["name"] for r in cc.records].count("PrintingLayer.forward") == 2
    assert counts(cc) == (5, 2)
    assert capsys.readouterr().out.count("layer") == 6
    with CompileCounter() as cc:
        x = torch.randn(2, 6)
        torch.testing.assert_close(compiled(x), m(x))
    assert cc.frame_count == 0


def test_break_inside_no_grad_block_keeps_grad_mode():
    def f(x):
        y = x * 2
        with torch.no_grad():
            z = y + 1
            print("grad inside:", torch.is_grad_enabled())
            w = z * 3
        return w + y, torch.is_grad_enabled(), w.requires_grad

    compiled = fastcomp.compile(f)
    with CompileCounter() as cc:
        for _ in range(2):
            x = torch.randn(3, requires_grad=True)
            got, exp = compiled(x), f(x)
            torch.testing.assert_close(got[0], exp[0])
            assert got[1:] == exp[1:] == (True, False)
            assert got[0].requires_grad and torch.is_grad_enabled()
            got[0].sum().backward()
    assert counts(cc) == (2, 1)


def test_exception_inside_no_grad_after_break_restores_grad_mode():
    def f(x):
        with torch.no_grad():
            y = x + 1
            print("about to fail")
            raise KeyError("inside")
        return y

    with pytest.raises(KeyError, match="inside"):
        fastcomp.compile(f)(torch.randn(2))
    assert torch.is_grad_enabled()


def test_mutations_before_a_break_are_seen_after_it():
    def f(x, items, state):
        items.append(x.sum())
        x.mul_(2)
        state["before"] = 1
        local = [x + 1]
        print("mutated")
        local.append(x * 3)
        return local[0] + local[1] + len(items) + state["before"]

    def make():
        return torch.randn(4), [], {}

    compiled = fastcomp.compile(f)
    for _ in range(3):
        x, items, state = make()
        ex, eitems, estate = x.clone(), [], {}
        torch.testing.assert_close(compiled(x, items, state), f(ex, eitems, estate))
        torch.testing.assert_close(x, ex)
        assert len(items) == 1 and state == estate == {"before": 1}


def test_attribute_mutation_before_a_break_is_seen_after_it():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.calls = 0

        def forward(self, x):
            self.calls = self.calls + 1
            y = x.relu()
            print("calls", self.calls)
            return y * self.calls

    m, e = M(), M()
    compiled = fastcomp.compile(m)
    for _ in range(3):
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x), e(x))
    assert m.calls == e.calls == 3


def raising_helper(x):
    raise RuntimeError(f"bad value {x.shape[0]}")


def test_exception_after_a_break_propagates_with_the_user_traceback():
    def f(x):
        y = x + 1
        print("before")
        return raising_helper(y)

    with pytest.raises(RuntimeError, match="bad value 3") as info:
        fastcomp.compile(f)(torch.randn(3))
    names = [entry.name for entry in info.traceback]
    assert names[-1] == "raising_helper" and "f" in names
    assert any(entry.lineno + 1 == f.__code__.co_firstlineno + 3 for entry in info.traceback)


def test_fullgraph_raises_at_the_first_break_with_location_and_hint():
    def f(x):
        y = x + 1
        print(y)
        return y

    with pytest.raises(fastcomp.Unsupported) as info:
        fastcomp.compile(f, fullgraph=True)(torch.randn(2))
    msg = str(info.value)
    assert "GB004" in msg and f'test_graph_breaks.py", line {f.__code__.co_firstlineno + 2}\n    print(y)\n' in msg
    assert "hint:" in msg


def test_free_variables_and_keyword_calls_survive_a_break():
    scale = torch.tensor(3.0)

    def f(x, *, bias=1.0):
        y = torch.add(x, scale, alpha=2)
        print(end="")
        return torch.mul(y, scale) + bias

    run(lambda x: f(x, bias=0.5), make_args=lambda: (torch.randn(3),))


def test_explain_counts_breaks_not_graphs_minus_one_and_reports_in_program_order():
    def f(x):
        return helper_one(x.sin()) * 2

    out = fastcomp.explain(f)(torch.randn(3))
    assert out.graph_count == 6 and out.graph_break_count == 1
    (b,) = out.break_reasons
    assert b.code == "GB004" and "print" in b.reason and b.source_line == 'print("helper_two", x.shape)'
    assert [line for _, line in b.user_stack] == ["return helper_one(x.sin()) * 2",
                                                  "return helper_two(x.cos()) - 1",
                                                  'print("helper_two", x.shape)']
    assert out.order == [("graph", 0), ("graph", 1), ("graph", 2), ("break", 0), ("graph", 3), ("graph", 4),
                         ("graph", 5)]
    text = str(out)
    assert text.index("Graph 3 ") < text.index("Break Reason 1") < text.index("Graph 4 ")
    assert len(out.ops_per_graph) == 6 and all(out.ops_per_graph)


def test_graph_breaks_log_names_the_user_line_once_per_location(caplog):
    def f(x):
        y = x * 2
        print("logged")
        return y

    fastcomp.set_logs(graph_breaks=True)
    try:
        with caplog.at_level(logging.INFO, logger="fastcomp.graph_breaks"):
            compiled = fastcomp.compile(f)
            compiled(torch.randn(2))
            compiled(torch.randn(3))  # recompiles, same break location: not logged again
    finally:
        fastcomp.set_logs()
    msgs = [r.getMessage() for r in caplog.records if r.name == "fastcomp.graph_breaks"]
    assert len(msgs) == 1
    assert f"Graph break in user code at {__file__}:{f.__code__.co_firstlineno + 2}" in msgs[0]
    assert 'print("logged")' in msgs[0] and "Hint:" in msgs[0] and "Explanation:" in msgs[0]


def test_no_reference_leaks_over_many_calls_with_two_breaks():
    def f(x):
        y = x + 1
        print(end="")
        z = y * 2
        print(end="")
        return z - x

    compiled = fastcomp.compile(f)
    x = torch.randn(4)
    out = compiled(x)
    for _ in range(200):
        compiled(x)
    gc.collect()
    code = f.__code__
    before = (sys.getrefcount(code), sys.getrefcount(f), sys.getrefcount(x), sys.getrefcount(out))
    for _ in range(10_000):
        compiled(x)
    gc.collect()
    after = (sys.getrefcount(code), sys.getrefcount(f), sys.getrefcount(x), sys.getrefcount(out))
    assert before == after
    result = compiled(x)
    assert sys.getrefcount(result) == 2  # only `result` and getrefcount's argument


def test_every_break_code_has_headline_explanation_and_hint():
    import re

    seen = set()
    for code, headline, explanation, hint in fastcomp._C._testing.break_codes():
        assert re.fullmatch(r"GB\d{3}", code) and code not in seen
        seen.add(code)
        assert headline and explanation and hint and headline != hint
    assert {"GB001", "GB002", "GB003", "GB004", "GB005", "GB006", "GB007", "GB008", "GB009", "GB999"} <= seen


@pytest.mark.parametrize("code, fn", [
    ("GB001", lambda x: x + 1 if x.sum() > 0 else x),
    ("GB002", lambda x: x * x.sum().item()),
    ("GB003", lambda x: x + len(dir(x))),
    ("GB004", lambda x: print(x) or x),
    ("GB006", lambda x: eager_side_channel(x) + x),
    ("GB009", lambda x: x + float(np.pi * np.ones(1)[0])),
])
def test_each_break_code_message(code, fn):
    out = fastcomp.explain(fn)(torch.randn(3))
    b = out.break_reasons[0]
    assert b.code == code and b.headline and b.hint and b.explanation
    assert b.user_loc.startswith(__file__)
    if code == "GB002":
        assert b.hint.startswith("`Tensor.item()` needs the tensor's value: return the tensor and call `.item()` "
                                 "outside, or use `torch.where`")


def test_an_op_whose_output_size_depends_on_values_is_a_data_dependent_break_and_says_so():
    """Meta tensors have no values: torch.where(cond) fails on them, and the break says why (not "no meta
    implementation, please report it")."""
    def f(x):
        idx, = torch.where(x > 0)
        return x[idx] * 2

    out = fastcomp.explain(f)(torch.randn(8))
    b = out.break_reasons[0]
    assert b.code == "GB002", b
    assert "torch.where: the size of its output depends on the tensor's values" in b.reason, b.reason
    x = torch.randn(8)
    torch.testing.assert_close(fastcomp.compile(f)(x), f(x))


def test_values_on_the_stack_across_a_break():
    def f(x):
        return x.sin() + eager_side_channel(x) * torch.cos(x), [x * 2, print(end="") or 3]

    run(f, make_args=lambda: (torch.randn(3),))


def test_break_inside_try_keeps_its_handler():
    def f(x, fail):
        try:
            y = x + 1
            if fail:
                print("raising")
                raise ValueError("handled")
            print("fine")
            z = y * 2
        except ValueError:
            z = -y
        return z

    run(f, make_args=lambda: (torch.randn(3), False))
    # the resume function whose code raises is traced again on each call, like any frame that raises
    run(f, make_args=lambda: (torch.randn(3), True), steady=False)


def test_break_in_code_with_extended_args_and_long_jumps():
    # More than 256 constants and names, and jumps longer than 255 code units around the break.
    body = "\n".join(f"    v{i} = x + {i}.5" for i in range(300))
    src = f"def big(x):\n{body}\n    print(end='')\n    if x.shape[0] > 1:\n{body.replace('    ', '        ')}\n"
    src += "    return " + " + ".join(f"v{i}" for i in range(0, 300, 50)) + "\n"
    namespace = {}
    exec(compile(src, __file__ + ".big", "exec"), namespace)
    big = namespace["big"]
    assert big.__code__.co_nlocals > 256 and len(big.__code__.co_consts) > 256
    cc = run(big, make_args=lambda: (torch.randn(2),), calls=2)
    assert counts(cc) == (2, 1)


GRABBED = []


@fastcomp.disable
def grab_caller_frame():
    GRABBED.append(sys._getframe(1))


def test_generated_code_is_well_formed_bytecode():
    import dis

    from fastcomp._C import _testing as T

    def f(x, n):
        with torch.no_grad():
            y = x * n
            grab_caller_frame()
            z = y + 1
        return z

    GRABBED.clear()
    torch.testing.assert_close(fastcomp.compile(f)(torch.randn(2), 3) * 0, torch.zeros(2))
    (frame,) = GRABBED
    break_code = frame.f_code  # the code CPython runs at the break, made from f's code
    resume_code = frame.f_locals["___resume0"].__code__
    assert break_code.co_name == resume_code.co_name == "f" and "__resume_at_" in resume_code.co_qualname
    assert frame.f_lineno == f.__code__.co_firstlineno + 3  # the user's line of the break
    for code in (break_code, resume_code):
        assert T.roundtrip(code) == (code.co_code, code.co_exceptiontable, code.co_linetable)
        list(dis.get_instructions(code))  # every offset, jump and table entry decodes
    # the with block's __exit__ is not an argument: the resume function enters the block again; the live locals
    # come first, so the original's first argument keeps slot 0 (where zero-argument super() looks)
    assert resume_code.co_varnames[0] == "x" and "___stack1" in resume_code.co_varnames
    assert "___stack0" not in resume_code.co_varnames
    del frame
    GRABBED.clear()
