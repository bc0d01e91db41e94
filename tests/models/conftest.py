import pytest

from benchmarks.models import import_torchvision_beside_a_cpu_torch


try:  # timm and transformers import torchvision, whose PyPI build needs a shim beside a CPU torch
    import_torchvision_beside_a_cpu_torch()
except Exception:  # no torchvision at all: transformers runs without it, the timm tests skip
    pass


@pytest.fixture(autouse=True)
def _quiet_transformers():
    try:
        import transformers
    except ImportError:
        yield
        return
    transformers.logging.set_verbosity_error()
    yield
