"""fastcomp: torch.compile's API, with capture in C++ and compile times in milliseconds.

Public API: compile, mark_dynamic, mark_static, disable, reset, is_compiling, explain, set_logs, config, errors.
"""
from fastcomp import _C, _events, _logging, config, errors  # noqa: F401
from fastcomp._logging import set_logs
from fastcomp.api import (OptimizedModule, compile, disable, is_compiling, mark_dynamic, mark_static, reset,
                          wait_for_compiles)
from fastcomp.errors import FastcompError, InternalError, RecompileLimitExceeded, Unsupported

_C.register_special("Unsupported", Unsupported)
_C.register_special("RecompileLimitExceeded", RecompileLimitExceeded)
_C.register_special("InternalError", InternalError)

__all__ = ["compile", "mark_dynamic", "mark_static", "wait_for_compiles", "set_logs", "disable", "reset", "is_compiling", "explain", "config", "errors", "OptimizedModule",
           "ExplainOutput", "FastcompError", "Unsupported", "RecompileLimitExceeded", "InternalError"]
__version__ = "0.1.0"

_logging.init_from_env()


def __getattr__(name):
    # explain() and ExplainOutput load on first use: their module's dataclasses cost a warm start ~1 ms, and most
    # programs never explain.
    if name in ("explain", "ExplainOutput"):
        from fastcomp import _explain

        globals().update(explain=_explain.explain, ExplainOutput=_explain.ExplainOutput)
        return globals()[name]
    raise AttributeError(f"module 'fastcomp' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | {"explain", "ExplainOutput"})
