"""fastcomp's logging: which topics speak (FASTCOMP_LOGS, set_logs) and where they go (Python ``logging``).

Every message, from C++ or Python, goes to ``logging.getLogger("fastcomp.<topic>")``, so your own handlers,
levels and formatters apply. Whether a message is built at all is decided first, and cheaply, by the
topic's threshold in C++, which only FASTCOMP_LOGS and set_logs change: setting a Python logger to DEBUG by
hand filters nothing in, it can only filter out. Topics start at WARNING, so warnings (such as hitting the
recompile limit) always show.

FASTCOMP_LOGS takes TORCH_LOGS's syntax with fastcomp's names: comma-separated items, whitespace ignored.

    <topic>     the topic on: INFO, or the component's level if that is more verbose
    +<topic>    the topic at DEBUG
    -<topic>    the topic's errors only
    fastcomp    every topic at INFO; +fastcomp every topic at DEBUG; -fastcomp errors only

``dynamo`` and ``all`` are aliases of ``fastcomp`` (fastcomp has one component, and ``+dynamo`` is what
TORCH_LOGS users type). A topic item beats the component item whatever their order; when a name repeats,
the last item wins. The topics are in ``TOPICS`` (recompiles, graph_breaks, guards, graph, ...).
Examples: ``FASTCOMP_LOGS="recompiles,graph_breaks"``, ``FASTCOMP_LOGS="+fastcomp,-bytecode"``.
"""
from __future__ import annotations

import difflib
import logging
import os
import sys

from fastcomp import _C

__all__ = ["TOPICS", "init_from_env", "is_enabled", "log", "parse_logs_spec", "set_logs"]

# Read from the C++ enum, so the two can't disagree.
TOPICS: tuple[str, ...] = tuple(_C.log.topic_names())
DEFAULT_LEVEL: int = _C.log.DEFAULT_LEVEL  # logging.WARNING
_COMPONENT_NAMES = ("fastcomp", "dynamo", "all")
_PREFIX_LEVELS = {"+": logging.DEBUG, "-": logging.ERROR}
_LOGGERS = {topic: logging.getLogger(f"fastcomp.{topic}") for topic in TOPICS}

# Whether `topic` passes messages at `level` (default INFO). The C++ function itself: no Python frame.
is_enabled = _C.log.enabled


def log(topic: str, level: int, msg: str) -> None:
    """Logs `msg` from fastcomp's Python code through the same threshold and logger as C++ messages.

    The record names the caller's file and line. `msg` is not %-formatted.
    """
    if _C.log.enabled(topic, level):
        _LOGGERS[topic].log(level, msg, stacklevel=2)


def parse_logs_spec(spec: str) -> dict[str, int]:
    """Turns a FASTCOMP_LOGS value into a logging level for every topic (syntax in the module docstring)."""
    component = None
    topics: dict[str, bool | int] = {}
    for item in "".join(spec.split()).split(","):
        if not item:
            continue
        level = _PREFIX_LEVELS.get(item[0])
        name = item if level is None else item[1:]
        if name in _COMPONENT_NAMES:
            component = logging.INFO if level is None else level
        elif name in TOPICS:
            topics[name] = True if level is None else level
        else:
            raise ValueError(_invalid_item_message(item, spec))
    return _resolve(component, topics)


def set_logs(**settings: bool | int | None) -> None:
    """Sets every topic's level, like ``torch._logging.set_logs``; names left out go back to their defaults.

        set_logs(recompiles=True, guards=True, graph=True, fastcomp=logging.DEBUG)

    ``fastcomp`` (or its alias ``dynamo`` or ``all``) takes a logging level or None and applies to every
    topic. A topic takes True (on: INFO, or the component's level if more verbose), False (WARNING, its
    default) or a logging level, and beats the component. ``set_logs()`` resets everything.
    """
    component_name = component = None
    topics: dict[str, bool | int] = {}
    for name, value in settings.items():
        if name in _COMPONENT_NAMES:
            if component_name is not None:
                raise TypeError(f"set_logs() got {component_name}= and {name}=, which name the same component")
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise TypeError(f"set_logs({name}=...) takes a logging level such as logging.DEBUG, or None; "
                                f"got {value!r}")
            component_name, component = name, value
        elif name in TOPICS:
            if not isinstance(value, int):
                raise TypeError(f"set_logs({name}=...) takes True, False or a logging level; got {value!r}")
            topics[name] = value
        else:
            raise TypeError(f"set_logs() got an unexpected keyword argument '{name}'{_did_you_mean(name)}\n"
                            f"Valid arguments: {', '.join((*_COMPONENT_NAMES, *TOPICS))}")
    _apply(_resolve(component, topics))


def init_from_env() -> None:
    """Applies FASTCOMP_LOGS if it is set; fastcomp calls this once, at import."""
    spec = os.environ.get("FASTCOMP_LOGS")
    if spec:
        _apply(parse_logs_spec(spec))


def _resolve(component: int | None, topics: dict[str, bool | int]) -> dict[str, int]:
    """The level of every topic, given the component's level and the topics' own settings (True: on)."""
    base = DEFAULT_LEVEL if component is None else component

    def level(topic: str) -> int:
        setting = topics.get(topic)
        if setting is None:
            return base
        if isinstance(setting, bool):
            return min(logging.INFO, base) if setting else DEFAULT_LEVEL
        return setting

    return {topic: level(topic) for topic in TOPICS}


def _apply(levels: dict[str, int]) -> None:
    for topic, level in levels.items():
        _C.log.set_level(topic, level)
        # At its default a topic's logger goes back to NOTSET (inherit), as it was before fastcomp touched it.
        _LOGGERS[topic].setLevel(logging.NOTSET if level == DEFAULT_LEVEL else level)
    anything_on = any(level < DEFAULT_LEVEL for level in levels.values())
    fastcomp_logger = logging.getLogger("fastcomp")
    # Both are no-ops when the handler is already there, or already gone.
    (fastcomp_logger.addHandler if anything_on else fastcomp_logger.removeHandler)(_HANDLER)


class _FallbackStderrHandler(logging.StreamHandler):
    """Prints fastcomp's records to stderr, but only those that no other handler will see.

    Decided per record, like ``logging.lastResort``, rather than when set_logs runs: FASTCOMP_LOGS is read
    at import, usually before the program calls ``logging.basicConfig()``, whose handler must then take
    over instead of every line printing twice.
    """

    def __init__(self) -> None:
        logging.Handler.__init__(self)  # StreamHandler's __init__ would pin today's sys.stderr
        self.setFormatter(logging.Formatter("%(levelname).1s%(asctime)s.%(msecs)03d [%(name)s] %(message)s",
                                            datefmt="%m%d %H:%M:%S"))

    @property
    def stream(self):
        return sys.stderr  # looked up per record, so redirections of sys.stderr apply

    def handle(self, record: logging.LogRecord) -> bool:
        return False if self._another_handler_sees(record) else super().handle(record)

    def _another_handler_sees(self, record: logging.LogRecord) -> bool:
        logger = logging.getLogger(record.name)
        while logger is not None:
            if any(handler is not self for handler in logger.handlers):
                return True
            if not logger.propagate:
                return False
            logger = logger.parent
        return False


_HANDLER = _FallbackStderrHandler()


def _did_you_mean(name: str, prefix: str = "") -> str:
    close = difflib.get_close_matches(name, (*_COMPONENT_NAMES, *TOPICS), n=1)
    return f"; did you mean '{prefix}{close[0]}'?" if close else ""


def _invalid_item_message(item: str, spec: str) -> str:
    prefix = item[0] if item[0] in _PREFIX_LEVELS else ""
    return (f"\nInvalid log settings: '{item}' in FASTCOMP_LOGS={spec!r} is not a fastcomp log name"
            f"{_did_you_mean(item[len(prefix):], prefix)}\n"
            "FASTCOMP_LOGS must be a comma-separated list of the names below, each optionally prefixed with "
            "'+' (DEBUG) or '-' (errors only).\n"
            f"Valid settings:\n{', '.join((*_COMPONENT_NAMES, *TOPICS))}")
