"""The seed workloads W1-W9 (shared/ANCHORS.md) compile on CPU into 1 graph with 0 breaks, equal eager's
results, and reuse their cache entry on a second call with fresh inputs of the same shapes."""
import pytest
import torch

import fastcomp
from benchmarks.workloads import WORKLOADS
from fastcomp.testing import CompileCounter
from tests.helpers import assert_as_accurate_as_eager, assert_same

TOLERANCE = {torch.float32: (1e-5, 1e-5), torch.float16: (1e-2, 1e-2), torch.bfloat16: (1e-2, 1e-2)}


@pytest.mark.parametrize("wid", sorted(WORKLOADS))
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_workload_compiles_to_one_graph_and_matches_eager(wid, grad):
    check_workload(wid, grad, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("wid", sorted(WORKLOADS))
def test_workload_on_cuda_at_full_size(wid):
    check_workload(wid, False, "cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("wid", ["W7", "W10"])
def test_workload_without_fused_attention_on_cuda(wid):
    with fastcomp.config.patch(fused_attention=False):
        check_workload(wid, False, "cuda")


def check_workload(wid, grad, device):
    w = WORKLOADS[wid]
    torch.manual_seed(0)
    model, make_inputs = w.make(device, w.quick_scale if device == "cpu" else 1.0)
    compiled = fastcomp.compile(model)
    rtol, atol = TOLERANCE[w.dtype]
    with CompileCounter() as cc, torch.set_grad_enabled(grad):
        for _ in range(2):
            inputs = make_inputs()
            if device == "cuda":
                assert_as_accurate_as_eager(compiled(*inputs), model, inputs)
            else:
                assert_same(compiled(*inputs), model(*inputs), rtol=rtol, atol=atol)
    assert (cc.frame_count, cc.graph_count, cc.break_count) == (1, 1, 0), cc.records
    if device == "cuda":  # the generated-code backend ran it, not the torch runner
        assert cc.records[0]["backend"].startswith("cuda:"), cc.records[0]["backend"]
