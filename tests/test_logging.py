"""Logging: FASTCOMP_LOGS parsing, set_logs, and the C++ -> Python logging bridge (fastcomp._C.log)."""
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fastcomp import _C
from fastcomp import _logging as fclog

DEBUG, INFO, WARNING, ERROR, CRITICAL = (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR,
                                         logging.CRITICAL)
TOPICS = ("recompiles", "graph_breaks", "guards", "graph", "output_code", "bytecode", "dynamic", "cudagraphs",
          "perf_hints", "compile")
PYTHON_DIR = Path(fclog.__file__).resolve().parents[1]


class ListHandler(logging.Handler):
    def __init__(self):
        super().__init__(logging.NOTSET)
        self.records = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture(autouse=True)
def default_logs():
    fclog.set_logs()
    yield
    fclog.set_logs()


@pytest.fixture
def records():
    """Records reaching a user's handler on the "fastcomp" logger."""
    handler = ListHandler()
    logger = logging.getLogger("fastcomp")
    logger.addHandler(handler)
    yield handler.records
    logger.removeHandler(handler)


def levels(**overrides):
    return {topic: overrides.get(topic, WARNING) for topic in TOPICS}


def run_python(code, fastcomp_logs=None):
    """Runs `code` in a fresh interpreter; a hang fails through subprocess.TimeoutExpired."""
    env = {k: v for k, v in os.environ.items() if k != "FASTCOMP_LOGS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PYTHON_DIR), env.get("PYTHONPATH")]))
    if fastcomp_logs is not None:
        env["FASTCOMP_LOGS"] = fastcomp_logs
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=60)


# Topics and defaults


def test_topics_match_cpp_enum():
    assert fclog.TOPICS == TOPICS
    assert tuple(_C.log.topic_names()) == TOPICS


def test_nothing_below_warning_is_enabled_in_a_fresh_process():
    result = run_python("""
        import logging
        from fastcomp import _C, _logging
        _logging.init_from_env()
        print([(t, _logging.is_enabled(t), _C.log.enabled(t, logging.WARNING)) for t in _logging.TOPICS])
        print(logging.getLogger("fastcomp").handlers)
    """)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == repr([(t, False, True) for t in TOPICS])
    assert lines[1] == "[]"


def test_is_enabled_follows_the_topic_level():
    assert not fclog.is_enabled("recompiles")
    fclog.set_logs(recompiles=True)
    assert fclog.is_enabled("recompiles")
    assert not fclog.is_enabled("recompiles", DEBUG)
    assert not fclog.is_enabled("guards")


def test_unknown_topic_in_binding_names_the_valid_ones():
    with pytest.raises(ValueError, match="unknown fastcomp log topic 'recompile'; valid topics: recompiles, "):
        fclog.is_enabled("recompile")


# FASTCOMP_LOGS parsing


@pytest.mark.parametrize("spec, expected", [
    ("", levels()),
    ("recompiles", levels(recompiles=INFO)),
    ("recompiles,graph_breaks", levels(recompiles=INFO, graph_breaks=INFO)),
    ("+recompiles", levels(recompiles=DEBUG)),
    ("-guards", levels(guards=ERROR)),
    ("fastcomp", {t: INFO for t in TOPICS}),
    ("+fastcomp", {t: DEBUG for t in TOPICS}),
    ("-fastcomp", {t: ERROR for t in TOPICS}),
    ("+fastcomp,-bytecode", {**{t: DEBUG for t in TOPICS}, "bytecode": ERROR}),
    ("-fastcomp,recompiles", {**{t: ERROR for t in TOPICS}, "recompiles": INFO}),
    ("recompiles,-fastcomp", {**{t: ERROR for t in TOPICS}, "recompiles": INFO}),
    ("+fastcomp,recompiles", {t: DEBUG for t in TOPICS}),  # "on" never makes a topic quieter
    ("recompiles,+recompiles", levels(recompiles=DEBUG)),  # the last item wins
    (" recompiles , +guards ,", levels(recompiles=INFO, guards=DEBUG)),
])
def test_parse_logs_spec(spec, expected):
    assert fclog.parse_logs_spec(spec) == expected


@pytest.mark.parametrize("alias", ["dynamo", "all"])
def test_component_aliases(alias):
    for prefix in ("", "+", "-"):
        assert fclog.parse_logs_spec(prefix + alias) == fclog.parse_logs_spec(prefix + "fastcomp")


def test_unknown_name_error_lists_the_valid_names():
    with pytest.raises(ValueError) as info:
        fclog.parse_logs_spec("+fastcomp,+recompile")
    message = str(info.value)
    assert "Invalid log settings: '+recompile' in FASTCOMP_LOGS='+fastcomp,+recompile'" in message
    assert "did you mean '+recompiles'?" in message
    assert message.endswith("Valid settings:\nfastcomp, dynamo, all, " + ", ".join(TOPICS))


@pytest.mark.parametrize("spec", ["+", "++fastcomp", "recompiles;guards", "aot", "torch._dynamo"])
def test_malformed_items_are_rejected(spec):
    with pytest.raises(ValueError, match="Invalid log settings"):
        fclog.parse_logs_spec(spec)


# set_logs


def test_set_logs_sets_cpp_and_python_levels_and_reset_restores_them():
    fastcomp_logger = logging.getLogger("fastcomp")
    fclog.set_logs(recompiles=True, guards=True, graph=True, fastcomp=DEBUG)
    assert {t: _C.log.get_level(t) for t in TOPICS} == {t: DEBUG for t in TOPICS}
    assert logging.getLogger("fastcomp.recompiles").level == DEBUG
    assert sum(isinstance(h, logging.StreamHandler) for h in fastcomp_logger.handlers) == 1

    fclog.set_logs(recompiles=True)
    assert {t: _C.log.get_level(t) for t in TOPICS} == levels(recompiles=INFO)
    assert logging.getLogger("fastcomp.recompiles").level == INFO
    assert logging.getLogger("fastcomp.guards").level == logging.NOTSET
    assert len(fastcomp_logger.handlers) == 1

    fclog.set_logs()
    assert {t: _C.log.get_level(t) for t in TOPICS} == levels()
    assert all(logging.getLogger(f"fastcomp.{t}").level == logging.NOTSET for t in TOPICS)
    assert fastcomp_logger.handlers == []


def test_set_logs_topic_values():
    fclog.set_logs(fastcomp=DEBUG, recompiles=True, guards=False, graph=ERROR)
    assert {t: _C.log.get_level(t) for t in TOPICS} == {
        **{t: DEBUG for t in TOPICS}, "guards": WARNING, "graph": ERROR}
    fclog.set_logs(dynamo=ERROR)
    assert {t: _C.log.get_level(t) for t in TOPICS} == {t: ERROR for t in TOPICS}
    assert logging.getLogger("fastcomp").handlers == []  # nothing more verbose than the default


@pytest.mark.parametrize("kwargs, message", [
    ({"recompile": True}, "unexpected keyword argument 'recompile'; did you mean 'recompiles'?"),
    ({"fastcomp": True}, r"set_logs\(fastcomp=...\) takes a logging level"),
    ({"fastcomp": DEBUG, "dynamo": INFO}, "got fastcomp= and dynamo=, which name the same component"),
    ({"guards": "yes"}, r"set_logs\(guards=...\) takes True, False or a logging level"),
])
def test_set_logs_rejects_bad_arguments(kwargs, message):
    with pytest.raises(TypeError, match=message):
        fclog.set_logs(**kwargs)


# The C++ -> Python bridge


def test_cpp_records_reach_user_handler_with_logger_name_and_level(records):
    fclog.set_logs(recompiles=DEBUG)
    for level in (DEBUG, INFO, WARNING, ERROR, CRITICAL):
        _C.log.emit("recompiles", level, f"message at {level}")
    assert [(r.name, r.levelno, r.getMessage()) for r in records] == [
        ("fastcomp.recompiles", level, f"message at {level}") for level in (DEBUG, INFO, WARNING, ERROR, CRITICAL)]
    # The record names the C++ line that logged, not whichever Python frame was running.
    assert records[0].pathname.endswith(".cpp") and records[0].lineno > 0


def test_disabled_topics_emit_nothing(records):
    fclog.set_logs(recompiles=True)
    _C.log.emit("guards", INFO, "guards are off")
    _C.log.emit("recompiles", DEBUG, "recompiles is at INFO")
    assert records == []
    _C.log.emit("guards", WARNING, "warnings pass by default")
    assert [r.getMessage() for r in records] == ["warnings pass by default"]


def test_user_levels_and_formatters_apply(records):
    fclog.set_logs(recompiles=True, guards=True)
    logging.getLogger("fastcomp.guards").setLevel(ERROR)
    _C.log.emit("guards", INFO, "filtered out by the user's level")
    _C.log.emit("recompiles", INFO, "100% literal %s")
    assert len(records) == 1
    formatter = logging.Formatter("%(levelname)s:%(name)s:%(message)s")
    assert formatter.format(records[0]) == "INFO:fastcomp.recompiles:100% literal %s"


def test_python_log_helper_goes_through_the_same_gate_and_logger(records):
    fclog.log("graph_breaks", INFO, "hidden while graph_breaks is off")
    fclog.set_logs(graph_breaks=True)
    fclog.log("graph_breaks", INFO, "Graph break in user code")
    assert [(r.name, r.levelno, r.getMessage()) for r in records] == [
        ("fastcomp.graph_breaks", INFO, "Graph break in user code")]
    assert records[0].filename == Path(__file__).name  # attributed to the caller of log()


def test_raising_user_handler_is_reported_and_does_not_crash(monkeypatch, records):
    class RaisingHandler(logging.Handler):
        def emit(self, record):
            raise RuntimeError("handler bug")

    reported = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    logger = logging.getLogger("fastcomp.recompiles")
    raising = RaisingHandler()
    logger.addHandler(raising)
    try:
        fclog.set_logs(recompiles=True)
        _C.log.emit("recompiles", INFO, "first")
    finally:
        logger.removeHandler(raising)
    assert len(reported) == 1 and isinstance(reported[0].exc_value, RuntimeError)
    _C.log.emit("recompiles", INFO, "second")
    # As in pure Python, the exception ends that record's trip up the hierarchy; later records get through.
    assert [r.getMessage() for r in records] == ["second"]


def test_helper_threads_records_wait_for_the_join_and_keep_their_text(records):
    # compile_plan's NVRTC threads log while their caller may hold the GIL: taking it would deadlock.
    fclog.set_logs(compile=DEBUG)
    _C.log.emit_from_threads("compile", DEBUG, [f"part {i}" for i in range(6)])
    assert sorted((r.name, r.levelno, r.getMessage()) for r in records) == [
        ("fastcomp.compile", DEBUG, f"part {i}") for i in range(6)]
    _C.log.emit_from_threads("compile", DEBUG, [])  # nothing kept, nothing replayed
    assert len(records) == 6


def test_concurrent_emits_with_a_handler_that_releases_the_gil_do_not_deadlock():
    # In a subprocess: a deadlock there holds the GIL, which would hang pytest instead of failing the test.
    result = run_python("""
        import logging, threading, time
        from fastcomp import _C, _logging

        class SlowHandler(logging.Handler):
            def __init__(self):
                super().__init__()
                self.count = 0

            def emit(self, record):
                time.sleep(0.0005)  # releases the GIL inside the C++ sink, as file or socket I/O would
                self.count += 1

        handler = SlowHandler()
        logging.getLogger("fastcomp").addHandler(handler)
        _logging.set_logs(compile=True)
        threads = [threading.Thread(target=lambda: [_C.log.emit("compile", logging.INFO, "m") for _ in range(50)])
                   for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(handler.count)
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "200\n"


# Environment and the fallback handler (in a subprocess: pytest installs handlers of its own)


def test_fastcomp_logs_env_is_parsed_at_init():
    result = run_python("""
        from fastcomp import _C, _logging
        _logging.init_from_env()
        print({t: _C.log.get_level(t) for t in _logging.TOPICS})
    """, fastcomp_logs="-fastcomp, +recompiles,graph_breaks")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == repr({**{t: ERROR for t in TOPICS}, "recompiles": DEBUG, "graph_breaks": INFO})


def test_invalid_fastcomp_logs_env_fails_with_the_valid_names():
    result = run_python("from fastcomp import _logging; _logging.init_from_env()", fastcomp_logs="recompile")
    assert result.returncode != 0
    assert "ValueError: \nInvalid log settings: 'recompile' in FASTCOMP_LOGS='recompile'" in result.stderr
    assert "Valid settings:\nfastcomp, dynamo, all, recompiles," in result.stderr


def test_enabled_topics_print_to_stderr_until_the_program_configures_logging():
    result = run_python("""
        import logging, sys
        from fastcomp import _C, _logging
        _logging.init_from_env()
        _C.log.emit("recompiles", logging.INFO, "Recompiling function f")
        _C.log.emit("guards", logging.INFO, "guards are off")
        logging.basicConfig(stream=sys.stdout, format="%(name)s: %(message)s")
        _C.log.emit("recompiles", logging.INFO, "after basicConfig")
    """, fastcomp_logs="recompiles")
    assert result.returncode == 0, result.stderr
    stderr = result.stderr.splitlines()
    assert len(stderr) == 1 and stderr[0].startswith("I") and stderr[0].endswith(
        " [fastcomp.recompiles] Recompiling function f")
    assert result.stdout == "fastcomp.recompiles: after basicConfig\n"
