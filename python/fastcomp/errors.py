"""Exceptions fastcomp raises. User errors and internal errors are different types."""


class FastcompError(Exception):
    """Base class of every fastcomp exception."""


class Unsupported(FastcompError):
    """fullgraph=True was requested but the code cannot be captured in one graph (message has code, file:line, hint)."""


class RecompileLimitExceeded(FastcompError):
    """A function recompiled more than fastcomp.config.recompile_limit times and config.error_on_recompile is set."""


class InternalError(FastcompError):
    """A bug in fastcomp (raised only when config.suppress_errors is False; otherwise it warns and runs eagerly)."""
