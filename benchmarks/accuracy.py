"""Correctness: relative error ‖out − ref‖ / ‖ref‖ against eager PyTorch run in float64.

The eager result in the workload's own dtype is compared with the same reference, so a compiled result can be
judged against the error eager itself makes (bf16 eager is far from float64, and that is not a bug).
"""
from __future__ import annotations

import copy

import torch
from torch import nn

# A result is within tolerance when its error is at most max(tolerance of its dtype, 4 × eager's own error).
DTYPE_TOLERANCE = {torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 2e-2, torch.float64: 1e-12}


def float64_model(model):
    """A float64 twin of the model: a deep copy of a module, or the (dtype-generic) function itself."""
    if isinstance(model, nn.Module):
        return copy.deepcopy(model).double()
    return model


def to_float64(args: tuple) -> tuple:
    return tuple(a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    diff = torch.linalg.vector_norm(out.double() - ref.double())
    return float(diff / torch.linalg.vector_norm(ref.double()).clamp_min(1e-300))


def compare(out, eager_out: torch.Tensor, ref: torch.Tensor) -> dict:
    """Errors of a result and of eager's result against the float64 reference, and whether they agree."""
    if not isinstance(out, torch.Tensor) or out.shape != eager_out.shape or out.dtype != eager_out.dtype:
        got = f"{tuple(out.shape)} {out.dtype}" if isinstance(out, torch.Tensor) else type(out).__name__
        return {"within_tolerance": False,
                "mismatch": f"got {got}, eager gives {tuple(eager_out.shape)} {eager_out.dtype}"}
    err, eager_err = relative_error(out, ref), relative_error(eager_out, ref)
    tolerance = max(DTYPE_TOLERANCE.get(eager_out.dtype, 1e-5), 4 * eager_err)
    finite = bool(torch.isfinite(out).all())
    return {
        "rel_err": err,
        "eager_rel_err": eager_err,
        "rel_err_vs_eager": relative_error(out, eager_out),
        "reference_dtype": str(ref.dtype).removeprefix("torch."),
        "finite": finite,
        "within_tolerance": finite and err <= tolerance,
    }
