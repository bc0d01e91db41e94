"""Fan-out of the native core's per-compile records to Python subscribers (explain, testing.CompileCounter)."""
import contextlib

from fastcomp import _C

_subscribers = []


def _dispatch(record):
    for callback in list(_subscribers):
        callback(record)


@contextlib.contextmanager
def subscribe(callback):
    """Calls `callback(record_dict)` for every compile while the context is active."""
    _subscribers.append(callback)
    try:
        yield
    finally:
        _subscribers.remove(callback)


_C.set_compile_observer(_dispatch)
