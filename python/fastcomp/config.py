"""fastcomp's settings, the one place that reads them. Set attributes directly (``fastcomp.config.recompile_limit
= 16``) or for a block (``with fastcomp.config.patch(...)``); the native core sees every change immediately.
Environment variables give the start-up values:

- ``FASTCOMP_RECOMPILE_LIMIT`` (int >= 0, default 8): compiled versions per function before it runs eagerly.
- ``FASTCOMP_ERROR_ON_RECOMPILE`` (on/off, default off): raise ``RecompileLimitExceeded`` instead of warning at
  the limit.
- ``FASTCOMP_SUPPRESS_ERRORS`` (on/off, default on): internal compile failures warn and run eagerly; off raises
  ``fastcomp.InternalError``.
- ``FASTCOMP_CUDA_BACKEND`` (on/off, default on): graphs on CUDA tensors run fastcomp's generated kernels and
  cuBLASLt calls; off runs them op by op through torch.
- ``FASTCOMP_BACKGROUND_COMPILE`` (on/off, default on): kernels compile on a background thread while the graph
  runs through torch; off compiles them before the first call returns.
- ``FASTCOMP_DUMP_DIR`` (path, default unset): each compiled graph writes its files into a folder of its own there
  (``graph.txt`` and ``guards.txt`` always; ``plan.txt`` and ``kernels.cu`` when the CUDA backend lowered it).
- ``FASTCOMP_AUTOMATIC_DYNAMIC_ON_DISK`` (on/off, default off): keep the automatic-dynamic decisions (which input
  dimensions changed size) under ``FASTCOMP_CACHE_DIR/dynamic/``, so that a later run of the same program
  traces those dimensions as symbols from its first call. Off, as torch.compile keeps its profile-guided
  decisions off unless asked: each process decides from its own calls, and one program never changes how
  another compiles.
- ``FASTCOMP_NVRTC_THREADS`` (int >= 0, default 0): threads NVRTC may use to compile one graph's kernels: they
  become up to this many programs compiled side by side, a thread each, and ``--split-compile`` shares what is
  left; 0 takes the CPU cores this process may run on but one, at most 8; 1 compiles one program on one thread.
- ``FASTCOMP_NVRTC_FAST_COMPILE`` ("", min, mid or max; default ""): NVRTC's ``-Ofast-compile`` level, which
  trades the generated code's speed for compile time (NVRTC 12.8 and later; ignored by older ones).
- ``FASTCOMP_MATMUL_TUNING`` (on/off, default on): the first run of each matrix product times cuBLASLt's top
  candidate algorithms on the GPU and keeps the fastest (a few ms of GPU time per product shape, once per
  process); off keeps cuBLASLt's heuristic pick, so the algorithm, and with it the last bits of results, never
  depend on timing.
- ``FASTCOMP_FUSED_ATTENTION`` (on/off, default on): attention heads (``nn.MultiheadAttention``,
  ``F.scaled_dot_product_attention``) whose keys and values fit in shared memory run as one kernel; off runs
  ``nn.MultiheadAttention``'s as a head-splitting kernel, two batched cuBLASLt products and a softmax kernel, and
  ``F.scaled_dot_product_attention`` as torch's kernel.
- ``FASTCOMP_SMALL_MATMUL`` (on/off, default on): ``F.linear`` (and ``nn.MultiheadAttention``'s projections) of at
  most 32 rows (under 2^25 multiply-adds, both operands contiguous along K) runs as a kernel of fastcomp's own,
  which saves the host a cuBLASLt call and needs no cuBLASLt at all (a warm start plans none); not under
  ``mode="reduce-overhead"``, whose CUDA graphs replay cuBLAS's (there faster) kernels at no host cost. Off keeps
  cuBLASLt for every product.
- ``FASTCOMP_GROUPED_PRODUCTS`` (on/off, default on): products of the same activation and shape (``x @ Wg`` and
  ``x @ Wu``; q/k/v projections) run as one batched cuBLASLt call; off keeps a call each.
- ``FASTCOMP_COMBINED_KERNELS`` (on/off, default on): pointwise kernels that read only graph inputs (the casts of
  weights under autocast) run as one kernel, before the first of them; off keeps a kernel each where it was.
- ``FASTCOMP_ATTENTION_MASK_BIAS`` (on/off, default off): an attention call torch runs on cuDNN with a boolean mask
  takes the additive bias torch would make of the mask, made once by a kernel of the plan (one for every head on
  the mask) instead of three launches inside each call. Off until it has been checked on a GPU.

- ``FASTCOMP_GUARD_MEMO`` (auto, always or off; default auto): after a call whose guards pass, the next call's
  check reuses every value it read through dicts that have not changed since (module ``__dict__``s, parameters,
  submodules, globals: CPython's dict version tags), skipping those lookups and the guards that depend on
  nothing else; tensor metadata, types, lengths of lists and global state are still checked on every call. auto
  does so for functions with 16 or more guarded values (a library model's hundreds), always for every function
  (tests), off never.

- ``FASTCOMP_EXPLICIT_AUTOCAST`` (cuda, all or off; default cuda): on which devices an op traced under autocast
  becomes the casts autocast makes (``Tensor.to`` nodes) and the op on the cast tensors, so that the graph runs
  without autocast and the CUDA backend lowers it; elsewhere the graph keeps autocast and runs its ops as torch
  calls under it, as eager does. Not the CPU by default: a CPU kernel may call other ops through the dispatcher
  (``roll`` calls ``cat``), which autocast casts in eager and the meta stand-ins the casts are read from do not
  show; on CUDA, as with torch.compile, the casts are those autocast makes at the op itself. off keeps autocast
  everywhere.

On/off variables take ``1/0``, ``true/false``, ``yes/no`` or ``on/off`` in any case; an empty value means unset.
Anything else, a non-integer or a negative integer, stops ``import fastcomp`` with a ``ValueError`` that names the
variable, its value and what it accepts (a typo must not silently leave a switch at its default).
"""
import contextlib
import os
import sys
import types

from fastcomp import _C

# setting: (environment variable, default). The default's type is the setting's type; ints are >= 0.
_SETTINGS = {
    "recompile_limit": ("FASTCOMP_RECOMPILE_LIMIT", 8),
    "error_on_recompile": ("FASTCOMP_ERROR_ON_RECOMPILE", False),
    "suppress_errors": ("FASTCOMP_SUPPRESS_ERRORS", True),
    "cuda_backend": ("FASTCOMP_CUDA_BACKEND", True),
    "background_compile": ("FASTCOMP_BACKGROUND_COMPILE", True),
    "dump_dir": ("FASTCOMP_DUMP_DIR", ""),
    "automatic_dynamic_on_disk": ("FASTCOMP_AUTOMATIC_DYNAMIC_ON_DISK", False),
    "nvrtc_threads": ("FASTCOMP_NVRTC_THREADS", 0),
    "nvrtc_fast_compile": ("FASTCOMP_NVRTC_FAST_COMPILE", ""),
    "matmul_tuning": ("FASTCOMP_MATMUL_TUNING", True),
    # Self-attention heads as one kernel where K and V fit in shared memory (csrc/plan/lower_attention.cpp).
    # On since its H100 A/B (benchmarks/results/2026-11-25_nvidia-h100_fused-attention-ab.md).
    "fused_attention": ("FASTCOMP_FUSED_ATTENTION", True),
    # F.linear of at most 32 rows as a kernel of fastcomp's own instead of a cuBLASLt call, outside CUDA graphs
    # (csrc/codegen/emit_small_matmul.cpp).
    "small_matmul": ("FASTCOMP_SMALL_MATMUL", True),
    # Products of the same activation and shape as one batched cuBLASLt call (csrc/plan/group_products.h).
    "grouped_products": ("FASTCOMP_GROUPED_PRODUCTS", True),
    # Pointwise kernels of graph inputs alone (weight casts under autocast) as one combo kernel, run early
    # (csrc/plan/combine_kernels.h).
    "combined_kernels": ("FASTCOMP_COMBINED_KERNELS", True),
    # A boolean mask of an attention call torch runs on cuDNN passed as the bias torch would make of it, made by a
    # kernel of the plan (csrc/plan/lower_attention.cpp, python/fastcomp/_attention_bias.py).
    "attention_mask_bias": ("FASTCOMP_ATTENTION_MASK_BIAS", False),
    # Values between 2-d convolutions in channels-last memory order where nothing observes their layout
    # (csrc/plan/channels_last.h): cuDNN then runs its NHWC kernels without transposing around each convolution.
    "channels_last": ("FASTCOMP_CHANNELS_LAST", True),
    # The shortcut through a guard check that reuses what the last passing check read through unchanged dicts
    # (csrc/frontend/guards/guard_memo.h).
    "guard_memo": ("FASTCOMP_GUARD_MEMO", "auto"),
    # Ops under autocast as explicit casts and the op on the cast tensors (python/fastcomp/_autocast.py).
    "explicit_autocast": ("FASTCOMP_EXPLICIT_AUTOCAST", "cuda"),
}
_CHOICES = {"nvrtc_fast_compile": ("", "min", "mid", "max"), "guard_memo": ("auto", "always", "off"),
            "explicit_autocast": ("cuda", "all", "off")}
_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")


def _from_env(name):
    """The start-up value of setting `name`: its environment variable parsed, or its default when unset."""
    variable, default = _SETTINGS[name]
    raw = os.environ.get(variable, "")
    text = raw.strip()
    if not text:
        return default
    if isinstance(default, bool):
        if text.lower() in _ON:
            return True
        if text.lower() in _OFF:
            return False
        raise ValueError(f"{variable}={raw!r} is not an on/off value; use 1/0, true/false, yes/no or on/off (any "
                         f"case), or unset it for the default ({'on' if default else 'off'})")
    if isinstance(default, int):
        try:
            value = int(text, 10)
        except ValueError:
            value = -1
        if value < 0:
            raise ValueError(f"{variable}={raw!r} is not a whole number >= 0; unset it for the default ({default})")
        return value
    _check_choice(name, text, variable)
    return text


def _check_choice(name, value, where):
    choices = _CHOICES.get(name)
    if choices is not None and value not in choices:
        raise ValueError(f"{where}={value!r} is not one of {', '.join(map(repr, choices))}")


def _check(name, value):
    """Raises TypeError / ValueError for a value setting `name` cannot take from code."""
    expected = type(_SETTINGS[name][1])
    # bool is an int, but no int setting means a switch, and 1 for a switch hides a typo of True.
    if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
        raise TypeError(f"fastcomp.config.{name} must be {expected.__name__}, got {type(value).__name__}")
    if expected is int and value < 0:
        raise ValueError(f"fastcomp.config.{name} must be >= 0, got {value}")
    _check_choice(name, value, f"fastcomp.config.{name}")


class _ConfigModule(types.ModuleType):
    def __setattr__(self, name, value):
        if name in _SETTINGS:
            _check(name, value)
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
        raise AttributeError(f"fastcomp.config has no setting {name!r}; valid settings: {sorted(_SETTINGS)}")

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
    _C.set_config(**{k: mod.__dict__[k] for k in _SETTINGS})


sys.modules[__name__].__class__ = _ConfigModule
for _name in _SETTINGS:
    sys.modules[__name__].__dict__[_name] = _from_env(_name)
_push()
