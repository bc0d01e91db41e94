"""Kernels that differ only in their name (the layers of a model) are compiled once: the program defines each
distinct kernel once and the plan still launches one kernel per fused group. CPU rehearsal (the program is
compiled to PTX with NVRTC); the GPU workload tests run W10, four such layers, against eager."""
import re

import pytest
import torch
from torch import nn

import fastcomp
from fastcomp import _C
from fastcomp.testing import CompileCounter
from tests.helpers import assert_same


@pytest.fixture(autouse=True)
def rehearse():
    try:
        _C._testing.nvrtc_version()
    except Exception as e:
        pytest.skip(f"NVRTC is not available: {e}")
    _C.set_rehearse_cuda_backend(True)
    yield
    _C.set_rehearse_cuda_backend(False)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.linear, self.norm = nn.Linear(d, d), nn.LayerNorm(d)

    def forward(self, x):
        return self.norm(torch.nn.functional.gelu(self.linear(x)) + x)


def compiled_source(model, x):
    with CompileCounter() as cc, torch.no_grad():
        out = fastcomp.compile(model)(x)
        assert_same(out, model(x), rtol=1e-5, atol=1e-5)
    assert cc.graph_count == 1 and cc.break_count == 0, cc.records
    return cc.records[0]


def test_repeated_layers_share_their_kernels():
    torch.manual_seed(0)
    model = nn.Sequential(Block(64), Block(64), Block(64)).eval()
    record = compiled_source(model, torch.randn(8, 64))
    source = record["cuda_source"]
    launched = int(re.match(r"rehearsal: (\d+) kernels", record["backend"]).group(1))
    defined = re.findall(r'extern "C" __global__ void __launch_bounds__\(\d+\) (k\d+)\(', source)
    shared = re.findall(r"(?m)^// (k\d+): the same code as (k\d+)$", source)
    assert launched == 3 * len(defined) and len(shared) == 2 * len(defined), source
    assert {first for _, first in shared} <= set(defined)


def test_kernels_of_other_shapes_are_not_shared():
    torch.manual_seed(1)
    model = nn.Sequential(Block(64), nn.Linear(64, 32), Block(32)).eval()
    source = compiled_source(model, torch.randn(8, 64))["cuda_source"]
    assert "the same code as" not in source
