"""Compiled modules behave like the module for copies, checkpoints and container access (as torch.compile's
OptimizedModule): compiled code is not copied, and a copy of a module runs the code compiled for the original's
class (modules are guarded by class, their parameters are the graph's inputs) with its own parameters."""
import copy
import io
import pickle

import pytest
import torch

import fastcomp
from fastcomp.testing import CompileCounter


def make():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def torch_save_load(m):
    buf = io.BytesIO()
    torch.save(m, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)


@pytest.mark.parametrize("copier", [copy.deepcopy, lambda m: pickle.loads(pickle.dumps(m)), torch_save_load],
                         ids=["deepcopy", "pickle", "torch.save"])
def test_compiled_module_survives_copies_and_compiles_again(copier):
    model = make()
    compiled = fastcomp.compile(model, dynamic=False)
    x = torch.randn(3, 4)
    expected = compiled(x)
    copied = copier(compiled)
    assert isinstance(copied, fastcomp.OptimizedModule)
    assert copied._orig_mod is not model and copied[0].weight is not model[0].weight  # a copy, not a view
    assert copied._fastcomp_compile_kwargs == compiled._fastcomp_compile_kwargs
    with torch.no_grad():
        copied[0].weight.mul_(-2)  # the copy's own weights, not the original's
    eager_copy = copied._orig_mod(x)
    with CompileCounter() as cc:
        torch.testing.assert_close(copied(x), eager_copy)
        torch.testing.assert_close(compiled(x), expected)
    assert cc.frame_count == 0  # one compiled version serves both
    assert list(copied.state_dict()) == list(compiled.state_dict())


def test_ema_style_copy_tracks_its_own_weights():
    compiled = fastcomp.compile(make())
    x = torch.randn(3, 4)
    ema = copy.deepcopy(compiled)
    with torch.no_grad():
        for p in ema.parameters():
            p.mul_(0.5)
    assert not torch.allclose(ema(x), compiled(x))
    torch.testing.assert_close(ema(x), ema._orig_mod(x))


def test_compiled_container_supports_len_iter_and_indexing():
    model = make()
    compiled = fastcomp.compile(model)
    assert len(compiled) == 3
    assert list(compiled) == list(model)
    assert compiled[0] is model[0] and compiled[-1] is model[2]
    assert isinstance(compiled[:2], torch.nn.Sequential) and len(compiled[:2]) == 2
    assert model[1] in compiled
    assert bool(compiled) is True


def test_compiled_module_that_is_not_a_container_stays_truthy():
    compiled = fastcomp.compile(torch.nn.Linear(2, 2))
    assert bool(compiled) is True
    with pytest.raises(TypeError, match="object of type 'Linear' has no len()"):
        len(compiled)
