"""What F.scaled_dot_product_attention hands cuDNN for a boolean mask, learnt from this torch itself.

cuDNN takes no boolean mask: torch converts one to an additive bias of the query's dtype on every call (three
launches: the fill of a scalar tensor, the fill value's, and a `where`), with a fill value that has changed between
torch releases. The CUDA backend makes that bias once per call in a kernel of its plan and passes it instead (a
bias of the query's dtype goes through unchanged), so it must be the very tensor torch would make: the values
where the mask is True and where it is False, and its layout. They are read here from the bias torch's own
decomposition passes to aten._scaled_dot_product_cudnn_attention, on stand-in tensors of the traced layouts, once
per layout. None wherever that cannot be seen exactly (then the call stays as it is)."""
import functools

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class _CudnnBias(TorchDispatchMode):
    """Records the attn_bias of each cuDNN attention call below it."""

    def __init__(self):
        super().__init__()
        self.biases = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._scaled_dot_product_cudnn_attention.default:
            self.biases.append(args[3] if len(args) > 3 else kwargs.get("attn_bias"))
        return func(*args, **kwargs)


def _stand_in(layout, dtype, device):
    sizes, strides = layout
    return torch.empty_strided(sizes, strides, dtype=dtype, device=device)


@functools.lru_cache(maxsize=64)
def cudnn_bias_of_bool_mask(q, k, v, mask, dtype, device, scale, is_causal, enable_gqa):
    """(value where the mask is True, value where it is False, the bias's strides) for F.scaled_dot_product_attention
    of stand-ins of layouts q, k, v ((sizes, strides) tuples, `dtype`) and a bool mask of layout `mask`, when torch
    runs it on cuDNN with a bias it made from the mask; else None."""
    if not hasattr(torch.ops.aten, "_scaled_dot_product_cudnn_attention"):
        return None
    query, key, value = (_stand_in(t, dtype, device) for t in (q, k, v))
    options = {"dropout_p": 0.0, "is_causal": is_causal, "scale": scale}
    if enable_gqa:
        options["enable_gqa"] = True
    found = []
    # Autograd's keys must be on for the call to decompose above the mode (inference mode would skip them).
    with torch.inference_mode(False), torch.no_grad():
        for fill in (True, False):
            attn_mask = _stand_in(mask, torch.bool, device)
            attn_mask.untyped_storage().fill_(int(fill))
            mode = _CudnnBias()
            with mode:
                torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, **options)
            if len(mode.biases) != 1:
                return None
            bias = mode.biases[0]
            if (not isinstance(bias, torch.Tensor) or bias.dtype != dtype or tuple(bias.shape) != tuple(mask[0])
                    or bias.data_ptr() == attn_mask.data_ptr()):
                return None
            low, high = bias.aminmax()
            if low.item() != high.item() and not (low.isnan() and high.isnan()):
                return None  # not one value for one mask value: not a conversion this module knows
            found.append((low.item(), tuple(bias.stride())))
    (if_true, true_strides), (if_false, false_strides) = found
    return (if_true, if_false, true_strides) if true_strides == false_strides else None
