"""The CPython layer: the PEP 523 hook, FrameView and co_extra storage, driven through fastcomp._C._testing.

intercept_codes(codes, replacement, fn, *args) calls fn(*args) inside a HookScope; every frame whose code
is in `codes` is offered to replacement(info) before it runs, and the replacement's result (or exception)
stands in for the frame's, unless it returns RUN_DEFAULT.
"""
import asyncio
import builtins
import gc
import sys
import threading
import weakref

import pytest

from fastcomp._C import _testing as t

UNBOUND = t.UNBOUND
RUN_DEFAULT = t.RUN_DEFAULT


class Payload:
    """An object whose reference count and lifetime the tests watch."""


def slots_by_name(info):
    return {name: (kind, value) for name, kind, value, _ in info["slots"]}


def capture(fn, *args, **kwargs):
    """Intercepts fn(*args, **kwargs) and returns the frame description it was offered."""
    seen = []
    assert t.intercept_call(fn, lambda info: seen.append(info) or "replaced", *args, **kwargs) == "replaced"
    assert len(seen) == 1
    return seen[0]


# --- results and paths --------------------------------------------------------------------------------


def test_replacement_result_is_returned_instead_of_running_the_frame():
    ran = []

    def target(x):
        ran.append(x)
        return x

    sentinel = Payload()
    assert t.intercept_call(target, lambda info: sentinel, 1) is sentinel
    assert ran == []


def test_error_path_raises_the_replacements_exception():
    ran = []
    error = KeyError("from replacement")

    def target():
        ran.append(1)

    def replacement(info):
        raise error

    with pytest.raises(KeyError) as caught:
        t.intercept_call(target, replacement)
    assert caught.value is error
    assert ran == []
    assert not t.hook_installed()


def test_run_default_evaluates_the_frame_normally():
    offered = []

    def target(a, b=10):
        return a + b

    assert t.intercept_call(target, lambda info: offered.append(info) or RUN_DEFAULT, 5) == 15
    assert len(offered) == 1


def test_frames_called_from_a_default_run_frame_are_offered_again():
    def inner(x):
        return x * 2

    def outer(x):
        return inner(x) + 1

    def replacement(info):
        return RUN_DEFAULT if info["code"] is outer.__code__ else 100

    assert t.intercept_codes([outer.__code__, inner.__code__], replacement, outer, 3) == 101


def test_other_frames_run_normally():
    def helper(x):
        return x + 1

    def caller(x):
        return helper(x) * 2

    def target(x):
        return x

    assert t.intercept_codes([target.__code__], lambda info: 0, caller, 4) == 10


def test_replacement_runs_with_the_hook_suspended():
    def target(x):
        return x + 1

    # Calling the target from inside the handler would recurse forever if the hook were not suspended.
    assert t.intercept_call(target, lambda info: info["function"](41) * 10, 0) == 420


def test_call_suspended_runs_frames_normally_inside_a_scope():
    def target():
        return "real"

    def body():
        return target(), t.call_suspended(target)

    assert t.intercept_codes([target.__code__], lambda info: "replaced", body) == ("replaced", "real")


def test_method_call_sees_self():
    class Widget:
        def method(self, x):
            return x

    w = Widget()
    seen = []
    assert t.intercept_codes([Widget.method.__code__], lambda info: seen.append(info) or 7, w.method, 3) == 7
    assert slots_by_name(seen[0])["self"] == ("local", w)
    assert slots_by_name(seen[0])["x"] == ("local", 3)


# --- reading the frame --------------------------------------------------------------------------------


def test_frame_description_names_code_function_globals_and_builtins():
    def target():
        return 1

    info = capture(target)
    assert info["code"] is target.__code__
    assert info["function"] is target
    assert info["globals"] is globals()
    assert info["builtins"] is builtins.__dict__


def test_arguments_defaults_keyword_only_and_varargs():
    def target(p, /, a, b=2, *rest, k, kd="kd", **extra):
        local_after = a
        return local_after

    info = capture(target, 0, 1, 20, 30, 40, k=3, z=9)
    names = [name for name, _, _, _ in info["slots"]]
    assert names[:7] == ["p", "a", "b", "k", "kd", "rest", "extra"]
    slots = slots_by_name(info)
    assert slots["p"] == ("local", 0)
    assert slots["a"] == ("local", 1)
    assert slots["b"] == ("local", 20)
    assert slots["rest"] == ("local", (30, 40))
    assert slots["k"] == ("local", 3)
    assert slots["kd"] == ("local", "kd")
    assert slots["extra"] == ("local", {"z": 9})
    assert slots["local_after"] == ("local", UNBOUND)


def test_default_used_when_argument_is_omitted():
    default = Payload()

    def target(a, b=default):
        return a, b

    assert slots_by_name(capture(target, 1))["b"] == ("local", default)


def test_argument_that_is_a_cell_holds_the_raw_value():
    value = Payload()

    def target(a, b):
        def inner():
            return a

        return inner

    slots = slots_by_name(capture(target, value, 2))
    assert slots["a"] == ("cell_arg", value)
    assert slots["b"] == ("local", 2)


def test_cell_that_is_not_an_argument_is_unbound():
    def target(a):
        c = a + 1

        def inner():
            return c

        return inner

    slots = slots_by_name(capture(target, 1))
    assert slots["c"] == ("cell", UNBOUND)
    assert slots["inner"] == ("local", UNBOUND)


def test_free_variables_are_read_from_the_closure():
    outer_value = Payload()

    def make():
        x = outer_value
        y = "why"

        def target(arg):
            return x, y, arg

        return target

    target = make()
    info = capture(target, 5)
    slots = slots_by_name(info)
    assert slots["x"] == ("free", outer_value)
    assert slots["y"] == ("free", "why")
    assert slots["arg"] == ("local", 5)
    cells = {name: cell for name, kind, _, cell in info["slots"] if kind == "free"}
    by_name = dict(zip(target.__code__.co_freevars, target.__closure__))
    assert cells == by_name
    assert all(cell is None for _, kind, _, cell in info["slots"] if kind != "free")


def test_free_variable_whose_cell_is_still_empty_is_unbound():
    def make():
        def target():
            return later

        seen = capture(target)
        later = 1
        return seen, target

    info, target = make()
    assert slots_by_name(info)["later"] == ("free", UNBOUND)
    assert target() == 1


def test_nested_closures_see_every_level():
    def level1(a):
        b = a * 2

        def level2(c):
            d = c + b

            def level3(e):
                return a + b + d + e

            return level3

        return level2

    level3 = level1(1)(10)
    slots = slots_by_name(capture(level3, 100))
    assert slots["e"] == ("local", 100)
    assert slots["a"] == ("free", 1)
    assert slots["b"] == ("free", 2)
    assert slots["d"] == ("free", 12)


def test_cell_argument_and_free_variable_in_one_frame():
    def make(z):
        def target(a, *, k):
            def inner():
                return a + k + z

            return inner

        return target

    target = make(7)
    slots = slots_by_name(capture(target, 1, k=2))
    assert slots["a"] == ("cell_arg", 1)
    assert slots["k"] == ("cell_arg", 2)
    assert slots["z"] == ("free", 7)
    assert slots["inner"] == ("local", UNBOUND)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="PEP 709 inlines comprehensions from 3.12")
def test_inlined_comprehension_variables_are_hidden():
    # Outside functions, an inlined comprehension's variable is a hidden fast local of the enclosing code.
    code = compile("items = [1]\nsquares = [item * item for item in items]\n", "<hidden>", "exec")
    seen = []

    def replacement(info):
        seen.append(info)
        raise LookupError

    with pytest.raises(LookupError):
        t.intercept_codes([code], replacement, exec, code, {})
    assert slots_by_name(seen[0])["item"] == ("hidden", UNBOUND)


# --- which frames are offered -------------------------------------------------------------------------


def test_generators_coroutines_and_async_generators_are_never_intercepted():
    offered = []

    def gen(n):
        yield n
        yield n + 1

    async def coro(n):
        return n

    async def agen(n):
        yield n

    codes = [gen.__code__, coro.__code__, agen.__code__]

    def body():
        g = gen(1)
        values = list(g)
        thrown = gen(5)
        next(thrown)
        with pytest.raises(ValueError):
            thrown.throw(ValueError("into generator"))
        result = asyncio.run(coro(3))

        async def drain():
            return [v async for v in agen(4)]

        return values, result, asyncio.run(drain())

    assert t.intercept_codes(codes, lambda info: offered.append(info) or "replaced", body) == ([1, 2], 3, [4])
    assert offered == []


def test_code_run_by_a_profile_function_is_not_intercepted():
    def target():
        return "real"

    def trigger():
        return target()

    from_profiler = []

    def profiler(frame, event, arg):
        if event == "call" and frame.f_code is trigger.__code__:
            from_profiler.append(target())

    def body():
        sys.setprofile(profiler)
        try:
            return trigger()
        finally:
            sys.setprofile(None)

    assert t.intercept_codes([target.__code__], lambda info: "replaced", body) == "replaced"
    assert from_profiler == ["real"]


def test_exec_of_module_code_can_be_answered_and_releases_its_namespace():
    code = compile("value = 1\nraise RuntimeError('ran')", "<test>", "exec")
    namespace = {}

    def run():
        exec(code, namespace)

    def replacement(info):
        raise LookupError("answered")

    before = sys.getrefcount(namespace)
    for _ in range(1000):
        with pytest.raises(LookupError):
            t.intercept_codes([code], replacement, run)
    assert sys.getrefcount(namespace) == before
    assert "value" not in namespace


# --- installation and scopes --------------------------------------------------------------------------


def test_hook_is_installed_only_inside_a_scope():
    assert not t.hook_installed()
    assert t.in_hook_scope(t.hook_installed)
    assert not t.hook_installed()


def test_nested_scopes_keep_the_hook_until_the_outermost_ends():
    def inner_then_check():
        nested = t.in_hook_scope(t.hook_installed)
        return nested, t.hook_installed()

    assert t.in_hook_scope(inner_then_check) == (True, True)
    assert not t.hook_installed()


def test_nested_interceptions_restore_the_outer_one():
    def a():
        return "a"

    def b():
        return "b"

    def body():
        inner = t.intercept_call(b, lambda info: "B")
        return inner, a(), b()

    assert t.intercept_call(a, lambda info: RUN_DEFAULT, ) == "a"
    assert t.intercept_codes([a.__code__], lambda info: "A", body) == ("B", "A", "b")
    assert not t.hook_installed()


def test_scope_ends_when_the_call_raises():
    def target():
        raise ValueError("from target")

    with pytest.raises(ValueError):
        t.intercept_call(target, lambda info: RUN_DEFAULT)
    assert not t.hook_installed()


# --- threads ------------------------------------------------------------------------------------------


def test_thread_without_a_scope_is_not_intercepted():
    def target(x):
        return x + 1

    def body():
        out = []
        installed = []

        def worker():
            installed.append(t.hook_installed())
            out.append(target(1))

        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
        return out, installed, target(1)

    assert t.intercept_codes([target.__code__], lambda info: 100, body) == ([2], [True], 100)


def test_threads_with_their_own_scopes_are_intercepted_independently():
    def target(x):
        return x

    results = {}

    def worker(name, answer):
        results[name] = [t.intercept_call(target, lambda info: answer, 0) for _ in range(2000)]

    threads = [threading.Thread(target=worker, args=(n, n * 10)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {n: [n * 10] * 2000 for n in range(4)}
    assert not t.hook_installed()


# --- references and the data stack --------------------------------------------------------------------


@pytest.mark.parametrize("path", ["result", "error", "run_default"])
def test_no_reference_leaks_over_many_intercepted_calls(path):
    arg, kwarg, result = Payload(), Payload(), Payload()

    def make(captured):
        def target(a, *rest, key=None, **extra):
            def inner():
                return a, captured

            return inner

        return target

    target = make(Payload())

    def raise_error(info):
        raise LookupError

    replacement = {
        "result": lambda info: result,
        "error": raise_error,
        "run_default": lambda info: RUN_DEFAULT,
    }[path]

    def once():
        try:
            t.intercept_call(target, replacement, arg, arg, key=kwarg, other=kwarg)
        except LookupError:
            pass

    watched = (target, target.__code__, target.__closure__[0], arg, kwarg, result, replacement)
    for _ in range(100):
        once()
    before = [sys.getrefcount(o) for o in watched]
    for _ in range(10_000):
        once()
    assert [sys.getrefcount(o) for o in watched] == before


def recurse(n):
    return 0 if n == 0 else 1 + recurse(n - 1)


def test_data_stack_is_intact_when_frames_are_answered_at_every_depth():
    # leaf's frame is much larger than descend's, so as the depth grows the leaf frame is bound to open a
    # new data-stack chunk at some depth; on 3.12 answering it must free that chunk and step back.
    def leaf(a, b, c):
        v0 = v1 = v2 = v3 = v4 = v5 = v6 = v7 = v8 = v9 = a
        w0 = w1 = w2 = w3 = w4 = w5 = w6 = w7 = w8 = w9 = b
        return (v0, v1, v2, v3, v4, v5, v6, v7, v8, v9, w0, w1, w2, w3, w4, w5, w6, w7, w8, w9, c)

    def descend(n, fail):
        if n == 0:
            return leaf(1, 2, 3)
        return descend(n - 1, fail)

    def replacement(info):
        if slots_by_name(info)["c"][1] == 3 and failing[0]:
            raise LookupError
        return "answered"

    failing = [False]
    for depth in range(400):
        assert t.intercept_codes([leaf.__code__], replacement, descend, depth, False) == "answered"
    failing[0] = True
    for depth in range(400):
        with pytest.raises(LookupError):
            t.intercept_codes([leaf.__code__], replacement, descend, depth, True)
    limit = sys.getrecursionlimit()
    assert recurse(limit - 100) == limit - 100
    # With any PEP 523 hook installed each Python call also recurses in C, and some 3.12 releases (3.12.1)
    # then hit the C recursion limit near depth 750, so stay well below it here.
    assert t.in_hook_scope(recurse, 500) == 500


# --- co_extra -----------------------------------------------------------------------------------------


def fresh_code():
    return compile("x = 1", "<code_extra>", "exec")


def test_code_extra_stores_and_loads():
    code = fresh_code()
    stored = Payload()
    assert t.code_extra_load(code) is None
    t.code_extra_store(code, stored)
    assert t.code_extra_load(code) is stored


def test_code_extra_is_released_when_the_code_object_dies():
    code = fresh_code()
    stored = Payload()
    alive = weakref.ref(stored)
    t.code_extra_store(code, stored)
    del stored
    gc.collect()
    assert alive() is not None
    del code
    gc.collect()
    assert alive() is None


def test_code_extra_replacing_releases_the_previous_value():
    code = fresh_code()
    first, second = Payload(), Payload()
    first_alive = weakref.ref(first)
    t.code_extra_store(code, first)
    del first
    t.code_extra_store(code, second)
    assert first_alive() is None
    assert t.code_extra_load(code) is second


def test_code_extra_storing_the_same_object_again_keeps_it_alive():
    code = fresh_code()
    stored = Payload()
    t.code_extra_store(code, stored)
    before = sys.getrefcount(stored)
    t.code_extra_store(code, stored)
    t.code_extra_store(code, stored)
    assert sys.getrefcount(stored) == before
    assert t.code_extra_load(code) is stored


def test_code_extra_none_clears():
    code = fresh_code()
    stored = Payload()
    alive = weakref.ref(stored)
    t.code_extra_store(code, stored)
    del stored
    t.code_extra_store(code, None)
    assert alive() is None
    assert t.code_extra_load(code) is None


def test_code_extra_rejects_non_code_objects():
    with pytest.raises(TypeError):
        t.code_extra_store(object(), 1)
