"""Training with a compiled model: forward compiled, backward and the optimizer as usual.

    python3 examples/training_step.py

Graphs whose outputs need gradients run op by op through torch (autograd records them as in eager), so
loss.backward() and the optimizer work unchanged; what fastcomp saves here is Python's per-op overhead of the
forward. The compiled model and the eager one start from the same weights and stay equal step by step.
"""
import copy

import torch
import torch.nn.functional as F

import fastcomp


class Classifier(torch.nn.Module):
    def __init__(self, d_in=32, hidden=64, classes=10):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(d_in, hidden), torch.nn.GELU(), torch.nn.LayerNorm(hidden),
                                       torch.nn.Linear(hidden, classes))

    def forward(self, x):
        return self.net(x)


def train(model, batches, steps):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for step in range(steps):
        x, y = batches[step % len(batches)]
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def main():
    torch.manual_seed(0)
    batches = [(torch.randn(16, 32), torch.randint(0, 10, (16,))) for _ in range(4)]
    eager_model = Classifier()
    compiled_model = fastcomp.compile(copy.deepcopy(eager_model))  # the same starting weights

    eager = train(eager_model, batches, steps=20)
    compiled = train(compiled_model, batches, steps=20)
    for step in (0, 9, 19):
        print(f"step {step:2d}: loss eager {eager[step]:.4f}, compiled {compiled[step]:.4f}")
    torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-5)
    assert compiled[-1] < compiled[0]


if __name__ == "__main__":
    main()
