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
