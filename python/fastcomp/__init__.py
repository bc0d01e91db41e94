"""fastcomp: torch.compile's API, with capture in C++ and compile times in milliseconds."""
from fastcomp import _C  # noqa: F401
