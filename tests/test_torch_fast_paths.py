"""The C fast paths guards use to read torch (runtime/torch_shim.h, runtime/torch_state.h) are found in the
torch under test: each one that is not logs a perf hint, and none may appear. Their answers are checked by the
guard tests (test_guards.py), which run through them."""
from test_logging import run_python

FALLBACK_HINTS = (
    "guards read tensors through torch's Python getters",
    "guards find each tensor's at::Tensor through Tensor._cdata",
    "global-state guards ask torch through Python",
)


def test_guards_read_torch_without_python_calls():
    result = run_python("""
        import torch, fastcomp
        f = fastcomp.compile(lambda x, w: x * 2 + w)
        x, w = torch.randn(8), torch.nn.Parameter(torch.randn(8))
        torch.testing.assert_close(f(x, w), x * 2 + w)
        torch.testing.assert_close(f(x, w), x * 2 + w)
        print("ran")
    """, fastcomp_logs="perf_hints")
    assert result.returncode == 0, result.stderr
    assert "ran" in result.stdout
    for hint in FALLBACK_HINTS:
        assert hint not in result.stderr, result.stderr
