"""Autograd state that decides whether a frame may run as a graph, read by the guards of graphs that record
gradients."""
import torch

def _top_hooks_reader():
    top = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
    if top is None:
        return None
    try:  # torch 2.5 on take `ignore_is_tracing`; earlier ones nothing
        top(False)
        return lambda: top(False)
    except TypeError:
        return top


_top_hooks = _top_hooks_reader()


def saved_tensor_hooks_active():
    """Whether `torch.autograd.graph.saved_tensors_hooks` are in effect: non-reentrant `torch.utils.checkpoint`
    pushes them around the forward of its function and, in backward, calls that function again in CPython, where
    it must save the tensors the first run saved. A graph's ops are not eager's one for one, so such frames run in
    CPython too."""
    return _top_hooks is not None and _top_hooks() is not None
