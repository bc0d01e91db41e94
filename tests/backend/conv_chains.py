"""Convolution chains for the channels-last plan (csrc/plan/channels_last.h), shared by the CPU lowering tests and
the GPU tests: which values between convolutions the plan may lay out NHWC, and which it must leave as traced."""
import torch
import torch.nn.functional as F


def basic_block(x, w1, w2, mean, var):
    """ResNet's basic block: the values from the first batch norm to the last ReLU are read only by convolutions,
    elementwise ops and pooling."""
    y = F.relu(F.batch_norm(F.conv2d(x, w1, padding=1), mean, var, None, None, False, 0.1, 1e-5), inplace=True)
    y = F.batch_norm(F.conv2d(y, w2, padding=1), mean, var, None, None, False, 0.1, 1e-5)
    y += x
    return F.adaptive_avg_pool2d(F.relu(y), 1).flatten(1)


def viewed(x, w1, w2, mean, var):
    """The second convolution's result is viewed: its layout is observed, so the chain keeps the traced one."""
    y = F.conv2d(F.relu(F.conv2d(x, w1, padding=1)), w2, padding=1)
    return y.view(y.shape[0], -1) * 2


def returned(x, w1, w2, mean, var):
    """A value between the convolutions is returned: the caller sees eager's layout."""
    a = F.relu(F.conv2d(x, w1, padding=1))
    return a, F.conv2d(a, w2, padding=1).sum()


def declined(x, w1, w2, mean, var):
    """Floor division is elementwise but has no lowering: it runs through torch on the second convolution's result,
    so lowering meets a replanned value in an extern and plans the graph again as traced."""
    y = F.conv2d(F.relu(F.conv2d(x, w1, padding=1)), w2, padding=1)
    return torch.div(y, 0.5, rounding_mode="floor")


def inputs(device="cpu", channels=8, size=10):
    w = [torch.randn(channels, channels, 3, 3, device=device) / (3 * channels) ** 0.5 for _ in range(2)]
    return [torch.randn(2, channels, size, size, device=device), *w, torch.randn(channels, device=device),
            torch.rand(channels, device=device) + 0.5]


def nhwc_strides(channels=8, size=10):
    """How the plan text shows a [2, channels, size, size] value laid out NHWC."""
    return f"strides=({channels * size * size}, 1, {channels * size}, {channels})"
