"""Lifetime and threads: what fastcomp keeps per compiled function is freed by fastcomp.reset() (or with the
function), nothing it holds is released after the interpreter has gone, and threads that compile at once
neither deadlock nor see each other's half-made state (issue 26: #16, #19, #20)."""
import ctypes
import gc
import io
import os
import subprocess
import sys
import textwrap
import weakref

import torch

import fastcomp
from fastcomp.testing import CompileCounter
from tests.helpers import pythonpath_with_this_fastcomp

def run_python(code, timeout):
    """Runs `code` in a fresh interpreter with this checkout's fastcomp and its own cache directory."""
    env = dict(os.environ, PYTHONPATH=pythonpath_with_this_fastcomp())
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, env=env)


# --- a method of a global object (#16) ----------------------------------------------------------------------------

buf = io.StringIO()


def write_then_add(x):
    buf.write("a")
    return x + 1


def test_method_of_a_global_object_is_guarded_through_the_object():
    buf.seek(0)
    buf.truncate()
    compiled = fastcomp.compile(write_then_add)
    with CompileCounter() as cc:
        for _ in range(5):
            x = torch.randn(3)
            torch.testing.assert_close(compiled(x), x + 1)
    # The function up to the call, and its resume function; no recompile: the guard is on the object's type,
    # not on the bound method, which is a new object on every read.
    assert cc.frame_count == 2, cc.recompile_reasons
    assert cc.recompile_reasons == []
    assert buf.getvalue() == "aaaaa"


def test_interpreter_exits_cleanly_after_a_compiled_function_called_a_global_objects_method():
    r = run_python("""
        import io
        import torch
        import fastcomp
        buf = io.StringIO()
        def f(x):
            buf.write("a")
            return x + 1
        compiled = fastcomp.compile(f)
        for _ in range(3):
            compiled(torch.ones(3))
        print(buf.getvalue())
    """, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout == "aaa\n"
    assert "Fatal Python error" not in r.stderr


# --- 10,000 functions with graph breaks (#20) ---------------------------------------------------------------------


def rss_bytes():
    """Resident memory, after handing the allocator's free memory back to the system where it can (glibc)."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_10000_functions_with_graph_breaks_leave_nothing_behind_after_reset():
    brk = fastcomp.disable(lambda t: t)
    shared_globals = {"brk": brk}
    x = torch.ones(2)

    def compile_and_call(first, count):
        """Compiles and calls `count` functions, resetting after every 1,000; returns weak references to their
        code objects."""
        codes = []
        for i in range(first, first + count):
            # A code object of its own for each function (a file name of its own), as distinct functions have.
            source = f"def f(x):\n    y = x + {i}\n    y = brk(y)\n    return y * 2\n"
            exec(compile(source, f"<leak test {i}>", "exec"), shared_globals)
            f = shared_globals.pop("f")
            assert torch.equal(fastcomp.compile(f)(x), (x + i) * 2)
            codes.append(weakref.ref(f.__code__))
            del f
            if (i + 1) % 1000 == 0:
                fastcomp.reset()
        fastcomp.reset()
        gc.collect()
        return codes

    compile_and_call(0, 2000)  # warm-up: allocator pools, torch's caches, tables at their working size
    rss, objects = rss_bytes(), len(gc.get_objects())
    refs = sys.getrefcount(shared_globals), sys.getrefcount(brk)
    codes = compile_and_call(2000, 10000)
    assert sum(c() is not None for c in codes) == 0  # every user code, and the resume code made from it, is freed
    del codes
    assert (sys.getrefcount(shared_globals), sys.getrefcount(brk)) == refs
    assert len(gc.get_objects()) <= objects + 100
    # Was ~7 KB per function that never came back (70 MB here); now 0 to 0.6 MB, at times 4 MB on a busy CI machine
    # (CPython itself keeps ~56 bytes of each exec'd compile; the allocator's arenas vary). 8 MB (800 bytes a
    # function) still catches a tenth of the old leak.
    growth = rss_bytes() - rss
    assert growth < 8 * 2**20, f"RSS grew by {growth / 2**20:.1f} MB over 10,000 compiled functions"


# --- threads (#19) -------------------------------------------------------------------------------------------------

THREADS_PROGRAM = """
    import threading
    import torch
    import fastcomp

    def f(x):
        y = x.sin() * 2
        if y.sum().item() > -1e9:  # a graph break
            y = y + x.shape[0]
        return y.cos()

    compiled = fastcomp.compile(f)
    for rep in range(50):
        fastcomp.reset()  # every repetition starts with nothing compiled
        inputs = [torch.randn(8 + i % 2, 3) for i in range(4)]
        results = [None] * 4
        start = threading.Barrier(4)

        def work(i):
            start.wait()
            results[i] = compiled(inputs[i])

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i, (x, r) in enumerate(zip(inputs, results)):
            expected = f(x)
            if not torch.allclose(r, expected, rtol=1.3e-6, atol=1e-5):
                # Which side is off (against float64), and whether it happens again outside the threads.
                exact = f(x.double())
                raise AssertionError(
                    f"repetition {rep}, thread {i}, x {tuple(x.shape)}: threaded compiled vs eager "
                    f"{(r - expected).abs().max().item():.3g}; vs float64: threaded compiled "
                    f"{(r - exact).abs().max().item():.3g}, eager {(expected - exact).abs().max().item():.3g}, "
                    f"compiled again {(compiled(x) - exact).abs().max().item():.3g}, "
                    f"eager again {(f(x) - exact).abs().max().item():.3g}")
    print("ok")
"""


def test_one_function_from_4_threads_from_the_first_call():
    # A fresh process each time, so that the first repetition is the process's first compile (the one that
    # deadlocked); two of them, as that race is won or lost once per process. The timeout turns a deadlock into a
    # failure.
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(THREADS_PROGRAM)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONPATH=pythonpath_with_this_fastcomp())) for _ in range(2)]
    try:
        for p in procs:
            out, err = p.communicate(timeout=240)
            assert p.returncode == 0 and out == "ok\n", err[-3000:]
            assert "internal error" not in err, err[-3000:]
    finally:
        for p in procs:
            p.kill()
