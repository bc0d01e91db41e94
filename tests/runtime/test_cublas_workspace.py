"""The cuBLASLt workspace (csrc/runtime/cublas_workspace.h): 32 MiB per CUDA stream, shared by every compiled graph
that multiplies on that stream, given back when the last of them is gone (GPU tests)."""
import gc

import pytest
import torch

import fastcomp
from tests.helpers import assert_same

WORKSPACE_BYTES = 32 << 20


def settled_memory():
    gc.collect()
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated()


def products():
    """Two graphs with matrix products (different functions: two executables) and their inputs."""
    def first(x, w):
        return torch.relu(x @ w) + 1

    def second(x, w):
        return torch.sigmoid(x @ w.t()) * 2

    x, w = torch.randn(256, 256, device="cuda"), torch.randn(256, 256, device="cuda")
    return (first, second), (x, w)


@pytest.mark.gpu
def test_graphs_on_one_stream_share_one_workspace_and_give_it_back():
    fns, args = products()
    expected = [f(*args) for f in fns]  # also gives torch's own cuBLAS its workspace before the baseline
    baseline = settled_memory()
    compiled = [fastcomp.compile(f) for f in fns]
    with torch.no_grad():
        for c, e in zip(compiled, expected):
            c(*args)
            fastcomp.wait_for_compiles()
            assert_same(c(*args), e, rtol=1e-4, atol=1e-4)
        after_both = settled_memory()
        # One workspace for the stream, not one per graph (the outputs above are gone).
        assert after_both - baseline == WORKSPACE_BYTES, (after_both - baseline)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            out = compiled[0](*args)
        side.synchronize()
        assert_same(out, expected[0], rtol=1e-4, atol=1e-4)
        del out
        assert settled_memory() - baseline == 2 * WORKSPACE_BYTES  # the side stream has its own
    del compiled
    fastcomp.reset()
    assert settled_memory() == baseline
