"""Fixtures of the emitter tests."""
import pytest

import nvrtc_ctypes


@pytest.fixture(scope="module")
def nvrtc():
    """NVRTC through ctypes (compiles emitted programs to PTX without a GPU); skips the test when it is missing."""
    found, why = nvrtc_ctypes.find()
    if found is None:
        pytest.skip(f"NVRTC not available: {why}")
    return found
