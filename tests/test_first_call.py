"""The first call of a process: trace-time metadata never pulls torch's heavy imports (sympy, torch.fx) into it,
and when something else does, FASTCOMP_LOGS=compile says so. Each test runs in a fresh interpreter."""
import os
import re
import subprocess
import sys
import textwrap

import torch

import fastcomp

ROOT = os.path.dirname(os.path.dirname(fastcomp.__file__))


def run_fresh(code, **env_vars):
    env = {k: v for k, v in os.environ.items() if k != "FASTCOMP_LOGS"}
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])), **env_vars)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return out


def test_first_call_with_softmax_and_a_causal_mask_imports_neither_sympy_nor_torch_fx():
    out = run_fresh("""
        import sys, time, torch, fastcomp
        import torch.nn.functional as F

        def attention_scores(q, k):
            causal = torch.ones(8, 8, dtype=torch.bool).triu(1)
            s = (q @ k.transpose(-2, -1)).masked_fill(causal, float("-inf")) * 0.125
            return F.softmax(s, dim=-1) + torch.softmax(s, -1) + s.softmax(-1) + F.log_softmax(s, -1) \\
                + s.log_softmax(dim=1) + torch.log_softmax(s, -1, dtype=torch.float32)

        q, k = torch.randn(2, 8, 16), torch.randn(2, 8, 16)
        start = time.perf_counter()
        out = fastcomp.compile(attention_scores)(q, k)
        ms = (time.perf_counter() - start) * 1e3
        print(sorted(m for m in ("sympy", "torch.fx.experimental.symbolic_shapes", "torch._dynamo") if m in sys.modules))
        print(f"{ms:.1f} ms")
        torch.testing.assert_close(out, attention_scores(q, k))  # (assert_close itself imports sympy)
    """)
    lines = out.stdout.splitlines()
    assert lines[0] == "[]", out.stdout
    print("first call with softmax:", lines[1])  # the target is 50 ms on the 2-core CPU machine


def test_compile_log_says_when_a_trace_imports_modules():
    out = run_fresh("""
        import torch, fastcomp

        def f(x):
            return x.amax(-1) + 1  # torch's meta function of amax imports torch.fx's symbolic shapes (and sympy)

        fastcomp.compile(f)(torch.randn(4, 4))
    """, FASTCOMP_LOGS="compile")
    (line,) = [l for l in out.stderr.splitlines() if "imported" in l]
    assert re.search(r"\[fastcomp.compile\] tracing f \(<string>:4\) imported \d+ modules "
                     r"\(torch\.fx\.experimental\.symbolic_shapes and what it imports\) in a trace of [\d.]+ ms: "
                     r"torch imports them on the first use of some of its functions; later compiles do not pay it$",
                     line), line


def test_dump_dir_writes_graph_and_guards_of_cpu_graphs(tmp_path):
    def f(x):
        return torch.relu(x) * 2

    with fastcomp.config.patch(dump_dir=str(tmp_path)):
        fastcomp.compile(f)(torch.randn(3))
    (folder,) = tmp_path.iterdir()
    assert sorted(p.name for p in folder.iterdir()) == ["graph.txt", "guards.txt"]
    graph = (folder / "graph.txt").read_text()
    assert graph.startswith("%0 = input L['x']  # f32[3] cpu\n%1 = torch.relu(%0)")
    assert "TENSOR_MATCH: L['x'] is Tensor f32[3] cpu\n" in (folder / "guards.txt").read_text()
