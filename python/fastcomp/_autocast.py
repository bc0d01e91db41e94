"""Autocast in compiled code: the state a graph's guards compare, the two calls a `with torch.autocast(...)` block
becomes in the graph, and the dtypes ops get under it while tracing.

Autocast is a dispatch key of the device's tensors: an op in its lists casts its floating-point arguments (to the
region's dtype, or to float32) before it runs. Graphs run their ops as torch calls under the same autocast state
as eager, so their values are eager's by construction; what the tracer must know is each result's dtype. Meta
tensors carry no device, so autocast never applies to them: under autocast an op is also run on stand-ins that
report the real device (a wrapper subclass, whose ops run on the meta tensors inside), and autocast's casts show
in the result. The lists stay torch's, whatever its version.
"""
import torch

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


class _OnDevice(torch.Tensor):
    """A tensor of `device` without storage, standing for the meta tensor `stand_in`: autocast sees the device and
    casts; every op below it runs on the meta tensors."""

    @staticmethod
    def __new__(cls, stand_in, device):
        t = torch.Tensor._make_wrapper_subclass(cls, stand_in.shape, strides=stand_in.stride(),
                                                storage_offset=stand_in.storage_offset(), dtype=stand_in.dtype,
                                                device=device, requires_grad=stand_in.requires_grad)
        t.stand_in = stand_in
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
            if isinstance(a, (list, tuple)):
                return type(a)(unwrap(x) for x in a)
            return a

        out = func(*unwrap(args), **{k: unwrap(v) for k, v in (kwargs or {}).items()})
        return _wrap(out, device)


def _wrap(x, device):
    if isinstance(x, torch.Tensor):
        return _OnDevice(x, device)
    if isinstance(x, (list, tuple)):
        return type(x)([_wrap(i, device) for i in x])
    return x


def _to_meta(x):
    if isinstance(x, _OnDevice):
        meta = x.stand_in.detach()
        return meta.requires_grad_().clone() if x.requires_grad else meta
    if isinstance(x, (list, tuple)):
        return type(x)([_to_meta(i) for i in x])  # a list, a tuple, a torch.return_types structseq
    return x


def _dtypes(x):
    if isinstance(x, torch.Tensor):
        return [x.dtype]
    if isinstance(x, (list, tuple)):
        return [d for i in x for d in _dtypes(i)]
    return []


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

