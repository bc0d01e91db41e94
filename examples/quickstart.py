"""fastcomp in a minute: compile a model, check it computes what eager PyTorch computes, see what was captured,
and time both.

    python3 examples/quickstart.py        # on the CPU, or on a GPU when CUDA is available
"""
import time

import torch
import torch.nn.functional as F

import fastcomp


class Block(torch.nn.Module):
    """A pre-norm MLP block with a residual, the kind of layer transformers repeat."""

    def __init__(self, d=256, hidden=1024):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.up = torch.nn.Linear(d, hidden)
        self.down = torch.nn.Linear(hidden, d)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


def per_call_us(fn, x, repeats=200):
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    fn(x)
    sync()
    start = time.perf_counter()
    for _ in range(repeats):
        fn(x)
    sync()
    return (time.perf_counter() - start) / repeats * 1e6


def main():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = Block().to(device).eval()
    x = torch.randn(8, 256, device=device)

    compiled = fastcomp.compile(model)
    with torch.no_grad():
        start = time.perf_counter()
        out = compiled(x)  # the first call traces the forward into a graph and runs it
        first_call_ms = (time.perf_counter() - start) * 1e3
        torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-5)
        fastcomp.wait_for_compiles()  # on a GPU the kernels compile in the background; wait before timing
        print(fastcomp.explain(compiled)(x))
        eager, fast = per_call_us(model, x), per_call_us(compiled, x)
    print(f"\nBlock on {device}: first call (trace + run) {first_call_ms:.1f} ms; "
          f"per call: eager {eager:.1f} us, fastcomp {fast:.1f} us")


if __name__ == "__main__":
    main()
