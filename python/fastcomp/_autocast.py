"""Autocast in compiled code: the state a graph's guards compare, the casts autocast makes while tracing, and the
two calls a `with torch.autocast(...)` block becomes in a graph that keeps autocast.

Autocast is a dispatch key of the device's tensors: an op in its lists casts its floating-point arguments (to the
region's dtype, or to float32) before it runs. Meta tensors carry no device, so autocast never applies to them:
under autocast an op is also run on stand-ins that report the real device (a wrapper subclass, whose ops run on
the meta tensors inside), and what autocast did shows in the aten calls they see. The lists stay torch's,
whatever its version.

A graph is traced in one of two ways:
- explicit casts (explicit_casts()): each op becomes its casts as nodes of their own and the op on the cast
  tensors, which runs without autocast; the graph needs no autocast at run time, and a backend sees only ordinary
  ops. An op takes this form only where that is provably what autocast does: its aten calls without autocast, after
  those casts, are exactly those it makes under autocast.
- autocast kept (trace_meta()): where some op's calls differ (or gradients are recorded, whose casts autocast
  caches), the graph keeps the blocks as enter()/leave() calls and runs its ops under autocast, as eager does.
"""
import itertools

import torch
import torch.utils._pytree as pytree

import fastcomp.config


def state():
    """What autocast does now: for "cpu" and "cuda" (the device types traced under autocast) whether it is on and its
    dtype, and whether casts are cached. Guards of graphs traced under autocast, or with a block, compare it."""
    return (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"), torch.is_autocast_enabled("cuda"),
            torch.get_autocast_dtype("cuda"), torch.is_autocast_cache_enabled())


def only_known_devices():
    """False when autocast is on for a device type other than cpu and cuda (xpu, mps, ...)."""
    return torch._C._is_any_autocast_enabled() == any(state()[0:4:2])


def enter(device_type, enabled, dtype, cache_enabled):
    """Entering `torch.autocast(device_type, dtype, enabled, cache_enabled)`, as its __enter__ does."""
    torch.set_autocast_enabled(device_type, enabled)
    torch.set_autocast_dtype(device_type, dtype)
    torch.autocast_increment_nesting()
    torch.set_autocast_cache_enabled(cache_enabled)


def leave(device_type, enabled, dtype, cache_enabled):
    """Leaving a region entered with enter(): the arguments are the state outside it, as autocast's __exit__ puts
    back (and the cast cache is dropped when no region is left)."""
    if torch.autocast_decrement_nesting() == 0:
        torch.clear_autocast_cache()
    torch.set_autocast_enabled(device_type, enabled)
    torch.set_autocast_dtype(device_type, dtype)
    torch.set_autocast_cache_enabled(cache_enabled)


def suspend():
    """Turns autocast off for cpu and cuda while a graph with explicit casts runs (on every call of it: only whether
    each is on is read); returns what resume() puts back."""
    was = torch.is_autocast_enabled("cpu"), torch.is_autocast_enabled("cuda")
    torch.set_autocast_enabled("cpu", False)
    torch.set_autocast_enabled("cuda", False)
    return was


def resume(was):
    torch.set_autocast_enabled("cpu", was[0])
    torch.set_autocast_enabled("cuda", was[1])


_AUTOCAST_KEYS = {"cpu": torch._C.DispatchKey.AutocastCPU, "cuda": torch._C.DispatchKey.AutocastCUDA}


class _Recording:
    """The aten calls the stand-ins see while _recorded() runs a call."""

    def __init__(self):
        self.calls = []         # (op, arguments, keyword arguments), each tensor as a _Seen
        self.autocast_off = []  # per call: autocast was off for its device (inside autocast's own kernel of an op)
        self.elided = []        # the copies left out of `calls` (see _OnDevice.__torch_dispatch__)


_recording = None  # the _Recording while one runs


class _OnDevice(torch.Tensor):
    """A tensor of `device` without storage, standing for the meta tensor `stand_in`: autocast sees the device and
    casts; every op below it runs on the meta tensors. `origin` says where it came from: ("arg", i) / ("arg", i, j)
    for an argument (or item j of one), ("call", k, n) for the n-th tensor the k-th recorded call made."""

    @staticmethod
    def __new__(cls, stand_in, device, origin=None):
        t = torch.Tensor._make_wrapper_subclass(cls, stand_in.shape, strides=stand_in.stride(),
                                                storage_offset=stand_in.storage_offset(), dtype=stand_in.dtype,
                                                device=device, requires_grad=stand_in.requires_grad)
        t.stand_in = stand_in
        t.origin = origin if origin is not None else object()  # unknown: equal to nothing
        return t

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        device = None

        def unwrap(a):
            nonlocal device
            if isinstance(a, _OnDevice):
                device = a.device
                return a.stand_in
            if isinstance(a, torch.device):
                return torch.device("meta")
            if isinstance(a, torch.Tensor) and not a.is_meta:
                # Made on the device by a kernel below autocast without a stand-in among its arguments (CUDA
                # attention's random-number state): only its metadata matters here.
                return torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device="meta")
            if isinstance(a, (list, tuple)):
                return type(a)(unwrap(x) for x in a)
            return a

        out = func(*unwrap(args), **{k: unwrap(v) for k, v in (kwargs or {}).items()})
        if _recording is None:
            return _wrap(out, device)
        kwargs = kwargs or {}
        if func is torch.ops.aten._to_copy.default and isinstance(args[0], _OnDevice):
            kwargs = _copy_changes(args[0], kwargs)
            if not kwargs and out.stride() == args[0].stride():
                # A copy that changes nothing (CUDA autocast's softmax asks for float32 of a float32 tensor): the
                # source stands for it, so that the record says what the values go through.
                copy = _OnDevice(out, device, args[0].origin)
                _recording.elided.append(copy)
                return copy
        k = len(_recording.calls)
        _recording.calls.append((func, _seen(args), _seen(kwargs)))
        _recording.autocast_off.append(torch._C._dispatch_tls_is_dispatch_key_excluded(_AUTOCAST_KEYS[device.type]))
        made = itertools.count()
        return _wrap(out, device, lambda: ("call", k, next(made)))


def _copy_changes(source, kwargs):
    """The options of an aten._to_copy of `source` that change something."""
    unchanged = {"dtype": source.dtype, "layout": source.layout, "device": source.device, "pin_memory": False,
                 "non_blocking": False, "memory_format": torch.preserve_format}
    return {k: v for k, v in kwargs.items() if v is not None and not (k in unchanged and v == unchanged[k])}


class _Seen:
    """A tensor as a recorded call saw it: equal to another where both came from the same place with the same
    metadata."""
    __slots__ = ("key",)

    def __init__(self, t):
        self.key = (t.origin, t.dtype, tuple(t.shape), t.stride(), t.storage_offset(), t.requires_grad)

    def __eq__(self, other):
        return isinstance(other, _Seen) and self.key == other.key

    __hash__ = None


def _seen(x):
    if isinstance(x, _OnDevice):
        return _Seen(x)
    if isinstance(x, (list, tuple)):
        return type(x)(_seen(i) for i in x) if not hasattr(x, "_fields") else tuple(_seen(i) for i in x)
    if isinstance(x, dict):
        return {k: _seen(v) for k, v in x.items()}
    return x


def _wrap(x, device, origin=None):
    if isinstance(x, torch.Tensor):
        return _OnDevice(x, device, origin() if origin else None)
    if isinstance(x, (list, tuple)):
        return type(x)([_wrap(i, device, origin) for i in x])
    return x


def _wrap_arguments(args, kwargs, device):
    """The stand-ins of a call's arguments, each tensor with its place as its origin."""
    def at(x, place):
        if isinstance(x, torch.Tensor):
            return _OnDevice(x, device, place)
        if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
            return type(x)(_OnDevice(t, device, place + (j,)) if isinstance(t, torch.Tensor) else t
                           for j, t in enumerate(x))
        return x

    return (tuple(at(a, ("arg", i)) for i, a in enumerate(args)),
            {k: at(v, ("kwarg", k)) for k, v in kwargs.items()})


def _to_meta(x):
    if isinstance(x, _OnDevice):
        meta = x.stand_in.detach()
        return meta.requires_grad_().clone() if x.requires_grad else meta
    if isinstance(x, (list, tuple)):
        return type(x)([_to_meta(i) for i in x])  # a list, a tuple, a torch.return_types structseq
    return x


def _tensors(x):
    return [t for t in pytree.tree_leaves(x) if isinstance(t, torch.Tensor)]


def _dtypes(x):
    return [t.dtype for t in _tensors(x)]


def trace_meta(target, args, kwargs, device, meta_out):
    """`target(*args, **kwargs)` (meta tensors) as it runs on `device` under the autocast state now: None where
    autocast leaves the result's dtypes as `meta_out` (the meta call's result) has them, else the result's meta
    tensors. Raises what the call raises."""
    if not torch.is_autocast_enabled(device.type):
        return None
    out = target(*_wrap(args, device), **{k: _wrap(v, device) for k, v in kwargs.items()})
    if _dtypes(out) == _dtypes(meta_out):
        return None
    return _to_meta(out)


def _recorded(fn):
    """fn()'s result, the aten calls the stand-ins saw while it ran and whether autocast was off at each, with
    autocast's cast cache off (it skips a cast it made before, which would hide it from the record)."""
    global _recording
    cache = torch.is_autocast_cache_enabled()
    torch.set_autocast_cache_enabled(False)
    _recording = record = _Recording()
    try:
        out = fn()
    finally:
        _recording = None
        torch.set_autocast_cache_enabled(cache)
    if record.elided and (any(func._schema.is_mutable for func, _, _ in record.calls) or
                          any(t is c for t in _tensors(out) for c in record.elided)):
        # A copy written to, or returned, is not its source: left out, the record would not show the difference.
        raise _CopyMatters
    return out, record.calls, record.autocast_off


class _CopyMatters(Exception):
    pass


def _place_of(seen):
    """Where an argument of the call came from, for one of its own arguments; else None."""
    if not isinstance(seen, _Seen):
        return None
    origin = seen.key[0]
    return origin if isinstance(origin, tuple) and origin[0] in ("arg", "kwarg") else None


def explicit_casts(target, args, kwargs, device, other_sizes=False):
    """How `target(*args, **kwargs)` (meta tensors) runs on `device` under the autocast state now, as explicit casts:
    a list of (place, dtype), the casts of arguments autocast makes before the op (place: ("arg", i), ("arg", i, j),
    ("kwarg", name) or ("kwarg", name, j) for item j of a list), such that the op without autocast on the cast
    arguments makes exactly the aten calls it makes under autocast. An empty list where autocast changes nothing;
    where no such casts exist (the op must run under autocast), a str saying why. Raises what the op raises under
    autocast.

    `other_sizes`: the casts must hold at other sizes too (dynamic shapes), where an op that torch decomposes may
    take another path. They do where each call after the casts ran inside autocast's kernel of the op (which calls it
    with autocast off: nothing below is cast), or the op is one call (no decomposition above the stand-ins).

    The answer depends only on the op, its arguments' metadata and values and the state, so it is kept for calls
    that agree in all of them (a model's layers repeat the same calls)."""
    if not torch.is_autocast_enabled(device.type):
        return []
    if fastcomp.config.explicit_autocast != "all" and device.type != "cuda":
        return (f"fastcomp.config.explicit_autocast is {fastcomp.config.explicit_autocast!r}: {device.type} autocast "
                f"stays (its kernels may call other ops, which autocast casts in eager)")
    key = _call_key(target, args, kwargs, device, other_sizes)
    if key is not None and key in _answers:
        return _answers[key]
    answer = _worked_out(target, args, kwargs, device, other_sizes)
    if key is not None:
        if len(_answers) > 50000:
            _answers.clear()
        _answers[key] = answer
    return answer


_answers = {}


def _call_key(target, args, kwargs, device, other_sizes):
    """What explicit_casts' answer depends on, hashable; None where an argument has no exact key."""
    tensors = {}  # id -> first place: arguments that are the same tensor

    def of(x):
        if isinstance(x, torch.Tensor):
            first = tensors.setdefault(id(x), len(tensors))
            return ("T", type(x), x.dtype, tuple(x.shape), x.stride(), x.storage_offset(), x.requires_grad, first)
        if isinstance(x, (list, tuple)):
            return (type(x), tuple(of(i) for i in x))
        if isinstance(x, float):
            return (float, x.hex())
        if x is None or isinstance(x, (bool, int, str, torch.dtype, torch.device, torch.memory_format, torch.layout)):
            return (type(x), x)
        raise TypeError

    try:
        return (target, device, torch.get_autocast_dtype(device.type), torch.is_grad_enabled(), other_sizes,
                of(args), tuple(sorted((k, of(v)) for k, v in kwargs.items())))
    except TypeError:
        return None


def _worked_out(target, args, kwargs, device, other_sizes):
    """explicit_casts' answer, from the calls the op makes under autocast and without it."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in _tensors((args, kwargs))):
        # Gradients flow: autocast caches a cast of a tensor that requires grad, so that its gradients meet in one
        # cast, and an autograd.Function's backward runs under the autocast its forward saw.
        return "gradients are recorded (autocast caches the casts of tensors that require grad)"
    a, k = _wrap_arguments(args, kwargs, device)
    try:
        out, under, autocast_off = _recorded(lambda: target(*a, **k))
    except _CopyMatters:
        return "a copy it makes under autocast is written to or returned"
    casts = []
    for func, fargs, fkwargs in under:  # autocast's casts come first, before the op's own calls
        place = _place_of(fargs[0]) if func is torch.ops.aten._to_copy.default and len(fargs) == 1 else None
        if place is None or set(fkwargs) != {"dtype"} or any(p == place for p, _ in casts):
            break
        if casts and fkwargs["dtype"] != casts[0][1]:
            # Every autocast policy casts an op's arguments to one dtype (the region's, float32 or the widest); a
            # cast to another is the op's own kernel (sdpa's math path upcasting a bf16 query to float32 after
            # autocast cast the mask to bf16).
            break
        casts.append((place, fkwargs["dtype"]))
    rest = autocast_off[len(casts):]
    if other_sizes and len(rest) > 1 and not all(rest):
        return "with dynamic shapes: torch decomposes it, and autocast may cast inside it at other sizes"
    a, k = _wrap_arguments(args, kwargs, device)

    def cast_then_call_without_autocast():
        args_now = list(a)
        for place, dtype in casts:
            holder = args_now if place[0] == "arg" else k
            if len(place) == 2:
                holder[place[1]] = holder[place[1]].to(dtype)
            else:
                items = list(holder[place[1]])
                items[place[2]] = items[place[2]].to(dtype)
                holder[place[1]] = type(holder[place[1]])(items)
        enabled = torch.is_autocast_enabled(device.type)
        torch.set_autocast_enabled(device.type, False)
        try:
            return target(*args_now, **k)
        finally:
            torch.set_autocast_enabled(device.type, enabled)

    try:
        out_explicit, explicit, _ = _recorded(cast_then_call_without_autocast)
    except Exception as e:
        return f"after its casts, without autocast, it raises {type(e).__name__}: {str(e)[:200]}"
    if explicit != under or _seen(out_explicit) != _seen(out):
        calls = ", ".join(str(func) for func, _, _ in under[len(casts):][:4])
        return f"autocast does more than cast its arguments before it (its calls under autocast: {calls})"
    return casts
