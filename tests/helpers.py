"""Shared assertions for tests: compiled output equals eager output on fresh random inputs."""
import torch


def assert_same(actual, expected, rtol=1e-5, atol=1e-6):
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"expected a tensor, got {type(actual).__name__}"
        assert actual.shape == expected.shape and actual.dtype == expected.dtype and actual.device == expected.device
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)
    elif isinstance(expected, (tuple, list)):
        assert type(actual) is type(expected) and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same(a, e, rtol, atol)
    elif isinstance(expected, dict):
        assert type(actual) is type(expected) and list(actual) == list(expected)
        for k in expected:
            assert_same(actual[k], expected[k], rtol, atol)
    else:
        assert actual == expected, f"{actual!r} != {expected!r}"


def assert_as_accurate_as_eager(out, model, inputs):
    """At full size on a GPU, element-wise closeness to eager is the wrong yardstick: W6's unnormalised softmax
    of logits near 10 amplifies the rounding of whichever cuBLAS algorithm computed them (fastcomp's tuned pick
    and torch's may differ, and differ between an H100 and an H200), so both are judged against float64 eager by
    relative error, as the benchmark does."""
    from benchmarks.accuracy import compare, float64_model, to_float64

    with torch.no_grad():
        reference = float64_model(model)(*to_float64(inputs))
        verdict = compare(out, model(*inputs), reference)
    assert verdict["within_tolerance"], verdict


def pythonpath_with_this_fastcomp(*first):
    """PYTHONPATH for a child interpreter that imports the fastcomp this process imported (a checkout's python/ with
    a developer build, or site-packages after `pip install .`), after `first` and before the inherited entries."""
    import importlib.util
    import os

    spec = importlib.util.find_spec("fastcomp")
    paths = list(first) + ([os.path.dirname(os.path.dirname(spec.origin))] if spec and spec.origin else [])
    return os.pathsep.join(paths + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])

