"""What fastcomp.explain() says about a model that cannot be captured in one graph, and how to fix it.

    python3 examples/explain_graph_break.py

The forward below reads a tensor's value with `.item()` to decide a branch: a graph cannot hold a Python value
computed from tensor data, so fastcomp compiles the graph up to there, lets CPython run the `if`, and compiles
the rest as a second graph. explain() lists both graphs and the break with its code, your line and a hint;
FASTCOMP_LOGS=graph_breaks logs the same when it happens.
"""
import torch

import fastcomp


class GatedMLP(torch.nn.Module):
    def __init__(self, d=64):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(d, d), torch.nn.Linear(d, d)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        if h.mean().item() > 0.5:  # a data-dependent branch: graph break GB002
            h = h * 0.5
        return self.fc2(h)


class GatedMLPNoBreak(GatedMLP):
    def forward(self, x):
        h = torch.relu(self.fc1(x))
        h = torch.where(h.mean() > 0.5, h * 0.5, h)  # the same computation as tensor ops: one graph
        return self.fc2(h)


def main():
    torch.manual_seed(0)
    x = torch.randn(16, 64)
    model = GatedMLP()
    report = fastcomp.explain(model)(x)
    print(report)
    assert report.graph_count == 2 and report.graph_break_count == 1
    print(f"\nbreak: {report.break_reasons[0].code} at {report.break_reasons[0].user_loc}")

    fixed = GatedMLPNoBreak()
    fixed.load_state_dict(model.state_dict())
    report = fastcomp.explain(fixed)(x)
    print(f"with torch.where instead: {report.graph_count} graph, {report.graph_break_count} breaks")
    torch.testing.assert_close(fastcomp.compile(fixed)(x), model(x))


if __name__ == "__main__":
    main()
