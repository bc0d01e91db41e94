"""Exceptions fastcomp raises. User errors and internal errors are different types."""
import sys


class FastcompError(Exception):
    """Base class of every fastcomp exception."""


class Unsupported(FastcompError):
    """fullgraph=True was requested but the code cannot be captured in one graph (message has code, file:line, hint).

    Also a ``torch._dynamo.exc.Unsupported`` once that module is imported (see ``_adopt_torch_unsupported``), so
    code written to catch torch.compile's error catches fastcomp's.
    """

    def __init__(self, msg=""):
        # Not torch's __init__ (once it is a base): that one counts the error in torch._dynamo's statistics.
        Exception.__init__(self, msg)
        self.msg = msg


class RecompileLimitExceeded(FastcompError):
    """A function recompiled more than fastcomp.config.recompile_limit times and config.error_on_recompile is set."""


class InternalError(FastcompError):
    """A bug in fastcomp (raised only when config.suppress_errors is False; otherwise it warns and runs eagerly)."""


def _adopt_torch_unsupported(module):
    """Makes torch's `module.Unsupported` (torch._dynamo.exc) a base of fastcomp.Unsupported."""
    base = getattr(module, "Unsupported", None)
    if isinstance(base, type) and issubclass(base, Exception) and base not in Unsupported.__mro__:
        Unsupported.__bases__ = (FastcompError, base)


class _AdoptWhenImported:
    """A sys.meta_path finder that adopts torch._dynamo.exc.Unsupported as a base the moment that module is imported.

    Importing it with fastcomp would import torch._dynamo and sympy, about a second of every ``import fastcomp``.
    Code that catches torch's Unsupported imports the module anyway, at the latest when its ``except`` clause
    evaluates ``torch._dynamo.exc.Unsupported``, which happens before the exception is matched against it.
    """

    name = "torch._dynamo.exc"

    def find_spec(self, name, path, target=None):
        if name != self.name:
            return None
        for finder in sys.meta_path:  # the finder that would have found it without this one
            find = getattr(finder, "find_spec", None) if finder is not self else None
            spec = find(name, path, target) if find else None
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                break
        else:
            return None
        exec_module = spec.loader.exec_module

        def exec_and_adopt(module):
            exec_module(module)
            _adopt_torch_unsupported(module)
            if self in sys.meta_path:
                sys.meta_path.remove(self)

        spec.loader.exec_module = exec_and_adopt  # this spec's own loader object: nothing else sees the change
        return spec


if _AdoptWhenImported.name in sys.modules:
    _adopt_torch_unsupported(sys.modules[_AdoptWhenImported.name])
else:
    sys.meta_path.insert(0, _AdoptWhenImported())
