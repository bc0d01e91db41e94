"""Regression check on CUDA: W5 called with batch sizes 8, 16, 24, 5 (each a recompile with static shapes) must
match eager and not crash. python scripts/recompile_on_cuda.py"""
import torch

import fastcomp
from benchmarks.workloads import WORKLOADS

model, _ = WORKLOADS["W5"].make("cuda", 1.0)
compiled = fastcomp.compile(model)
with torch.no_grad():
    for batch in (8, 16, 24, 5):
        x = torch.randn(batch, 512, device="cuda")
        print(batch, f"max |compiled - eager| = {(compiled(x) - model(x)).abs().max().item():.2e}", flush=True)
