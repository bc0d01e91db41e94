"""fastcomp.compile and friends: the same API shape as torch.compile."""
import functools
import inspect
import types
import warnings

import torch

from fastcomp import _C, config

MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
BACKENDS = ("default",)
OPTIONS = ("cuda_graphs",)
# What each mode runs as. torch's max-autotune is Inductor's kernel autotuning plus CUDA graphs; fastcomp's
# tuning of its matrix products (config.matmul_tuning) is on in every mode, so max-autotune is reduce-overhead's
# CUDA graphs, and max-autotune-no-cudagraphs is the default mode.
_RUNS_AS = {"default": "default", "reduce-overhead": "reduce-overhead", "max-autotune": "reduce-overhead",
            "max-autotune-no-cudagraphs": "default"}


def _target_code(fn):
    """The code object whose frames are compiled when `fn` is called."""
    while isinstance(fn, functools.partial):  # the call runs fn.func's frame
        fn = fn.func
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


def _runs_as(mode, options):
    """The mode the native core compiles for, from compile()'s `mode` and `options` (checked: one or the other)."""
    if mode is not None and options is not None:
        raise RuntimeError("Either mode or options can be specified, but both can't be specified at the same time.")
    for key in options or {}:
        _check_choice("option", key, OPTIONS)
    if options is not None:
        return "reduce-overhead" if options.get("cuda_graphs") else "default"
    mode = "default" if mode is None else mode
    _check_choice("mode", mode, MODES)
    if mode.startswith("max-autotune") and not config.matmul_tuning:
        _warn_once(f"fastcomp.compile(mode={mode!r}) tunes matrix products only while fastcomp.config.matmul_tuning "
                   "is on, and it is off: this compiles as mode="
                   f"{'reduce-overhead' if _RUNS_AS[mode] != 'default' else 'default'!r}")
    return _RUNS_AS[mode]


_warned = set()


def _warn_once(message):
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, stacklevel=4)


def _unwrap_compiled(fn):
    """(the function or module that fastcomp.compile(...) wrapped, the dispatcher's compile options), or (fn, None)
    when `fn` is not a compiled one."""
    if isinstance(fn, OptimizedModule):
        return fn._orig_mod, fn._fastcomp_call._compile_options
    if isinstance(fn, _C.CompiledFunction):
        return fn._fn, fn._compile_options
    if isinstance(fn, types.MethodType) and isinstance(fn.__func__, _C.CompiledFunction):
        return types.MethodType(fn.__func__._fn, fn.__self__), fn.__func__._compile_options
    return fn, None


class OptimizedModule(torch.nn.Module):
    """What fastcomp.compile(module) returns: behaves like the module (attributes, state_dict, train/eval,
    hooks) and runs its forward compiled. Like torch.compile, the original is registered as ``_orig_mod``."""

    def __init__(self, mod, dispatcher, compile_kwargs):
        super().__init__()
        self._orig_mod = mod
        object.__setattr__(self, "_fastcomp_call", dispatcher)
        object.__setattr__(self, "_fastcomp_compile_kwargs", compile_kwargs)

    def forward(self, *args, **kwargs):
        return self._fastcomp_call(*args, **kwargs)

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["_orig_mod"], name)

    def __reduce__(self):
        # Compiled code is never copied or saved: as with torch.compile's OptimizedModule, copy.deepcopy, pickle
        # and torch.save keep the module and the compile arguments, and the copy compiles on its first call.
        return (_compile_module, (self._orig_mod, self._fastcomp_compile_kwargs))

    # Containers (Sequential, ModuleList, ModuleDict) stay containers. Type slots are not found by __getattr__.
    def __len__(self):
        return len(self._orig_mod)

    def __iter__(self):
        return iter(self._orig_mod)

    def __getitem__(self, index):
        return self._orig_mod[index]

    def __contains__(self, item):
        return item in self._orig_mod

    def __bool__(self):
        # Without this, __len__ would decide truth, and raise for modules that are not containers.
        return bool(self._orig_mod)

    def __repr__(self):
        return f"OptimizedModule({self._orig_mod!r})"


def compile(model=None, *, fullgraph=False, dynamic=None, mode=None, backend="default", options=None, disable=False):
    """Compile a function or nn.Module; returns a callable with the same behaviour.

    Usable as ``compile(fn)``, ``@compile``, ``@compile(fullgraph=True)``, ``compile(module)`` and
    ``compile(functools.partial(fn, ...))``. ``fullgraph=True`` raises ``fastcomp.Unsupported`` where the code
    cannot be captured in one graph. ``mode="reduce-overhead"`` (or ``options={"cuda_graphs": True}``) replays
    graphs on the CUDA backend as CUDA graphs; ``mode="max-autotune"`` does the same (fastcomp's tuning of
    matrix products, ``config.matmul_tuning``, is on in every mode), and ``"max-autotune-no-cudagraphs"`` is the
    default mode. ``mode`` and ``options`` together raise ``RuntimeError``, as in torch.
    """
    runs_as = _runs_as(mode, options)
    _check_choice("backend", backend, BACKENDS)
    if dynamic not in (None, True, False):
        raise TypeError(f"fastcomp.compile: dynamic must be None, True or False, got {dynamic!r}")
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
    dispatcher = _C.make_dispatcher(model, target, fullgraph, dynamic, runs_as, backend)
    if isinstance(model, torch.nn.Module):
        kwargs = dict(fullgraph=fullgraph, dynamic=dynamic, mode=mode, backend=backend, options=options)
        return OptimizedModule(model, dispatcher, kwargs)
    functools.update_wrapper(dispatcher, model)
    return dispatcher


def _compile_module(module, compile_kwargs):
    """Unpickling and copying an OptimizedModule: compile the (copied) module again."""
    return compile(module, **compile_kwargs)


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
    """Forget what fastcomp compiled and decided in this process, like torch._dynamo.reset().

    Cleared: every compiled entry of every function and resume function (guards, graphs, executables, CUDA
    graphs and their memory pools, so ``torch.cuda.memory_allocated()`` returns to where it was); the compile
    counters that number entries in logs (``0/1``) and the warn-once flags (recompile limit, eager fallback); the
    input sizes seen and the automatic-dynamic decisions made, so the next call compiles static first again.

    Kept: compiled kernels and cuBLASLt tuning decisions (in memory and in the kernel cache on disk; they only
    save time), automatic-dynamic decisions on disk (``config.automatic_dynamic_on_disk``), ``fastcomp.config``,
    log settings, and ``mark_dynamic``/``mark_static`` marks on tensors.
    """
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
