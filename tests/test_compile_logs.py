"""FASTCOMP_LOGS / set_logs topics carry what the compiler decided: recompiles, guards, graphs, breaks."""
import logging

import pytest
import torch

import fastcomp


@pytest.fixture
def logs(caplog):
    caplog.set_level(logging.DEBUG, logger="fastcomp")
    yield caplog
    fastcomp.set_logs()


def messages(caplog, topic):
    return [r.getMessage() for r in caplog.records if r.name == f"fastcomp.{topic}"]


def f(x):
    return torch.relu(x) * 2


def test_recompiles_topic_logs_dynamo_style_reason(logs):
    fastcomp.set_logs(recompiles=True)
    compiled = fastcomp.compile(f)
    compiled(torch.randn(8))
    compiled(torch.randn(8))
    assert messages(logs, "recompiles") == []
    compiled(torch.randn(16))
    msg, decision = messages(logs, "recompiles")
    assert msg.startswith(f"Recompiling function f in {__file__}:{f.__code__.co_firstlineno}")
    assert "triggered by the following guard failure(s):" in msg
    assert "- " in msg and "/0: tensor 'L['x']' size mismatch at index 0. expected 8, actual 16" in msg
    # dynamic=None: the recompile traces that dimension as a symbol, and says so.
    assert decision == "dimension 0 of L['x'] became dynamic after size 8 → 16"


def test_guards_and_graph_topics_print_each_new_entry(logs):
    fastcomp.set_logs(guards=True, graph=True)
    fastcomp.compile(f)(torch.randn(4))
    (guards,) = messages(logs, "guards")
    assert "TENSOR_MATCH: L['x'] is Tensor f32[4] cpu" in guards
    (graph,) = messages(logs, "graph")
    assert "torch.relu(%0)" in graph and "operator.mul(%1, 2)" in graph


def test_disabled_topics_emit_nothing(logs):
    compiled = fastcomp.compile(f)
    compiled(torch.randn(2))
    compiled(torch.randn(3))
    assert [r for r in logs.records if r.name.startswith("fastcomp.") and r.levelno < logging.WARNING] == []


def test_graph_breaks_topic_names_the_user_line(logs):
    def g(x):
        return x.sum().item()

    fastcomp.set_logs(graph_breaks=True)
    fastcomp.compile(g)(torch.randn(3))
    (msg,) = messages(logs, "graph_breaks")
    assert "GB002" in msg and "return x.sum().item()" in msg and f"{__file__}:{g.__code__.co_firstlineno + 1}" in msg
