"""fastcomp's settings. Set attributes directly (``fastcomp.config.recompile_limit = 16``); the native core
sees every change immediately. Environment variables give the start-up values:

- ``FASTCOMP_RECOMPILE_LIMIT`` (int, default 8): compiled versions per function before it runs eagerly.
- ``FASTCOMP_ERROR_ON_RECOMPILE`` (0/1): raise ``RecompileLimitExceeded`` instead of warning at the limit.
- ``FASTCOMP_SUPPRESS_ERRORS`` (0/1, default 1): internal compile failures warn and run eagerly instead of raising.
- ``FASTCOMP_CUDA_BACKEND`` (0/1, default 1): graphs on CUDA tensors run fastcomp's generated kernels and cuBLASLt
  calls; 0 runs them op by op through torch.
- ``FASTCOMP_BACKGROUND_COMPILE`` (0/1, default 1): kernels compile on a background thread while the graph runs
  through torch; 0 compiles them before the first call returns.
- ``FASTCOMP_DUMP_DIR`` (path, default unset): each compiled graph writes ``graph.txt``, ``plan.txt`` and
  ``kernels.cu`` into its own folder there.
- ``FASTCOMP_NVRTC_THREADS`` (int, default 0): threads NVRTC may use to compile one graph's kernels
  (``--split-compile``); 0 takes the CPU cores this process may run on but one, at most 8; 1 compiles on one
  thread.
- ``FASTCOMP_NVRTC_FAST_COMPILE`` ("", min, mid or max; default ""): NVRTC's ``-Ofast-compile`` level, which
  trades the generated code's speed for compile time (NVRTC 12.8 and later; ignored by older ones).
- ``FASTCOMP_MATMUL_TUNING`` (0/1, default 1): the first run of each matrix product times cuBLASLt's top candidate
  algorithms on the GPU and keeps the fastest (a few ms of GPU time per product shape, once per process); 0 keeps
  cuBLASLt's heuristic pick, so the algorithm, and with it the last bits of results, never depend on timing.
- ``FASTCOMP_FUSED_ATTENTION`` (0/1, default 1): self-attention heads whose keys and values fit in shared memory
  run as one kernel; 0 runs them as a head-splitting kernel, two batched cuBLASLt products and a softmax kernel.
- ``FASTCOMP_SMALL_MATMUL`` (0/1, default 1): ``F.linear`` (and ``nn.MultiheadAttention``'s projections) of at
  most 32 rows (under 2^25 multiply-adds, both operands contiguous along K) runs as a kernel of fastcomp's own,
  which saves the host a cuBLASLt call and needs no cuBLASLt at all (a warm start plans none); not under
  ``mode="reduce-overhead"``, whose CUDA graphs replay cuBLAS's (there faster) kernels at no host cost. 0 keeps
  cuBLASLt for every product.
"""
import contextlib
import os
import sys
import types

from fastcomp import _C

_DEFAULTS = {
    "recompile_limit": int(os.environ.get("FASTCOMP_RECOMPILE_LIMIT", "8")),
    "error_on_recompile": os.environ.get("FASTCOMP_ERROR_ON_RECOMPILE", "0") == "1",
    "suppress_errors": os.environ.get("FASTCOMP_SUPPRESS_ERRORS", "1") == "1",
    "cuda_backend": os.environ.get("FASTCOMP_CUDA_BACKEND", "1") == "1",
    "background_compile": os.environ.get("FASTCOMP_BACKGROUND_COMPILE", "1") == "1",
    "dump_dir": os.environ.get("FASTCOMP_DUMP_DIR", ""),
    "nvrtc_threads": int(os.environ.get("FASTCOMP_NVRTC_THREADS", "0")),
    "nvrtc_fast_compile": os.environ.get("FASTCOMP_NVRTC_FAST_COMPILE", ""),
    "matmul_tuning": os.environ.get("FASTCOMP_MATMUL_TUNING", "1") == "1",
    # Self-attention heads as one kernel where K and V fit in shared memory (csrc/plan/lower_attention.cpp).
    # On since its H100 A/B (benchmarks/results/2026-11-25_nvidia-h100_fused-attention.md); "0" turns it off.
    "fused_attention": os.environ.get("FASTCOMP_FUSED_ATTENTION", "1") == "1",
    # F.linear of at most 32 rows (a product under 2^25 multiply-adds) as a kernel of fastcomp's own instead of a
    # cuBLASLt call, outside CUDA graphs (csrc/codegen/emit_small_matmul.cpp); "0" keeps cuBLASLt for every product.
    "small_matmul": os.environ.get("FASTCOMP_SMALL_MATMUL", "1") == "1",
    # Products of the same activation and shape (x @ Wg and x @ Wu; q/k/v projections) as one batched cuBLASLt
    # call (csrc/plan/group_products.h); "0" keeps a call each.
    "grouped_products": os.environ.get("FASTCOMP_GROUPED_PRODUCTS", "1") == "1",
}


class _ConfigModule(types.ModuleType):
    def __setattr__(self, name, value):
        if name in _DEFAULTS:
            expected = type(_DEFAULTS[name])
            if not isinstance(value, expected):
                raise TypeError(f"fastcomp.config.{name} must be {expected.__name__}, got {type(value).__name__}")
            old, self.__dict__[name] = self.__dict__[name], value
            try:
                _push()
            except ValueError:  # the C++ side refused the value: keep the one in force
                self.__dict__[name] = old
                raise
            return
        if name.startswith("_") or callable(value):
            super().__setattr__(name, value)
            return
        raise AttributeError(f"fastcomp.config has no setting {name!r}; valid settings: {sorted(_DEFAULTS)}")

    @contextlib.contextmanager
    def patch(self, **changes):
        """Temporarily change settings: ``with fastcomp.config.patch(recompile_limit=2): ...``."""
        old = {k: getattr(self, k) for k in changes}
        for k, v in changes.items():
            setattr(self, k, v)
        try:
            yield
        finally:
            for k, v in old.items():
                setattr(self, k, v)


def _push():
    mod = sys.modules[__name__]
    _C.set_config(**{k: mod.__dict__[k] for k in _DEFAULTS})


sys.modules[__name__].__class__ = _ConfigModule
for _k, _v in _DEFAULTS.items():
    sys.modules[__name__].__dict__[_k] = _v
_push()
