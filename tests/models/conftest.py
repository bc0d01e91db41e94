import pytest
import torch


def _import_torchvision():
    """timm (and transformers, when it is installed) import torchvision. PyPI's torchvision is a CUDA build: beside a
    CPU build of torch its ops library cannot load, and its import then fails registering fake kernels for two ops it
    could not define. Defining their schemas first lets the Python parts that the model libraries use import."""
    try:
        import torchvision  # noqa: F401
        return
    except Exception:
        pass
    import sys

    for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
        del sys.modules[name]
    lib = torch.library.Library("torchvision", "DEF")  # noqa: F841 (kept alive by the registry)
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _keep.append(lib)
    import torchvision  # noqa: F401


_keep = []
try:
    _import_torchvision()
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
