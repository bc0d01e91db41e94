"""Fixtures of the CUDA backend's tests."""
import pytest

from fastcomp import _C


@pytest.fixture
def rehearse():
    """The CUDA backend in rehearsal: CPU graphs lowered and emitted as for an H100, their CUDA C compiled to PTX,
    run through torch. Skips the test without NVRTC."""
    try:
        _C._testing.nvrtc_version()
    except Exception as e:  # the CUDA runtime's own search failed: nothing to compile with
        pytest.skip(f"NVRTC is not available: {e}")
    _C.set_rehearse_cuda_backend(True)
    yield
    _C.set_rehearse_cuda_backend(False)
