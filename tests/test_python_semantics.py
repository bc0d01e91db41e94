"""Python semantics the tracer must keep: each test is a program that once gave a different result (or an exception)
compiled than eager. Compiled and eager run on the same fresh inputs; results, their types and identities must match.
"""
import collections
import io
import typing

import pytest
import torch

import fastcomp
from fastcomp.testing import CompileCounter


def same(a, b):
    if isinstance(b, torch.Tensor):
        assert isinstance(a, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    elif isinstance(b, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            same(x, y)
    elif isinstance(b, dict):
        assert type(a) is type(b) and list(a) == list(b)
        for k in b:
            same(a[k], b[k])
    elif hasattr(b, "__dict__") and not isinstance(b, type):
        assert type(a) is type(b)
        same(vars(a), vars(b))
    else:
        assert type(a) is type(b) and a == b, (a, b)


def check(fn, *make_args, calls=2):
    compiled = fastcomp.compile(fn)
    for _ in range(calls):
        args = [m() if callable(m) else m for m in make_args]
        same(compiled(*args), fn(*args))
    return compiled


def rand(*shape):
    return lambda: torch.randn(*shape)


def test_dict_views_are_live():
    def f(x):
        d = {3: x}
        k, v = d.keys(), d.values()
        d[4] = x + 1
        return 4 in k, len(v), list(d.items())[1][1]

    check(f, rand(3))


def test_sum_with_start():
    check(lambda x: sum([0, 1.0, 2, 3.0], start=-10) + x, rand(3))


NT = collections.namedtuple("NT", "a b")


class TNT(typing.NamedTuple):
    a: int
    b: int


@pytest.mark.parametrize("point", [NT(1, 2), TNT(1, 2)], ids=["collections", "typing"])
def test_hasattr_on_namedtuples(point):
    def f(p, x):
        return x + 1 if hasattr(p, "_fields") and hasattr(p, "_asdict") and not hasattr(p, "nope") else x - 1

    check(f, point, rand(3))


def test_map_is_lazy_and_sees_appends():
    def f(x):
        y = [x]
        y.extend(map(lambda i: y[-1] + i, range(3)))
        return y

    check(f, rand(3))


def test_generators_run_when_their_items_are_asked_for():
    def gen(log, x):
        for i in range(3):
            log.append(i)
            yield x * i

    def f(x):
        log = []
        g = gen(log, x)
        first = next(g)
        seen = list(log)
        rest = list(g)
        return first, seen, rest, log

    check(f, rand(2))


def test_tensor_as_dict_key():
    def f(a):
        d = {a: 3}
        return a + d[a], a in d, (a * 1) in d

    check(f, rand(3))


def test_in_place_method_returns_its_tensor():
    check(lambda x: (x is x.add_(1), x.mul_(2) is x), rand(3))


def test_manual_seed_inside_the_function_reseeds_every_call():
    def f(x):
        torch.manual_seed(3)
        return torch.randint(0, 10, (4,)) + x, torch.rand(2)

    check(f, rand(4), calls=3)


def test_module_call_override_runs():
    class M(torch.nn.Module):
        def forward(self, x):
            return x + 1

        def __call__(self, x):
            return self.forward(x) * 2

    m = M()
    check(lambda x: m(x), rand(3))


def test_tensor_type_names_the_real_device():
    def f(a, b):
        m = a.to(torch.float16)
        return b.type(m.type()), m.type()

    check(f, rand(3), rand(3))


class Box:
    def __init__(self, t):
        self.t = t


def _breaking_callee(x, box):
    print("break")
    return x + box.t


def test_object_passed_through_varargs_to_a_breaking_callee_is_not_baked_in():
    def g(x, box, *args):
        return _breaking_callee(x, box, *args)

    compiled = fastcomp.compile(g)
    same(compiled(torch.zeros(3), Box(torch.zeros(3))), torch.zeros(3))
    same(compiled(torch.zeros(3), Box(torch.ones(3))), torch.ones(3))


class _A:
    def val(self):
        return 1.0


class _B(_A):
    def m(self, other, y):
        print("break")
        return [other, super().val() + y]


def test_zero_argument_super_after_a_break_binds_to_self():
    b = _B()
    check(lambda o, y: b.m(o, y)[1], _A, rand(3))


def test_cell_variables_live_across_a_break():
    def f(x):
        scale = 2.0

        def g(t):
            return t * scale

        y = g(x)
        print("break")
        scale = 3.0
        return g(y) + x, (lambda: scale)()

    with CompileCounter() as cc:
        check(f, rand(3))
    assert all(r["status"] != "unsupported" for r in cc.records)


def test_method_of_a_global_object_breaks_there_and_is_not_recompiled():
    buf = io.StringIO()
    glob = {"buf": buf}
    exec("def f(x):\n    buf.write('a')\n    return x + 1\n", glob)
    f = glob["f"]
    compiled = fastcomp.compile(f)
    with CompileCounter() as cc:
        for _ in range(3):
            x = torch.randn(2)
            same(compiled(x), x + 1)
    assert buf.getvalue() == "aaa"
    assert cc.frame_count == 2 and not cc.recompile_reasons  # f up to the call and the code after it, once each


def test_side_effects_on_objects_from_the_frame_are_written_back():
    class State:
        pass

    def f(x, items, table, obj):
        items.append(x.sum())
        table["k"] = x * 2
        del table["drop"]
        obj.seen = len(items)
        obj.out = x + 1
        return x - 1

    compiled = fastcomp.compile(f)
    for _ in range(2):
        x = torch.randn(3)
        a, b = ([], {"drop": 1}, State()), ([], {"drop": 1}, State())
        same(compiled(x, *a), f(x, *b))
        same(a[0], b[0])
        same(a[1], b[1])
        same(vars(a[2]), vars(b[2]))


def test_objects_from_the_frame_are_returned_by_identity():
    lst = []
    compiled = fastcomp.compile(lambda x, l: (x + 1, l))
    out = compiled(torch.randn(2), lst)
    assert out[1] is lst


def test_user_class_instances_made_in_the_trace():
    class Point:
        def __init__(self, x, y):
            self.x, self.y = x, y

        @property
        def norm(self):
            return (self.x * self.x + self.y * self.y).sqrt()

        def __getattr__(self, name):
            if name == "z":
                return 0.0
            raise AttributeError(name)

    def f(a, b):
        p = Point(a, b)
        return p.norm + p.z, getattr(p, "w", "missing"), hasattr(p, "w"), type(p).__name__

    check(f, rand(3), rand(3))


def test_dataclass_with_post_init_is_returned():
    import dataclasses

    @dataclasses.dataclass
    class Out:
        a: torch.Tensor
        b: typing.Optional[torch.Tensor] = None
        n: int = 0

        def __post_init__(self):
            self.n = 1 if self.b is None else 2

    def f(x):
        return Out(x + 1), Out(x, x * 2)

    compiled = check(f, rand(3))
    out = compiled(torch.ones(2))
    assert isinstance(out[0], Out) and out[0].n == 1 and out[1].n == 2


def test_try_except_in_traced_code():
    def f(x, d):
        try:
            v = d["missing"]
        except KeyError:
            v = x * 2
        try:
            raise ValueError("boom")
        except (TypeError, ValueError) as e:
            msg = e.args[0]
        return v, msg

    with CompileCounter() as cc:
        check(f, rand(3), {"a": 1})
    assert cc.graph_count == 1 and cc.break_count == 0


def test_user_context_manager():
    log = []

    class Ctx:
        def __enter__(self):
            log.append("enter")
            return self

        def __exit__(self, *exc):
            log.append("exit")
            return False

    def f(x):
        with Ctx():
            y = x + 1
        return y

    compiled = fastcomp.compile(f)
    x = torch.randn(3)
    same(compiled(x), x + 1)
    assert log == ["enter", "exit"]


def test_sets_and_functools_partial():
    import functools

    def scale(t, k, offset=0.0):
        return t * k + offset

    def f(x):
        s = {1, 2} | {3}
        s.add(4)
        p = functools.partial(scale, k=len(s))
        return p(x, offset=1.0), 3 in s, sorted(s)

    check(f, rand(3))


def test_is_compiling_answers_true_while_tracing():
    def f(x):
        return x + 1 if torch.compiler.is_compiling() else x - 1

    compiled = fastcomp.compile(f)
    x = torch.randn(2)
    same(compiled(x), x + 1)


def test_warnings_and_logging_run_after_the_graph_without_a_break(caplog):
    import logging
    import warnings

    logger = logging.getLogger("fastcomp.test.user")

    def f(x):
        y = x + 1
        warnings.warn("careful")
        logger.warning("value %s", 3)
        return y * 2

    compiled = fastcomp.compile(f)
    with CompileCounter() as cc, pytest.warns(UserWarning, match="careful"), caplog.at_level(logging.WARNING):
        x = torch.randn(2)
        same(compiled(x), (x + 1) * 2)
    assert (cc.graph_count, cc.break_count) == (1, 0)
    assert "value 3" in caplog.text


def test_yield_from_and_module_iteration():
    def inner(x):
        yield x + 1
        yield x + 2

    def outer(x):
        yield x
        yield from inner(x)

    def f(x, m):
        params = [p.shape for p in m.parameters()]
        names = {name for name, _ in m.named_modules()}
        return list(outer(x)), params, sorted(names)

    m = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU())
    check(f, rand(3), lambda: m)


@pytest.mark.parametrize("make", [
    lambda: torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True),
    lambda: torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True), 2,
                                        enable_nested_tensor=False),
], ids=["TransformerEncoderLayer", "TransformerEncoder"])
@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_stock_transformer_modules_capture_whole(make, training):
    torch.manual_seed(0)
    m = make().train(training)  # no dropout, so training mode is deterministic too
    compiled = fastcomp.compile(m)
    with CompileCounter() as cc:
        x = torch.randn(2, 5, 32)
        torch.testing.assert_close(compiled(x), m(x))
    assert (cc.graph_count, cc.break_count) == (1, 0)


def test_random_ops_without_tensor_arguments_draw_only_at_run_time():
    def f(x):
        return torch.normal(0.0, 1.0, (x.shape[0],)) * x + torch.rand(2).sum()

    compiled = fastcomp.compile(f)
    x = torch.randn(3)
    for _ in range(2):  # the compiling call too
        torch.manual_seed(7)
        expected, state = f(x), torch.get_rng_state()
        torch.manual_seed(7)
        same(compiled(x), expected)
        assert torch.equal(torch.get_rng_state(), state)


def test_side_effects_before_an_op_that_raises_at_run_time_happen_first():
    log = []

    def f(x):
        log.append(x.sum())
        # The meta function accepts it, the CPU kernel raises for floats (and `&` is no in-place op: nothing to undo).
        return (x.clamp(0, 1) & 0.5) + 1

    compiled = fastcomp.compile(f)
    x = torch.randn(3)
    for run in (f, compiled, compiled):
        with pytest.raises(RuntimeError, match="bitwise_and"):
            run(x)
    assert len(log) == 3



def test_a_random_op_of_a_tensor_made_without_tensor_arguments_draws_at_run_time():
    log = io.StringIO()

    def f():
        r = torch.nn.functional.dropout(torch.normal(0.0, 1.0, (64,)), 0.5)
        print("between", file=log)  # a graph break: the draw happens in the first graph
        return r + 1

    compiled = fastcomp.compile(f)
    for _ in range(2):
        torch.manual_seed(3)
        expected = f()
        torch.manual_seed(3)
        same(compiled(), expected)


def test_an_lru_cache_method_of_a_global_object_is_called_once_and_guarded_through_its_class():
    import functools

    calls = []

    class Log:
        @functools.lru_cache(None)
        def once(self, message):
            calls.append(message)  # a side effect on its first call only, like logger.warning_once

    log = Log()

    def f(x):
        log.once("slow path")
        return x * 2

    compiled = fastcomp.compile(f)
    with CompileCounter() as cc:
        for _ in range(3):
            x = torch.randn(3)
            same(compiled(x), x * 2)
    assert (cc.frame_count, cc.graph_count, cc.break_count) == (1, 1, 0)  # the bound method is never guarded as itself
    assert calls == ["slow path"]


_CACHED_NAMES = []


def _names_once():
    return _CACHED_NAMES  # an existing list: what the program changes in it stays changed


def test_new_containers_returned_by_calls_made_while_tracing_are_new_on_every_call():
    # sorted(), str.split() and dict(zip()) of constants run at trace time; their results are new objects on every
    # call of the program, so a change after a graph break must not carry over to the next call (fuzz seed 2, #354).
    def f(x):
        order = sorted(x.shape, reverse=True)
        words = "a b c".split()
        table = dict(zip("xy", (1, 2)))
        total = x.sum().item()  # a graph break: the containers cross it
        order.pop()
        words.append(str(len(words)))
        table["z"] = len(table)
        return x + total, order, words, table

    check(f, rand(4, 3), calls=4)


def test_existing_containers_returned_by_calls_keep_their_identity():
    import functools

    cached = functools.lru_cache(maxsize=None)(lambda: _CACHED_NAMES)

    def f(x):
        names = cached()
        names.append("n")  # the memoised list itself grows, as in eager
        return x * len(names)

    compiled = fastcomp.compile(f)
    for n in range(1, 4):
        torch.testing.assert_close(compiled(torch.ones(2)), torch.full((2,), 2.0 * n - 1))
        torch.testing.assert_close(f(torch.ones(2)), torch.full((2,), 2.0 * n))
    assert _CACHED_NAMES == ["n"] * 6


def test_forward_hooks_and_pre_hooks_are_traced_in_call_order():
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x, scale=1.0):
            return self.lin(x) * scale

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = Block(), Block()

        def forward(self, x):
            return self.b(self.a(x), scale=2.0)

    torch.manual_seed(0)
    net = Net()
    net.a.register_forward_pre_hook(lambda m, args: (args[0] + 1,))
    net.a.register_forward_hook(lambda m, args, out: setattr(m, "seen", out) or out.relu())
    net.b.register_forward_pre_hook(lambda m, args, kwargs: (args, {"scale": kwargs["scale"] * 3}), with_kwargs=True)
    net.b.register_forward_hook(lambda m, args, kwargs, out: out - kwargs["scale"], with_kwargs=True)
    net.b.register_forward_hook(lambda m, args, out: None)  # None keeps the output
    compiled = fastcomp.compile(net)
    with CompileCounter() as cc:
        for _ in range(3):
            x = torch.randn(2, 4)
            expected, eager_seen = net(x), net.a.seen
            same(compiled(x), expected)
            same(net.a.seen, eager_seen)  # the hook saw what eager's hook saw
    # The first compile runs while `seen` is already an attribute (eager ran first): nothing to recompile.
    assert (cc.frame_count, cc.graph_count, cc.break_count) == (1, 1, 0), cc.records


def test_adding_or_removing_a_hook_recompiles():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh())
    compiled = fastcomp.compile(net)
    x = torch.randn(2, 4)
    same(compiled(x), net(x))
    handle = net[0].register_forward_hook(lambda m, args, out: out * 10)
    with CompileCounter() as cc:
        same(compiled(x), net(x))
        handle.remove()
        same(compiled(x), net(x))
    assert cc.frame_count == 1, cc.records  # the hook added: one compile; removed: the first compile again


def test_a_module_with_backward_hooks_runs_in_cpython():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 4))
    grads = []
    net[0].register_full_backward_hook(lambda m, gin, gout: grads.append(gout[0]))
    x = torch.randn(2, 4, requires_grad=True)
    fastcomp.compile(net)(x).sum().backward()
    assert len(grads) == 1


def test_torch_loss_and_activation_modules_built_inside_forward_are_traced():
    def f(x, target):
        act = torch.nn.GELU(approximate="tanh")
        loss = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
        return loss(act(x), target)

    compiled = fastcomp.compile(f)
    with CompileCounter() as cc:
        for _ in range(3):
            x, t = torch.randn(4, 5, requires_grad=True), torch.randint(0, 5, (4,))
            got, want = compiled(x, t), f(x, t)
            same(got, want)
            g1, = torch.autograd.grad(got, x)
            g2, = torch.autograd.grad(want, x)
            same(g1, g2)
    assert (cc.frame_count, cc.graph_count, cc.break_count) == (1, 1, 0), cc.records


def test_a_module_built_inside_the_function_is_new_on_every_call():
    def f(x):
        m = torch.nn.ReLU()
        return m(x), m

    compiled = fastcomp.compile(f)
    x = torch.randn(3)
    (a, m1), (b, m2) = compiled(x), compiled(x)
    same(a, x.relu()), same(b, x.relu())
    assert type(m1) is torch.nn.ReLU and m1 is not m2


def test_a_module_with_parameters_built_inside_the_function_draws_as_eager():
    def f(x):
        return torch.nn.Linear(3, 2)(x)

    compiled = fastcomp.compile(f)
    for seed in range(2):
        x = torch.randn(4, 3)
        torch.manual_seed(seed)
        want = f(x)
        torch.manual_seed(seed)
        same(compiled(x), want)


def test_double_star_dicts_override_and_calls_reject_repeated_keywords():
    def g(x, **kw):
        return x * kw.get("s", 1) + kw.get("b", 0)

    def f(x):
        base = {"s": 2}
        merged = {**base, "s": 5, "t": 1, "t": 2}  # noqa: F601 - a literal's repeated key keeps the last value
        try:
            g(x, **base, **{"s": 3})
            message = None
        except TypeError as e:
            message = str(e)
        return g(x, **base, b=3), g(x, **{**base, "s": 5}), merged, {i % 2: x * i for i in range(4)}, message

    check(f, rand(3), calls=2)


def test_an_integer_tensor_that_requires_grad_after_an_in_place_copy_runs_without_internal_error(recwarn):
    # torch lets ints[i] = floats_that_require_grad make an int64 tensor require grad; no meta tensor can be made
    # like it, so the code after the break runs in CPython (fuzz seed 2, #27274).
    def f(x, ints):
        ints[1:, -1] = x
        total = x.sum().item()  # a graph break with `ints` live
        return ints.numel() + total, ints.requires_grad

    for _ in range(2):
        x = torch.randn((), requires_grad=True).clone()
        a, b = torch.randint(-4, 9, (3, 1)), None
        b = a.clone()
        same(fastcomp.compile(f)(x, a), f(x, b))
        same(a, b)
    assert not [w for w in recwarn if "internal error" in str(w.message)]


def test_sets_made_in_the_trace_iterate_in_cpythons_order():
    # A set's order follows its hashes, its table size and its history (adds, removals, merges), not the order the
    # trace added its items in.
    def f(x):
        s = set()
        for k in ("q", "a", "m", 7, 1, "zz", 300):
            s.add(k)
        big = set(range(20))
        for i in range(17):
            big.discard(i)
        merged = big | {"z", 3}
        u = big.union(["k", "b"]).difference({18})
        c = big.copy()
        c.add(-1)
        return list(s), list(big), sorted(merged, key=str), [v for v in u], tuple(c), x + len(s)

    check(f, rand(2), calls=2)


def test_a_set_of_tensors_is_iterated_in_cpython():
    def f(x):
        found = {x, x + 1}
        return len(found), sorted(t.sum().item() for t in found)

    check(f, rand(3), calls=2)


def test_ops_that_return_their_input_return_the_same_tensor():
    # flatten() of a 1-d tensor, contiguous() of a contiguous one and to()/float() of its own dtype are the input
    # itself: `is` holds, and an in-place metadata change shows through every name (fuzz seed 2, #44101).
    def f(x):
        a, b, c, d = x.flatten(), x.contiguous(), x.to(torch.float32), x.float()
        x.unsqueeze_(0)
        return a.shape, b.shape, a is x, b is x, c is x, d is x, x.flatten() is x, x * 2

    for _ in range(2):
        x, y = torch.randn(3), None
        y = x.clone()
        same(fastcomp.compile(f)(x), f(y))


def test_a_subclass_of_a_torch_module_calls_its_base_forward_unbound_and_through_super():
    # A channels-first LayerNorm (SqueezeBERT's) and a Linear that reuses its base's forward: the base's forward
    # is torch's code taking the module first, traced like the module's own call, not one op of the graph.
    class ChannelsFirstLayerNorm(torch.nn.LayerNorm):
        def forward(self, x):
            return torch.nn.LayerNorm.forward(self, x.permute(0, 2, 1)).permute(0, 2, 1)

    class TwiceLinear(torch.nn.Linear):
        def forward(self, x):
            return super().forward(x) * 2 + torch.nn.Linear.forward(self, x)

    model = torch.nn.Sequential(ChannelsFirstLayerNorm(8), TwiceLinear(5, 5)).eval()
    with CompileCounter() as cc, torch.no_grad():
        check(model, rand(2, 8, 5))
    assert (cc.graph_count, cc.break_count, cc.frame_count) == (1, 0, 1), [r["break_reason"] for r in cc.records]


def test_zip_strict_traces_and_raises_as_cpython_does_for_unequal_lengths():
    # torch's own nn.RNN/LSTM forward zips its weights with strict=True: one graph, no break. Unequal lengths raise
    # CPython's ValueError (its message names the arguments), after the side effects of the items before.
    def f(x, ws, bs):
        return [x @ w + b for w, b in zip(ws, bs, strict=True)]

    with CompileCounter() as cc:
        check(f, rand(2, 3), lambda: [torch.randn(3, 3)] * 2, lambda: (torch.randn(3), torch.randn(3)))
    assert (cc.graph_count, cc.break_count) == (1, 0), [r["break_reason"] for r in cc.records]

    def g(x, a, b, c):
        seen = []
        try:
            for row in zip(a, b, c, strict=True):
                seen.append(x * sum(row))
        except ValueError as e:
            return seen, str(e)
        return seen, ""

    compiled = fastcomp.compile(g)
    for lengths in ((2, 2, 2), (2, 1, 2), (2, 2, 1), (1, 2, 2), (1, 1, 3), (0, 0, 1)):
        x = torch.randn(3)
        args = [list(range(1, n + 1)) for n in lengths]
        same(compiled(x, *args), g(x, *args))


def test_calling_a_weak_reference_reads_its_referent_and_guards_on_it():
    # The referent is read through a source of its own, on every call: a tensor behind a new ref is the graph's
    # input like any other (same metadata: nothing to compile); gone (None), the guards fail and the call
    # recompiles, giving eager's result.
    import weakref

    class Holder:
        pass

    holder, scale = Holder(), torch.randn(3)
    holder.ref = weakref.ref(scale)

    def f(x, h):
        target = h.ref()
        return x * 2 if target is None else x * target

    compiled = fastcomp.compile(f)
    with CompileCounter() as cc:
        for _ in range(2):
            x = torch.randn(3)
            same(compiled(x, holder), f(x, holder))
        assert cc.frame_count == 1
        other = torch.randn(3)
        holder.ref = weakref.ref(other)
        x = torch.randn(3)
        same(compiled(x, holder), x * other)
        del other
        same(compiled(x, holder), x * 2)
    assert cc.frame_count == 2


def test_torch_recurrent_modules_capture_whole_and_follow_a_replaced_weight():
    # nn.LSTM/GRU's forward checks its flat weights through weak references (zip(..., strict=True) over them) and
    # rebuilds them when a weight was replaced: one graph; after the replacement one compile of the call that
    # rebuilds them (its guard on the ref fails) and one of the calls after it (the rebuilt refs).
    for cls in (torch.nn.LSTM, torch.nn.GRU):
        rnn = cls(4, 6, num_layers=2, batch_first=True).eval()
        compiled = fastcomp.compile(rnn)
        with CompileCounter() as cc, torch.no_grad():
            for _ in range(2):
                x = torch.randn(2, 5, 4)
                same(compiled(x), rnn(x))
            assert (cc.frame_count, cc.graph_count, cc.break_count) == (1, 1, 0), [r["break_reason"] for r in cc.records]
            rnn.weight_hh_l1 = torch.nn.Parameter(torch.randn_like(rnn.weight_hh_l1))
            for _ in range(3):
                x = torch.randn(2, 5, 4)
                same(compiled(x), rnn(x))
        assert cc.frame_count == 3


def test_repeated_casts_of_one_tensor_stay_separate_tensors_where_one_is_written_or_returned():
    # The backend computes repeated casts of one tensor once (graph/repeated_casts.h), never where that shows:
    # a cast written in place after the other, or both returned (two tensors in eager).
    def written(x):
        a, b = x.to(torch.float64), x.to(torch.float64)
        b.add_(1)
        return a * 2, b

    def returned(x):
        return x.to(torch.float64), x.to(torch.float64) * 3, x.to(torch.float64)

    for fn in (written, returned):
        compiled = fastcomp.compile(fn)
        for _ in range(2):
            x = torch.randn(4)
            out, expected = compiled(x), fn(x)
            same(out, expected)
        if fn is returned:
            assert out[0] is not out[2] and out[0].data_ptr() != out[2].data_ptr()


def test_a_list_given_to_torch_jit_annotate_is_the_traced_list_on_every_call():
    """torch.jit.annotate(T, v) returns v: the list made in the trace, appended to in the trace, a new one each call
    (timm's CrossViT builds its per-branch tokens so; a list every call shared gave wrong results after a break)."""
    def f(xs):
        out = torch.jit.annotate(typing.List[torch.Tensor], [])
        for x in xs:
            out.append(x * 2)
        named = torch.jit.annotate(the_type=typing.List[int], the_value=[])
        named.append(len(out))
        return out, named

    compiled = fastcomp.compile(f)
    with CompileCounter() as cc:
        results = [compiled([torch.randn(3), torch.randn(3)]) for _ in range(2)]
    assert (cc.graph_count, cc.break_count) == (1, 0), cc.records
    (a, na), (b, nb) = results
    assert a is not b and na is not nb and len(a) == len(b) == 2 and na == nb == [2]
    xs = [torch.randn(3), torch.randn(3)]
    same(compiled(xs), f(xs))


def test_a_list_a_torch_function_makes_from_constants_is_a_new_list_on_every_call():
    """A torch function whose result is a list of sizes (computed from metadata at trace time): each call gets its
    own list, as eager does, so appending to one does not change the next call's."""
    from torch.nn.modules.utils import _list_with_default

    def f(x):
        sizes = _list_with_default([None, 2], x.shape)
        sizes.append(7)
        return x.sum(0), sizes

    compiled = fastcomp.compile(f)
    x = torch.randn(4, 5, 6)
    first, second = compiled(x)[1], compiled(x)[1]
    assert first == second == [5, 2, 7] and first is not second


def test_a_parameters_grad_is_read_under_a_guard_none_or_a_tensor_input():
    lin = torch.nn.Linear(3, 3)

    def f(x):
        g = lin.weight.grad
        y = lin(x)
        return y if g is None else y + g.sum()

    compiled = fastcomp.compile(f)
    x = torch.randn(2, 3)
    with CompileCounter() as cc:
        same(compiled(x), f(x))  # no gradient yet
        lin(x).sum().backward()
        same(compiled(x), f(x))  # a gradient: recompiled, the gradient an input
        lin.weight.grad.mul_(3)  # new values of the same gradient: no recompile, the new values used
        same(compiled(x), f(x))
        lin.weight.grad = None
        same(compiled(x), f(x))
    assert (cc.frame_count, cc.graph_count, cc.break_count) == (2, 2, 0), cc.records


def test_module_to_its_own_dtype_inside_a_forward_is_one_graph_and_changes_nothing():
    """`self.classifier = self.classifier.to(self.dtype)` in a forward (transformers' Switch router): nn.Module._apply
    reads each parameter's .grad and sets `param.data = param` where to() handed the parameter back."""
    class Router(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.classifier = torch.nn.Linear(4, 2)

        def forward(self, x):
            classifier = self.classifier.to(torch.float32)
            return classifier(x).softmax(-1)

    model = Router()
    weight = model.classifier.weight
    compiled = fastcomp.compile(model)
    x = torch.randn(3, 4)
    with CompileCounter() as cc:
        same(compiled(x), model(x))
    assert (cc.graph_count, cc.break_count) == (1, 0), cc.records
    assert model.classifier.weight is weight and weight.dtype == torch.float32


def test_a_submodule_assigned_back_to_itself_inside_a_forward_is_one_graph():
    """`self.classifier = self.classifier.to(dtype)` (transformers' Switch router) runs nn.Module.__setattr__, which
    tests `name in self._non_persistent_buffers_set` (a set read from the frame) before writing _modules."""
    class Router(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.classifier = torch.nn.Linear(4, 2)

        def forward(self, x):
            self.classifier = self.classifier.to(torch.float32)
            return self.classifier(x).softmax(-1)

    model = Router()
    classifier = model.classifier
    compiled = fastcomp.compile(model)
    with CompileCounter() as cc:
        for _ in range(2):
            x = torch.randn(3, 4)
            same(compiled(x), model(x))
    assert (cc.frame_count, cc.graph_count, cc.break_count) == (1, 1, 0), cc.records
    assert model.classifier is classifier and list(model._modules) == ["classifier"]
