"""Activation checkpointing (torch.utils.checkpoint): the checkpointed function runs again in backward, in CPython,
and without reentrant must save the same tensors as its first run. Frames run under saved-tensor hooks therefore
run in CPython too; the rest of the model compiles; losses and gradients are eager's."""
import copy

import pytest
import torch
from torch.utils.checkpoint import checkpoint

import fastcomp
from fastcomp.testing import CompileCounter


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down, self.norm = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8), torch.nn.LayerNorm(8)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class Net(torch.nn.Module):
    def __init__(self, reentrant):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block() for _ in range(2))
        self.reentrant = reentrant

    def forward(self, x):
        x = x.sin()
        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=self.reentrant)
        return x.cos().pow(2).mean()


@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
def test_checkpointed_blocks_give_eager_loss_and_gradients(reentrant):
    torch.manual_seed(0)
    model = Net(reentrant)
    twin = copy.deepcopy(model)
    compiled = fastcomp.compile(twin)
    for _ in range(2):
        x = torch.randn(4, 8, requires_grad=True)  # reentrant checkpoint needs an input that requires grad
        expected = model(x)
        expected.backward()
        got = compiled(x)
        got.backward()
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=0, atol=0, msg=name)


def test_a_graph_compiled_outside_checkpoint_is_not_used_inside_it():
    torch.manual_seed(0)
    block = Block()
    compiled = fastcomp.compile(block)
    x = torch.randn(4, 8, requires_grad=True)
    with CompileCounter() as cc:
        compiled(x).sum().backward()  # a graph
    assert (cc.graph_count, cc.break_count) == (1, 0)
    with CompileCounter() as cc:
        y = checkpoint(compiled, x, use_reentrant=False)  # under checkpoint's hooks: a recompile, run in CPython
        y.sum().backward()
    assert cc.frame_count == 1 and cc.graph_count == 0
    assert "saved_tensor_hooks_active() == False (actual True)" in cc.recompile_reasons[0]
    with CompileCounter() as cc:
        compiled(x).sum().backward()  # outside again: the first entry
    assert cc.frame_count == 0

