"""fastcomp.compile and friends: the same API shape as torch.compile."""
import functools
import inspect
import types

import torch

from fastcomp import _C

MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
BACKENDS = ("default",)
OPTIONS = ("cuda_graphs",)


def _target_code(fn):
    """The code object whose frames are compiled when `fn` is called."""
    if isinstance(fn, torch.nn.Module):
        forward = type(fn).forward
        return inspect.unwrap(forward).__code__
    if isinstance(fn, types.MethodType):
        fn = fn.__func__
    fn = inspect.unwrap(fn)
    if isinstance(fn, types.FunctionType):
        return fn.__code__
    call = getattr(type(fn), "__call__", None)
    if isinstance(call, types.FunctionType):
        return call.__code__
    raise TypeError(
        f"fastcomp.compile expects a Python function, a method or an nn.Module, got {type(fn).__name__}; "
        "C functions and builtins have no bytecode to compile"
    )


def _check_choice(what, value, valid):
    if value not in valid:
        raise ValueError(f"fastcomp.compile: unknown {what} {value!r}; valid {what}s: {', '.join(map(repr, valid))}")


class OptimizedModule(torch.nn.Module):
    """What fastcomp.compile(module) returns: behaves like the module (attributes, state_dict, train/eval,
    hooks) and runs its forward compiled. Like torch.compile, the original is registered as ``_orig_mod``."""

    def __init__(self, mod, dispatcher):
        super().__init__()
        self._orig_mod = mod
        object.__setattr__(self, "_fastcomp_call", dispatcher)

    def forward(self, *args, **kwargs):
        return self._fastcomp_call(*args, **kwargs)

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["_orig_mod"], name)

    def __repr__(self):
        return f"OptimizedModule({self._orig_mod!r})"


def compile(model=None, *, fullgraph=False, dynamic=None, mode=None, backend="default", options=None, disable=False):
    """Compile a function or nn.Module; returns a callable with the same behaviour.

    Usable as ``compile(fn)``, ``@compile``, ``@compile(fullgraph=True)`` and ``compile(module)``.
    ``fullgraph=True`` raises ``fastcomp.Unsupported`` where the code cannot be captured in one graph.
    """
    mode = "default" if mode is None else mode
    _check_choice("mode", mode, MODES)
    _check_choice("backend", backend, BACKENDS)
    if dynamic not in (None, True, False):
        raise TypeError(f"fastcomp.compile: dynamic must be None, True or False, got {dynamic!r}")
    for key in options or {}:
        _check_choice("option", key, OPTIONS)
    if options and options.get("cuda_graphs"):
        mode = "reduce-overhead"
    if model is None:
        return functools.partial(
            compile, fullgraph=fullgraph, dynamic=dynamic, mode=mode, backend=backend, options=options, disable=disable
        )
    if not callable(model):
        raise TypeError(
            f"fastcomp.compile expects a function, a method or an nn.Module, got {type(model).__name__} ({model!r})"
        )
    if disable:
        return model
    target = _target_code(model)
    dispatcher = _C.make_dispatcher(model, target, fullgraph, dynamic, mode, backend)
    if isinstance(model, torch.nn.Module):
        return OptimizedModule(model, dispatcher)
    functools.update_wrapper(dispatcher, model)
    return dispatcher


def disable(fn=None, recursive=True):
    """Never trace into `fn`: it always runs eagerly, and a compiled caller's graph ends around the call."""
    if fn is None:
        return functools.partial(disable, recursive=recursive)
    wrapped = _C.make_disabled(fn)
    functools.update_wrapper(wrapped, fn)
    return wrapped


def _dims(t, dim, what):
    import torch

    if not isinstance(t, torch.Tensor):
        raise TypeError(f"fastcomp.{what}: expected a tensor, got {type(t).__name__}")
    dims = [dim] if isinstance(dim, int) else list(dim)
    for d in dims:
        if not isinstance(d, int) or not -t.dim() <= d < t.dim():
            raise ValueError(f"fastcomp.{what}: dimension {d!r} is out of range for a tensor with {t.dim()} dimensions")
    return [d % t.dim() for d in dims]


def mark_dynamic(t, dim, min=None, max=None):
    """Trace dimension(s) `dim` of `t` as a symbolic size from the first compile on (as torch._dynamo.mark_dynamic).

    `min`/`max` bound the sizes the compiled code accepts; a call outside them compiles again. Sizes 0 and 1 are
    always specialised, so mark a dimension whose size is at least 2 on the first call.
    """
    if min is not None and max is not None and min > max:
        raise ValueError(f"fastcomp.mark_dynamic: min={min} is larger than max={max}")
    ranges = dict(getattr(t, "_fastcomp_dynamic_dims", {}))
    for d in _dims(t, dim, "mark_dynamic"):
        ranges[d] = (min, max)
    t._fastcomp_dynamic_dims = ranges
    static = set(getattr(t, "_fastcomp_static_dims", ())) - set(ranges)
    t._fastcomp_static_dims = static


def mark_static(t, dim):
    """Always specialise dimension(s) `dim` of `t`, even under dynamic=True (as torch._dynamo.mark_static)."""
    dims = _dims(t, dim, "mark_static")
    t._fastcomp_static_dims = set(getattr(t, "_fastcomp_static_dims", ())) | set(dims)
    ranges = {d: r for d, r in getattr(t, "_fastcomp_dynamic_dims", {}).items() if d not in dims}
    t._fastcomp_dynamic_dims = ranges


def reset():
    """Forget every compiled function (like torch._dynamo.reset())."""
    _C.reset()


def wait_for_compiles(timeout=None):
    """Block until every kernel compile running in the background has finished.

    fastcomp traces on the first call and runs that graph through torch while NVRTC compiles its kernels on a
    thread; later calls switch to the kernels once they are ready. Call this at the end of a warm-up (a server
    start, a benchmark) to make the next call use them. Returns False if `timeout` (seconds) passed first.
    """
    return _C.wait_for_compiles(-1.0 if timeout is None else float(timeout))


def is_compiling():
    """True while fastcomp traces the calling code, False when it runs eagerly."""
    return False


_C.register_special("is_compiling", is_compiling)


def _skip_dirs():
    """Code under these directories never becomes a compiled frame of its own (see README, graph breaks)."""
    import os

    import fastcomp

    # The standard library's folder is os.py's (sysconfig would say the same at ~1 ms of a warm start's import).
    dirs = {os.path.dirname(torch.__file__), os.path.dirname(fastcomp.__file__), os.path.dirname(os.__file__)}
    return sorted(os.path.join(os.path.realpath(d), "") for d in dirs) + sorted(os.path.join(d, "") for d in dirs)


_C.set_skip_dirs(_skip_dirs())
