import os
import sys
import warnings

import pytest
import torch

# Decisions fastcomp keeps on disk (kernels, which dimensions are dynamic) must not leak between test runs.
os.environ["FASTCOMP_CACHE_DIR"] = __import__("tempfile").mkdtemp(prefix="fastcomp-tests-")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)  # so tests can import benchmarks.workloads


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _fresh_fastcomp():
    import fastcomp

    fastcomp.reset()
    # Tests see the compiled code on the first call; test_background_compile turns it back on.
    with warnings.catch_warnings(record=True) as seen, fastcomp.config.patch(background_compile=False):
        yield
    fastcomp.reset()
    for w in seen:  # shown as if not caught here
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
    # A guard set that rejects the inputs it was built from, or an exception escaping a compile, is a fastcomp
    # bug even where the eager fallback hides it from the result.
    internal = [str(w.message) for w in seen if "fastcomp" in str(w.message) and "internal error" in str(w.message)]
    if internal:
        pytest.fail("fastcomp warned of an internal error:\n" + "\n".join(internal), pytrace=False)
