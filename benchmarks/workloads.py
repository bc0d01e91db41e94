"""The reference workloads W1–W9 of shared/ANCHORS.md, written the way a user would write them, plus W10, the
"small multi-layer transformer" the CUDA-graph issue asks for (launch-bound: many small kernels per call).

Each workload's `make(device, scale)` returns `(model, make_inputs)`: a plain function or an `nn.Module` in eval
mode, and a function that returns a fresh tuple of random arguments for it on every call. Weights and tables a
user would keep between calls (W4's `w`, `b`; W9's `cos`, `sin`, `Wg`, `Wu`) are created once per `make` and
passed again with each fresh activation. `scale` shrinks (or grows) the leading dimensions so that the same
workload runs at CPU/CI size; `quick_scale` is the size the `--quick` smoke run and the CPU section use.

Importing this module has no side effects beyond importing torch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

Model = Callable[..., torch.Tensor]
MakeInputs = Callable[[], tuple]


@dataclass(frozen=True)
class Workload:
    id: str
    name: str
    description: str
    dtype: torch.dtype
    memory_bound: bool  # judged against the copy bandwidth floor (ANCHORS.md: W2, W3, W8)
    quick_scale: float
    build: Callable[[torch.device, float], tuple[Model, MakeInputs]]

    def make(self, device: str | torch.device = "cpu", scale: float = 1.0) -> tuple[Model, MakeInputs]:
        return self.build(torch.device(device), scale)


def scaled_shape(shape: tuple[int, ...], scale: float) -> tuple[int, ...]:
    """Multiplies the leading dimensions by `scale`, keeping the last (feature) dimension of a 2-D+ shape.

    Shrinking carries into the next dimension once one reaches 1: [8, 1024, 4096] at 1/256 is [1, 32, 4096].
    """
    dims = list(shape)
    remaining = scale
    for i in range(max(1, len(dims) - 1)):
        wanted = dims[i] * remaining
        dims[i] = max(1, round(wanted))
        if wanted >= 1:
            break  # this dimension took the whole factor
        remaining = wanted  # it bottomed out at 1; the rest carries into the next one
    return tuple(dims)


def minimal_bytes_moved(model: Model, inputs: tuple, output: torch.Tensor) -> int:
    """Bytes a single fused pass must move: read every input and parameter once, write the output once."""
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
    if isinstance(model, nn.Module):
        tensors += list(model.parameters()) + list(model.buffers())
    unique = {id(t): t for t in tensors}.values()  # W4/W9 pass the same weight tensors as arguments
    return sum(t.numel() * t.element_size() for t in unique) + output.numel() * output.element_size()


def _randn(shape, dtype, device) -> torch.Tensor:
    return torch.randn(shape, dtype=dtype, device=device)


def _fresh(shape, dtype, device, *fixed) -> MakeInputs:
    """Returns make_inputs: a new random activation of `shape` followed by the `fixed` tensors."""
    return lambda: (_randn(shape, dtype, device), *fixed)


def _as_eval_module(module: nn.Module, device: torch.device, dtype: torch.dtype) -> nn.Module:
    return module.to(device=device, dtype=dtype).eval()


# W1 ----------------------------------------------------------------------------------------------------------

def tiny_add(x):
    return x + 1


def _build_tiny_add(device, scale):
    # Pure per-call overhead: the size is the point, so scale does not apply.
    return tiny_add, _fresh((8,), torch.float32, device)


# W2 ----------------------------------------------------------------------------------------------------------

def tiny_ops(x):
    x = x * 2.0
    x = x + 1.0
    x = torch.sigmoid(x)
    x = x * x
    x = torch.tanh(x)
    return x / (x.abs() + 1.0)


def _build_tiny_ops(device, scale):
    return tiny_ops, _fresh(scaled_shape((16 * 1024 * 1024,), scale), torch.float32, device)


# W3 ----------------------------------------------------------------------------------------------------------

def manual_softmax(x):
    return torch.exp(x) / torch.sum(torch.exp(x), dim=-1, keepdim=True)


def _build_manual_softmax(device, scale):
    return manual_softmax, _fresh(scaled_shape((4096, 4096), scale), torch.float32, device)


# W4 ----------------------------------------------------------------------------------------------------------

def ln_linear_gelu_res(x, w, b):
    h = F.layer_norm(x, x.shape[-1:])
    h = F.linear(h, w, b)
    h = F.gelu(h)
    return h + x


def _build_ln_linear_gelu_res(device, scale):
    dtype, d = torch.float16, 512
    w = _randn((d, d), dtype, device) / math.sqrt(d)
    b = _randn((d,), dtype, device)
    return ln_linear_gelu_res, _fresh(scaled_shape((32, 512, d), scale), dtype, device, w, b)


# W5 ----------------------------------------------------------------------------------------------------------

class MLP(nn.Module):
    def __init__(self, d: int = 512, hidden: int = 1024):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, d)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def _build_mlp(device, scale):
    dtype = torch.float32
    return _as_eval_module(MLP(), device, dtype), _fresh(scaled_shape((32, 512), scale), dtype, device)


# W6 ----------------------------------------------------------------------------------------------------------

class Attention(nn.Module):
    def __init__(self, d: int = 1024):
        super().__init__()
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, d, bias=False)

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        s = q @ k.transpose(-2, -1)
        p = torch.exp(s) / torch.sum(torch.exp(s), -1, keepdim=True)
        return p @ v


def _build_attention(device, scale):
    dtype = torch.float32
    return _as_eval_module(Attention(), device, dtype), _fresh(scaled_shape((4, 256, 1024), scale), dtype, device)


# W7 ----------------------------------------------------------------------------------------------------------

class TransformerLayer(nn.Module):
    def __init__(self, d: int = 512, heads: int = 8, hidden: int = 2048):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.norm1 = nn.LayerNorm(d)
        self.norm2 = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, d))

    def forward(self, x):
        x = self.norm1(x + self.attn(x, x, x)[0])
        return self.norm2(x + self.ff(x))


def _build_transformer_layer(device, scale):
    dtype = torch.float32
    layer = _as_eval_module(TransformerLayer(), device, dtype)
    return layer, _fresh(scaled_shape((16, 64, 512), scale), dtype, device)


# W8 ----------------------------------------------------------------------------------------------------------

class RMSNorm(nn.Module):
    def __init__(self, d: int = 4096, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d) + 0.1 * torch.randn(d))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight).to(x.dtype)


def _build_rmsnorm(device, scale):
    dtype = torch.bfloat16
    return _as_eval_module(RMSNorm(), device, dtype), _fresh(scaled_shape((8, 1024, 4096), scale), dtype, device)


# W9 ----------------------------------------------------------------------------------------------------------

def rope_swiglu(x, cos, sin, w_gate, w_up):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    x = x * cos + torch.cat((-x2, x1), dim=-1) * sin
    return F.silu(x @ w_gate) * (x @ w_up)


def _build_rope_swiglu(device, scale):
    dtype, d, hidden = torch.bfloat16, 1024, 2816
    tokens_by_d = scaled_shape((2048, d), scale)
    angles = _randn(tokens_by_d, torch.float32, device)
    cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
    w_gate = _randn((d, hidden), dtype, device) / math.sqrt(d)
    w_up = _randn((d, hidden), dtype, device) / math.sqrt(d)
    return rope_swiglu, _fresh(tokens_by_d, dtype, device, cos, sin, w_gate, w_up)


# W10 ---------------------------------------------------------------------------------------------------------

class SmallTransformer(nn.Module):
    """Four W7 layers at a quarter of W7's width: dozens of small kernels and GEMMs per call."""

    def __init__(self, layers: int = 4, d: int = 256, heads: int = 4, hidden: int = 1024):
        super().__init__()
        self.layers = nn.ModuleList(TransformerLayer(d, heads, hidden) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def _build_small_transformer(device, scale):
    dtype = torch.float32
    model = _as_eval_module(SmallTransformer(), device, dtype)
    return model, _fresh(scaled_shape((4, 32, 256), scale), dtype, device)


WORKLOADS: dict[str, Workload] = {w.id: w for w in [
    Workload("W1", "tiny_add", "x + 1: pure per-call overhead", torch.float32, False, 1.0, _build_tiny_add),
    Workload("W2", "tiny_ops", "chain of six pointwise ops", torch.float32, True, 1 / 256, _build_tiny_ops),
    Workload("W3", "manual_softmax", "exp(x) / sum(exp(x), -1)", torch.float32, True, 1 / 64, _build_manual_softmax),
    Workload("W4", "ln_linear_gelu_res", "layer_norm, linear, gelu, residual", torch.float16, False, 1 / 128,
             _build_ln_linear_gelu_res),
    Workload("W5", "mlp", "Linear-GELU-Linear module", torch.float32, False, 1 / 4, _build_mlp),
    Workload("W6", "attention", "q/k/v projections, manual softmax attention", torch.float32, False, 1 / 16,
             _build_attention),
    Workload("W7", "transformer_layer", "MultiheadAttention + FF, post-norm", torch.float32, False, 1 / 16,
             _build_transformer_layer),
    Workload("W8", "rmsnorm", "RMSNorm module in bf16", torch.bfloat16, True, 1 / 256, _build_rmsnorm),
    Workload("W9", "rope_swiglu", "rotary embedding then SwiGLU projections", torch.bfloat16, False, 1 / 64,
             _build_rope_swiglu),
    Workload("W10", "small_transformer", "4 post-norm transformer layers, d=256, [4, 32] tokens", torch.float32,
             False, 1 / 4, _build_small_transformer),
]}
