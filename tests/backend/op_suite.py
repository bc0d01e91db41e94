"""The CUDA backend's op-by-op suite: every op family the lowering handles, with odd shapes, non-contiguous
inputs and broadcasting. Each case says what its plan must be (kernels, cuBLAS calls, extern ops), so a lowering
that silently falls back to torch fails the CPU rehearsal test, and the GPU test compares values with eager."""
import contextlib
import dataclasses
import types
from typing import Callable, Optional

import torch
import torch.nn.attention
import torch.nn.functional as F

FLOATS = (torch.float32, torch.float16, torch.bfloat16)


@dataclasses.dataclass
class Case:
    name: str
    fn: Callable
    # make(shape, dtype, device) -> args; called with each of `shapes`
    make: Callable
    shapes: tuple
    plan: Optional[tuple]  # (kernels, cuBLAS calls, extern ops) expected in the plan
    dtypes: tuple = FLOATS
    config: dict = dataclasses.field(default_factory=dict)  # fastcomp.config settings to compile it with
    # torch's SDPA kernels the case runs with, in priority order (torch.nn.attention.sdpa_kernel): a masked half
    # head's plan follows the kernel torch picks (LowerOptions::sdp_kernel), which differs between torch versions.
    sdpa: tuple = ()

    @contextlib.contextmanager
    def settings(self):
        """fastcomp.config and torch's SDPA settings of the case, around its compile and calls."""
        import fastcomp
        from torch.nn.attention import sdpa_kernel

        with contextlib.ExitStack() as stack:
            stack.enter_context(fastcomp.config.patch(**self.config))
            if self.sdpa:
                stack.enter_context(sdpa_kernel(list(self.sdpa), set_priority=True))
            yield


def randn(shape, dtype, device):
    return torch.randn(shape, dtype=dtype, device=device)


def one(shape, dtype, device):
    return (randn(shape, dtype, device),)


def positive(shape, dtype, device):
    return (torch.rand(shape, dtype=dtype, device=device) + 0.5,)


def two(shape, dtype, device):
    return randn(shape, dtype, device), randn(shape, dtype, device)


def rows_and_vector(shape, dtype, device):
    return randn(shape, dtype, device), randn(shape[-1:], dtype, device)


FLAT = ((1,), (3,), (1025,), (65537,))
ROWS = ((1, 1), (3, 1025), (5, 7), (64, 4096))

CASES = []


def case(name, fn, make=one, shapes=FLAT, plan=(1, 0, 0), dtypes=FLOATS, config=None, sdpa=()):
    if not isinstance(fn, types.FunctionType):  # torch builtins have no bytecode: compile a Python caller
        fn = (lambda op: lambda *args: op(*args))(fn)
    CASES.append(Case(name, fn, make, shapes, plan, dtypes, config or {}, sdpa))


# ---- pointwise --------------------------------------------------------------------------------------------------
case("neg", lambda x: -x)
case("abs", torch.abs)
case("exp", torch.exp)
case("log", torch.log, positive)
case("sqrt", torch.sqrt, positive)
case("rsqrt", torch.rsqrt, positive)
case("sigmoid", torch.sigmoid)
case("tanh", torch.tanh)
case("relu", F.relu)
case("gelu", F.gelu)
case("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"))
case("silu", F.silu)
case("erf", torch.erf)
case("sin_cos", lambda x: torch.sin(x) + torch.cos(x))
case("reciprocal", torch.reciprocal, positive)
case("square", torch.square)
case("pow_scalars", lambda x: x**2 + x**3 - x.abs() ** 0.5)
case("pow_tensor", lambda x, y: x.abs() ** y, two)
case("add_sub_mul_div", lambda x, y: (x + y) * (x - y) / (y.abs() + 1.0), two)
case("add_alpha", lambda x, y: torch.add(x, y, alpha=2.0), two)
case("reflected_scalars", lambda x: 1.0 - x + 2.0 * x + 1.0 / (x.abs() + 1.0))
case("maximum_minimum", lambda x, y: torch.maximum(x, y) - torch.minimum(x, y), two)
case("compare_where", lambda x, y: torch.where(x > y, x, y * 0.5) + (x <= 0.1).to(x.dtype), two)
case("where_scalar", lambda x: torch.where(x < 0, 0.0, x))
case("clamp", lambda x: torch.clamp(x, -0.5, 0.5) + x.clamp(min=0.1))
case("clamp_tensor", lambda x, y: torch.clamp(x, min=y), two)
case("logical", lambda x, y: ((x > 0) & (y > 0) | (x < -1)).to(x.dtype), two)
case("cast_chain", lambda x: (x.float() * 3).to(x.dtype) + 1)
case("int_result", lambda x: (x > 0).sum(-1), shapes=((3, 1025), (64, 4096)))
case("scalar_tensor_promotion", lambda x: x * 0.1 + 1)
case("broadcast_rows", lambda x, v: x * v + v, rows_and_vector, shapes=ROWS)
case("broadcast_outer", lambda x: x.unsqueeze(0) + x.unsqueeze(1), shapes=((3,), (33,)))
case("dropout_eval", lambda x: F.dropout(x, 0.5, training=False) * 2)
case("clone", lambda x: x.clone() + 1)
case("inplace_false_keyword", lambda x: F.relu(x, inplace=False) + F.dropout(x, 0.1, False, inplace=False))
case("min_max_of_two_tensors", lambda x, y: torch.min(x, y) * 2 - torch.max(x, y), two)
case("arange_positions", lambda x: x + torch.arange(3, x.shape[-1] * 2 + 3, 2, device=x.device).to(x.dtype) * 0.01,
     shapes=((1,), (1025,)))
case("arange_long", lambda x: x * (torch.arange(x.shape[0], dtype=torch.long, device=x.device) - 5), shapes=FLAT)
case("full_zeros_ones_like", lambda x: x * torch.full_like(x, 3) + torch.ones_like(x) - torch.zeros_like(x))


def in_place_chain(x):
    y = x * 2
    y.add_(x)
    y *= 0.5
    torch.relu_(y)
    return F.dropout(y, 0.5, False, True)  # inplace=True by position


def in_place_on_an_int(x):
    total = 0
    total += x  # an int has no in-place add: a new tensor
    total += x * 2
    return total


def in_place_under_a_view(x):  # the view must see the write: a call into torch writes the tensor
    y = x * 2
    row = y[0]
    y.add_(1)
    return row * 3


def in_place_by_keyword_after_a_reader(x, w):  # b reads a before hardtanh_ writes it (no lowering: torch writes)
    a = x @ w
    b = a * 2
    F.hardtanh(a, -0.5, 0.5, inplace=True)
    return b + a


case("in_place_chain", in_place_chain)
case("in_place_by_keyword_after_a_reader", in_place_by_keyword_after_a_reader,
     lambda shape, dtype, device: (randn(shape, dtype, device), randn(shape[-1:] * 2, dtype, device)),
     shapes=((3, 64), (64, 256)), plan=(2, 1, 1))
case("in_place_on_an_int", in_place_on_an_int)
case("in_place_under_a_view", in_place_under_a_view, shapes=((3, 1025), (64, 4096)), plan=(2, 0, 2))


def channels(shape, dtype, device, channels_last=False):
    x = randn(shape, dtype, device)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    c = shape[1]
    return (x, randn((c,), dtype, device) * 0.1, torch.rand(c, dtype=dtype, device=device) + 0.5,
            randn((c,), dtype, device), randn((c,), dtype, device))


def resnet_tail(x, mean, var, w, b):  # batch norm, residual sum and ReLU, in place as timm's ResNet does them
    y = F.batch_norm(x, mean, var, w, b, False, 0.1, 1e-5)
    y += x
    return F.relu(y, inplace=True)


NCHW = ((2, 3, 5, 7), (8, 64, 28, 28))


def conv_args(groups=1, channels_last=False):
    def make(shape, dtype, device):
        x = randn(shape, dtype, device)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        c = shape[1]
        out = c if groups > 1 else 2 * c
        w = randn((out, c // groups, 3, 3), dtype, device) / (3 * (c // groups) ** 0.5)
        return x, w, randn((out,), dtype, device)
    return make


# torch adds a convolution's bias in a kernel of its own after cuDNN's: here the GELU's kernel adds it.
case("conv2d_bias_epilogue", lambda x, w, b: F.gelu(F.conv2d(x, w, b, 1, 1)) * 2, conv_args(), NCHW, plan=(1, 0, 1))
case("conv2d_depthwise_bias_channels_last", lambda x, w, b: F.conv2d(x, w, b, 1, 1, 1, x.shape[1]).relu(),
     conv_args(groups=64, channels_last=True), ((8, 64, 28, 28),), plan=(1, 0, 1))
case("conv2d_bias_by_keyword", lambda x, w, b: F.conv2d(x, w, bias=b, padding=1) + 1, conv_args(), NCHW,
     plan=(1, 0, 1))
case("batch_norm_eval", lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b, False, 0.1, 1e-3), channels, NCHW)
case("batch_norm_no_affine", lambda x, m, v, w, b: F.batch_norm(x, m, v, training=False) * 2, channels, NCHW)
case("batch_norm_relu_residual", resnet_tail, channels, NCHW)
case("batch_norm_channels_last", resnet_tail, lambda s, d, dev: channels(s, d, dev, True), NCHW)


# Max pooling: the maximum over the window's columns, then over its rows (two kernels; lower_pooling.cpp), the
# window's lazy input (ResNet's stem: batch norm and ReLU) recomputed at each column tap.
def stem_pool(x, mean, var, w, b):
    return F.max_pool2d(F.relu(F.batch_norm(x, mean, var, w, b, False, 0.1, 1e-5)), 3, 2, 1)


POOLED = ((2, 3, 5, 7), (8, 64, 28, 28), (1, 2, 1, 1))
case("max_pool2d_of_batch_norm_relu", stem_pool, channels, POOLED, plan=(2, 0, 0))
case("max_pool2d_channels_last", stem_pool, lambda s, d, dev: channels(s, d, dev, True), POOLED, plan=(2, 0, 0))
case("max_pool2d_plain", lambda x: F.max_pool2d(x, 2), shapes=((2, 3, 5, 7), (4, 8, 33, 31)), plan=(2, 0, 0))
case("max_pool2d_dilated_ceil_mode", lambda x: F.max_pool2d(x, 3, 2, 1, dilation=2, ceil_mode=True),
     shapes=((2, 3, 5, 7), (4, 8, 33, 31)), plan=(2, 0, 0))
case("max_pool2d_by_keyword", lambda x: F.max_pool2d(x, kernel_size=(3, 2), stride=(2, 1), padding=(1, 0)) * 2,
     shapes=((2, 3, 5, 7), (4, 8, 33, 31)), plan=(3, 0, 0))
case("max_pool2d_unbatched", lambda x: torch.max_pool2d(x[0], 3, 1, 1), shapes=((1, 3, 5, 7), (1, 8, 33, 31)),
     plan=(2, 0, 0))
# With its indices it stays torch's call (and the two items' getitems).
case("max_pool2d_with_indices", lambda x: F.max_pool2d(x, 2, return_indices=True)[1], shapes=((2, 3, 6, 8),),
     plan=(0, 0, 3))
# Global average pooling (ResNet's head) is the mean of each plane, its prologue in the same kernel.
case("adaptive_avg_pool2d_of_relu", lambda x: F.adaptive_avg_pool2d(F.relu(x), 1),
     shapes=((2, 3, 5, 7), (8, 64, 7, 7)))
case("adaptive_avg_pool2d_channels_last", lambda x: F.adaptive_avg_pool2d(x * 2, (1, 1)),
     lambda s, d, dev: (randn(s, d, dev).contiguous(memory_format=torch.channels_last),), ((8, 64, 7, 7),))

# ---- views and layouts -------------------------------------------------------------------------------------------
case("transposed_input", lambda x: x.t() * 2 + 1, shapes=((3, 1025), (64, 4096)))
case("strided_slice", lambda x: x[:, ::2] + 1, shapes=((3, 1025), (64, 4096)))
case("offset_slice", lambda x: x[1:, 3:] * 2, shapes=((3, 1025), (64, 4096)))
case("expand", lambda x: x[:, :1].expand(-1, 8) * 2, shapes=((3, 1025), (64, 4096)))
# The reshape of the lazy product and the + 1 on it alone are one kernel with the product (Lowerer::defer_reshape).
case("view_reshape", lambda x: (x.view(-1) * 2).reshape(x.shape[0], -1) + 1, shapes=((3, 1025), (64, 4096)),
     plan=(1, 0, 0))
case("permute", lambda x: x.permute(2, 0, 1) * 2, shapes=((2, 3, 5), (8, 64, 33)))
case("transpose_attributes", lambda x: x.mT * 2 + x[0].T, shapes=((2, 3, 3), (8, 33, 33)), plan=(1, 0, 0))
case("split_halves", lambda x: x.chunk(2, dim=-1)[0] * x.chunk(2, dim=-1)[1], shapes=((3, 1024), (64, 4096)))
case("contiguous_copy", lambda x: x.t().contiguous(), shapes=((3, 1025), (64, 4096)))
# A move to where the tensor already is gives it back (GPT-2's position_embeds.to(inputs_embeds.device)).
case("to_its_own_device_and_dtype", lambda x: x.to(x.device) * 2 + x.to(x.dtype).cuda(x.device) if x.is_cuda
     else x.to(x.device) * 2 + x.to(x.dtype).cpu(), shapes=((3, 1025), (64, 4096)))
# A move to its own device with a dtype is a cast (LLaMA's inv_freq.to(device=x.device, dtype=torch.float32)).
case("to_its_own_device_with_a_dtype", lambda x: (x.to(device=x.device, dtype=torch.float32).sin() * 2).to(
     device=x.device, dtype=torch.bfloat16, non_blocking=True), shapes=((3, 1025), (64, 4096)))


# Tensors made from nothing are constants the consumer's kernel computes; an empty one (a cache's first keys) is an
# allocation alone, which cat skips as torch does. Three kernels: the [3, 1025] results, the cat's own space, and
# the 1-d ones (a constant broadcast from another shape is stored, as any value of another shape is); the two that
# read only x run as one combo kernel (plan/combine_kernels.h), so the plan launches two.
def factories(x):
    like = torch.zeros_like(x) + x * torch.full(x.shape, 2.5, dtype=x.dtype, device=x.device)
    new = x.new_ones(x.shape) - x.new_full(x.shape, 3) + torch.ones(x.shape[-1], dtype=x.dtype, device=x.device)
    keys = torch.cat([torch.tensor([], dtype=x.dtype, device=x.device), x.flatten()])
    return like, new, keys, torch.full(x.shape, True, device=x.device) & (x > 0)


case("factories", factories, shapes=((3, 1025), (64, 4096)), plan=(2, 0, 0))


def inverse_permutation(x, order):
    """A mixture of experts' dispatch (transformers' grouped experts): the inverse of a permutation filled in place
    into torch.empty_like, an allocation whose first use is torch's index_put_; and a tensor of no elements that
    only the output holds."""
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel(), device=order.device)
    return x[inverse] * 2, x.new_empty((0,))


def rows_and_order(shape, dtype, device):
    return randn(shape, dtype, device), torch.randperm(shape[0]).to(device)


case("inverse_permutation", inverse_permutation, rows_and_order, shapes=((7, 5), (64, 300)), plan=(2, 0, 1))


def view_then_base_unsqueezed_in_place(x):  # the view keeps the shape it had when made (fuzz, seed 100 #91)
    base = x.amax(-1)
    view = base.movedim(0, -1)
    base.unsqueeze_(0)
    return view, base


case("view_then_base_unsqueezed_in_place", view_then_base_unsqueezed_in_place, shapes=((3, 3, 4), (2, 5, 7)),
     plan=(1, 0, 2))


def reshape_copy_then_source_written_in_place(x):  # the copy has the values of before (fuzz, CUDA seed 102 #1228)
    y = x * 1
    flat = y.t().reshape(-1)  # y.t() cannot be viewed as 1-D: reshape copies
    y.add_(1)
    return flat, y


case("reshape_copy_then_source_written_in_place", reshape_copy_then_source_written_in_place,
     shapes=((3, 4), (33, 65)), plan=(2, 0, 2))

# ---- cat and stack: index arithmetic in the consumer's kernel (no kernel of their own, no torch call) ------------


def rope(x):
    half = x.shape[-1] // 2
    return x * x.cos() + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * x.sin()


def longer_along(dim, extra):
    """Two tensors that differ in size along `dim` only."""
    def make(shape, dtype, device):
        other = list(shape)
        other[dim] += extra
        return randn(shape, dtype, device), randn(other, dtype, device)

    return make


CUBES = ((2, 3, 5), (4, 33, 64))
# W9's rotary line: one kernel reads x (three ways), cos and sin; -x2 is never written. 1026 / 2 = 513 puts the
# halves' boundary inside a vector group, so that shape runs the scalar loop.
case("cat_rope", rope, shapes=((3, 8), (5, 1026), (64, 4096)))
case("cat_lazy_piece", lambda x: torch.cat((-x, x), dim=-1) * 2, shapes=((3, 1025), (64, 4096)))
case("cat_three_odd_pieces", lambda x, y: torch.cat((x, y[:, :1], x.exp()), dim=1) + 1, two, shapes=ROWS)
case("cat_dim0", lambda x, y: torch.cat((x, y, x * 2), 0) - 1, two, shapes=ROWS)
case("cat_middle_negative_dim", lambda x, y: torch.cat((x, y), dim=-2) * 2, longer_along(1, 3), shapes=CUBES)
case("cat_outer_of_3d", lambda x, y: torch.cat([y, x], 0).sigmoid(), longer_along(0, 1), shapes=CUBES)
case("cat_transposed_pieces", lambda x, y: torch.cat((x.t(), y.t() * 2), 0) + 1, two, shapes=((3, 1025), (64, 4096)))
case("cat_strided_and_broadcast_pieces",
     lambda x, v: torch.cat((x[:, ::2], v.expand(x.shape[0], -1), x[:, 1::2]), -1) * 2, rows_and_vector,
     shapes=ROWS)
case("cat_mixed_dtypes", lambda x: torch.cat((x, x.float() * 2, (x > 0).int()), -1) + 1, shapes=ROWS)
# torch skips empty pieces, and a 1-D one of size 0 whatever the rank
case("cat_empty_pieces", lambda x, y: torch.cat((x, x[:, :0], y, x.reshape(-1)[:0]), -1) * 2, two,
     shapes=((3, 1025), (64, 4096)))
case("cat_single_piece", lambda x: torch.cat([x * 2]) + 1)
case("cat_bool_and_int_pieces",
     lambda x, y: torch.cat((x > 0, y < 0), 0).to(x.dtype) + torch.cat(((x * 4).int(), (y * 4).long()), 0), two,
     shapes=ROWS)
case("stack_last", lambda x, y: torch.stack((x, -y), dim=-1) * 2, two, shapes=ROWS)
case("stack_dim0", lambda x, y: torch.stack([x, y, x + y]) - 1, two, shapes=CUBES)
# A cat that must exist as a tensor is written by the kernel that computes it: as the graph's output, before an
# extern op, before a row or column reduction (which take no ranges), and inside another cat (which does not copy
# ranges).
case("cat_output", lambda x, y: torch.cat((x, -y), 0), two, shapes=ROWS)
case("cat_before_extern", lambda x, y: torch.cat((x, -y), -1).cumsum(-1) * 2, two, shapes=((3, 1025),), plan=(2, 0, 1))
case("cat_before_column_sum", lambda x, y: torch.cat((x, -y), -1).sum(0) * 2, two, shapes=((3, 1025),),
     plan=(2, 0, 0))
case("cat_before_softmax", lambda x, y: torch.softmax(torch.cat((x, -y), -1), -1), two, shapes=ROWS,
     plan=(2, 0, 0))
case("cat_of_softmax", lambda x: torch.cat((torch.softmax(x, -1), x), -1) * 2, shapes=ROWS, plan=(2, 0, 0))
case("cat_of_cat", lambda x, y: torch.cat((torch.cat((x, y), -1), x), -1) * 2, two, shapes=ROWS, plan=(2, 0, 0))

# ---- reductions ---------------------------------------------------------------------------------------------------
case("sum_last", lambda x: x.sum(-1), shapes=ROWS)
case("sum_keepdim_epilogue", lambda x: x / x.sum(dim=-1, keepdim=True), positive, shapes=ROWS)
case("mean", lambda x: x.mean(-1, keepdim=True) * 2, shapes=ROWS)
case("amax_amin", lambda x: x.amax(-1) - x.amin(-1), shapes=ROWS)
case("var_std", lambda x: x.var(-1, keepdim=True) + x.std(-1, keepdim=True, unbiased=False),
     shapes=((3, 1025), (5, 7), (64, 4096)))
case("logsumexp", lambda x: torch.logsumexp(x, -1), shapes=ROWS)
case("softmax", lambda x: torch.softmax(x, -1), shapes=ROWS)
case("log_softmax", lambda x: F.log_softmax(x, dim=-1), shapes=ROWS)
case("manual_softmax", lambda x: torch.exp(x) / torch.sum(torch.exp(x), dim=-1, keepdim=True), shapes=ROWS)
case("layer_norm", lambda x: F.layer_norm(x, x.shape[-1:]), shapes=ROWS)
# w * 0.5 is its own kernel over w's shape (a different iteration space), then the layer norm reads it
case("layer_norm_affine", lambda x, w: F.layer_norm(x, x.shape[-1:], w, w * 0.5, 1e-6), rows_and_vector,
     shapes=ROWS, plan=(2, 0, 0))
case("rmsnorm", lambda x, w: (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w).to(x.dtype),
     rows_and_vector, shapes=ROWS)
# The last several dimensions as one row (global average pooling, per-sample statistics): the pointwise prologue
# joins when each of its loads reads those dimensions with one stride, else x is written first (as for a
# broadcast operand). keepdim=True stores the result at once, so its epilogue is another kernel.
TRAILING = ((1, 1, 1, 1), (2, 3, 5, 7), (4, 8, 33, 31))
case("mean_last_two", lambda x: (x * 2).mean((-1, -2)) + 1, shapes=TRAILING)
case("mean_last_two_of_broadcast", lambda x, v: (x + v).mean((-1, -2)), rows_and_vector, shapes=TRAILING[1:],
     plan=(2, 0, 0))
case("mean_last_two_of_per_channel", lambda x, v: (x * v[:, :1, :1]).mean((-1, -2)), lambda shape, dtype, device: (
    randn(shape, dtype, device), randn(shape[1:], dtype, device)), shapes=TRAILING[1:])
case("sum_last_three_keepdim", lambda x: x - x.sum((1, 2, 3), keepdim=True), shapes=TRAILING, plan=(2, 0, 0))
case("amax_amin_last_two", lambda x: x.amax((2, 3)) - x.amin((3, 2)), shapes=TRAILING)
case("var_std_last_two", lambda x: x.var((2, 3)) + x.std((-2, -1), unbiased=False), shapes=TRAILING[1:])  # one element: torch gives nan (dof <= 0)
# Trailing dimensions of a permuted view: read in place when they collapse into one strided row, copied
# contiguous first when they do not (transposed against each other).
case("mean_last_two_strided_row", lambda x: x.permute(0, 3, 1, 2).mean((2, 3)), shapes=TRAILING)
case("mean_last_two_transposed", lambda x: x.transpose(2, 3).mean((2, 3)), shapes=TRAILING[1:], plan=(2, 0, 0))

# Reductions that keep the last dimension: one column-reduce kernel with x's prologue and the result's epilogue.
COLUMNS = ((1, 1), (3, 1025), (5, 7), (1025, 65), (300, 4096))
COLUMNS_3D = ((1, 1, 1), (2, 3, 5), (4, 8, 33), (300, 2, 64))
COLUMNS_4D = ((1, 1, 1, 1), (2, 3, 5, 7), (4, 8, 33, 31), (3, 16, 20, 64))
case("sum_dim0", lambda x: x.sum(0), shapes=COLUMNS)
case("sum_dim0_epilogue", lambda x: x.sum(0) * 2, shapes=COLUMNS)
case("mean_dim0_keepdim", lambda x: x.mean(0, keepdim=True) * 2 + 1, shapes=COLUMNS)
case("amax_amin_dim0", lambda x: x.amax(0) - x.amin(0, keepdim=False), shapes=COLUMNS)
case("var_std_dim0", lambda x: x.var(0) + x.std(0, unbiased=False), shapes=COLUMNS[1:])  # one row: var is nan
case("var_correction_keepdim", lambda x: torch.var(x, (0, 2), correction=0, keepdim=True) * 3, shapes=COLUMNS_4D)
case("std_dims_0_1", lambda x: torch.std(x, (0, 1), correction=1), shapes=COLUMNS_3D[1:])
case("sum_dims_0_1", lambda x: x.sum((0, 1)), shapes=COLUMNS_3D)
case("sum_dim1_of_3d", lambda x: x.sum(1, keepdim=True) - 1, shapes=COLUMNS_3D)
case("mean_dims_0_2_apart", lambda x: x.mean((0, 2)), shapes=COLUMNS_4D)
case("sum_middle_dims", lambda x: x.sum((1, 2)) * 2, shapes=COLUMNS_4D)
case("int_sum_dim0", lambda x: (x * 4).int().sum(0) + (x > 0).sum(0), shapes=COLUMNS)
case("sum_dim0_prologue_epilogue", lambda x, v: (x * x).sum(0) * 2 + v, rows_and_vector, shapes=COLUMNS)
case("mean_dim0_bias", lambda x, v: x.mean(0) + v, rows_and_vector, shapes=COLUMNS)
case("sum_amax_share_prologue", lambda x: x.exp().sum(0) / x.exp().amax(0), shapes=COLUMNS)
case("prologue_also_returned", lambda x: (x * 2, (x * 2).sum(0)), shapes=COLUMNS)
case("sum_dim0_transposed", lambda x: x.t().sum(0) * 2, shapes=((1, 1), (64, 33), (3, 1025)))
case("sum_dim0_of_slice", lambda x: x[1:, 3:].sum(0), shapes=((3, 1025), (64, 4096)))
# A per-column value broadcast back over the columns and a row reduction of one are kernels of their own.
# (Over one row, (1, 1), the mean is per element too, and one kernel does it all.)
case("center_columns", lambda x: x - x.mean(0, keepdim=True), shapes=COLUMNS[1:], plan=(2, 0, 0))
case("column_sum_then_softmax", lambda x: torch.softmax(x.sum(0), -1), shapes=COLUMNS, plan=(2, 0, 0))
case("row_and_column_sums", lambda x: (x.sum(0), x.sum(1)), shapes=COLUMNS[1:], plan=(2, 0, 0))
# Few, long columns: split across blocks (split_reduce.h), a partial kernel then a combine kernel. A length with
# no divisor to split at (a prime) or a reduction of a reduction (var) is torch's.
case("sum_dim0_few_long_columns_split", lambda x: x.sum(0), shapes=((8192, 3), (65536, 5), (262144, 1)),
     plan=(2, 0, 0))
case("mean_dims_0_1_few_columns_split", lambda x, v: (x * 2).mean((0, 1)) + v,
     lambda shape, dtype, device: (randn(shape, dtype, device), randn(shape[-1:], dtype, device)),
     shapes=((64, 128, 3), (512, 64, 7)), plan=(2, 0, 0))
case("sum_dim0_long_prime_columns_is_extern", lambda x: x.sum(0), shapes=((65537, 3),), plan=(0, 0, 1))
# var/std over few long columns: a reduced dimension cut into equal pieces, each piece's sums and squared
# deviations per column, combined over the pieces; x is read from memory (a prologue is written first), and a
# keepdim result is stored before its epilogue.
case("var_dim0_few_long_columns_pieces", lambda x: x.var(0), shapes=((8192, 3), (65536, 5)), plan=(2, 0, 0))
case("var_dim0_few_long_columns_offset", lambda x: (x + 100).var(0), shapes=((8192, 3),), plan=(3, 0, 0))
case("std_dims_0_1_few_columns_keepdim", lambda x: torch.std(x, (0, 1), correction=0, keepdim=True) * 2,
     shapes=((64, 128, 3), (512, 64, 7)), plan=(3, 0, 0))
case("var_dim0_long_prime_columns_is_extern", lambda x: x.var(0), shapes=((65537, 3),), plan=(0, 0, 1))
# The last dimension reduced with others that are not trailing: a row reduction of the trailing ones into
# partials, then a column reduction of those with the epilogue (batch-norm statistics).
BATCH_NORM = ((1, 1, 1, 1), (2, 3, 5, 7), (4, 8, 33, 31), (8, 64, 14, 14))
case("mean_dims_0_2_3_keepdim", lambda x: x.mean((0, 2, 3), keepdim=True), shapes=BATCH_NORM, plan=(2, 0, 0))
case("sum_dims_0_2", lambda x: (x * 2).sum((0, 2)) + 1, shapes=((1, 1, 1), (2, 3, 5), (4, 33, 65)), plan=(2, 0, 0))
case("amax_dims_0_2_3", lambda x: x.amax((0, 2, 3)) * 2, shapes=BATCH_NORM, plan=(2, 0, 0))
case("int_sum_dims_1_3", lambda x: (x > 0).sum((1, 3)), shapes=BATCH_NORM, plan=(2, 0, 0))
case("batch_norm_centered", lambda x: x - x.mean((0, 2, 3), keepdim=True), shapes=BATCH_NORM, plan=(3, 0, 0))
# Batch norm's statistics: mean and var of one tensor share the kernel that reads it (and its row sums); the two
# column stages are one kernel too.
case("batch_norm_mean_and_var", lambda x: (x.mean((0, 2, 3)), x.var((0, 2, 3), unbiased=False)),
     shapes=BATCH_NORM[1:], plan=(2, 0, 0))
case("amax_minus_amin_dims_0_2", lambda x: x.amax((0, 2)) - x.amin((0, 2)), shapes=((2, 3, 5), (4, 33, 65)),
     plan=(2, 0, 0))
case("sum_dims_0_2_3_long_rows_split", lambda x: x.sum((0, 2, 3)), positive, shapes=((2, 3, 256, 512),),
     plan=(3, 0, 0))
# var/std: each row's sum and squared deviations from its own mean, combined per column (Chan et al.); a mean far
# from 0 checks that no sum of squares cancels.
case("var_dims_0_2_3", lambda x: x.var((0, 2, 3)), shapes=BATCH_NORM[1:], plan=(2, 0, 0))
case("std_dims_0_2_keepdim_offset", lambda x: torch.std(x + 100, (0, 2), correction=0, keepdim=True),
     shapes=((2, 3, 5), (4, 33, 65)), plan=(2, 0, 0))
case("var_dims_0_2_3_few_long_columns_is_extern", lambda x: x.var((0, 2, 3)), shapes=((8191, 3, 2, 2),),
     plan=(0, 0, 1))

# Whole-tensor reductions: one row (a multi-dimensional x is read from memory, as for trailing dimensions); a long
# one is split across blocks, a partial kernel then a combine kernel, the prologue fused into the first.
case("sum_all_small", lambda x: x.sum() * 2, shapes=((1,), (3, 1025), (5, 7, 9)))
case("mean_all_keepdim", lambda x: x.mean((0, 1), keepdim=True) + 1, shapes=((1, 1), (3, 1025)), plan=(2, 0, 0))
case("var_all_small", lambda x: x.var(), shapes=((3, 1025), (64, 1000)))
# Sums of positive values: a sum of 2^18 values around 0 cancels to ~1, where each side's rounding (torch adds in
# another order) is far above 1e-5 of the result.
case("sum_all_split", lambda x: x.sum(), positive, shapes=((65536 * 2,), (1 << 18,), (3, 65536 * 3), (4, 512, 512)),
     plan=(2, 0, 0))
case("mse_all_split", lambda x, y: ((x - y) ** 2).mean() * 0.5, two, shapes=((1 << 17,), (1 << 20,)), plan=(2, 0, 0))
# A multi-dimensional prologue joins when each of its loads reads the whole tensor with one stride; a broadcast
# operand does not, so x + v is written first.
case("mse_2d_split", lambda x, y: ((x - y) ** 2).mean(), two, shapes=((3, 65536), (512, 1024)), plan=(2, 0, 0))
case("abs_sum_4d", lambda x: x.abs().sum() + 1, shapes=((1, 1, 1, 1), (2, 3, 5, 7)))
case("sum_all_of_broadcast", lambda x, v: (x + v).sum(), rows_and_vector, shapes=((3, 1025),), plan=(2, 0, 0))
case("amax_amin_all_split", lambda x: x.amax() - x.amin(), shapes=((1 << 17,), (1 << 20,)), plan=(2, 0, 0))
case("int_sum_all_split", lambda x: (x > 0).sum() + (x * 4).int().sum(), shapes=((1 << 17,),), plan=(2, 0, 0))
# A per-element use of the split result is a kernel of its own; a per-element use of the prologue is stored by the
# partial kernel.
case("center_all_split", lambda x: x - x.mean(), shapes=((1 << 17,),), plan=(3, 0, 0))
case("prologue_also_returned_split", lambda x: (x * 2, (x * 2).sum()), shapes=((1 << 17),), plan=(2, 0, 0))
case("sum_all_prime_is_extern", lambda x: x.sum(), shapes=((65537 * 2 + 1,),), plan=(0, 0, 1))
# var/std over a few long rows: each row cut into equal pieces, each piece's sum and squared deviations, then
# combined per row (Chan et al.); a mean of 100 checks that nothing cancels.
case("var_all_long_pieces", lambda x: (x + 100).var(), shapes=((1 << 17,), (1 << 18,)), plan=(2, 0, 0))
case("std_last_few_long_rows", lambda x: x.std(-1, correction=0), shapes=((3, 1 << 17), (4, 1 << 18)),
     plan=(2, 0, 0))
case("var_all_2d_keepdim", lambda x: torch.var(x * 2, (0, 1), keepdim=True), shapes=((512, 256), (256, 1024)),
     plan=(2, 0, 0))
case("var_all_long_prime_is_extern", lambda x: x.var(), shapes=((65537 * 2 + 1,),), plan=(0, 0, 1))

# ---- matrix products ------------------------------------------------------------------------------------------------
MM_SHAPES = ((1, 1, 1), (3, 17, 5), (64, 1025, 33), (128, 512, 256))


def linear_args(shape, dtype, device):
    m, k, n = shape
    return randn((m, k), dtype, device), randn((n, k), dtype, device) * k**-0.5, randn((n,), dtype, device)


def matmul_args(shape, dtype, device):
    m, k, n = shape
    return randn((m, k), dtype, device), randn((k, n), dtype, device) * k**-0.5


def batched_args(shape, dtype, device):
    m, k, n = shape
    return randn((4, m, k), dtype, device), randn((4, n, k), dtype, device) * k**-0.5


# F.linear through cuBLASLt (small products too, with fastcomp.config.small_matmul off) ...
CUBLASLT_ONLY = {"small_matmul": False}
case("linear_bias", F.linear, linear_args, MM_SHAPES, plan=(0, 1, 0), config=CUBLASLT_ONLY)


def addmm_args(shape, dtype, device):
    m, k, n = shape
    return randn((n,), dtype, device), randn((m, k), dtype, device), randn((k, n), dtype, device) * k**-0.5


def linear_args_bias_first(shape, dtype, device):
    x, w, b = linear_args(shape, dtype, device)
    return b, x, w


# torch.addmm(bias, x, w) (GPT-2's Conv1D): one product, the bias as its epilogue; a transposed w is read in place.
case("addmm_bias", torch.addmm, addmm_args, MM_SHAPES, plan=(0, 1, 0))
case("addmm_transposed_weight", lambda b, x, w: torch.addmm(b, x, w.t()), linear_args_bias_first, MM_SHAPES,
     plan=(0, 1, 0))
case("linear_no_bias_gelu", lambda x, w, b: F.gelu(F.linear(x, w)) + b, linear_args, MM_SHAPES, plan=(1, 1, 0),
     config=CUBLASLT_ONLY)
# ... and as small-matmul kernels (at most 32 rows; emit_small_matmul.cpp): one row; odd sizes where each row and
# K are read one element at a time (K = 37); more columns than two per warp's share (N = 1001, two columns a warp,
# the last one alone); 16-byte loads (K = 1000, 1024); W5's fc2 (N = 512, K = 1024).
SMALL_MM_SHAPES = ((1, 1, 1), (3, 37, 300), (17, 1000, 37), (5, 40, 1001), (32, 1024, 512))


def rows_3d_linear_args(shape, dtype, device):
    m, k, n = shape
    return randn((2, m, k), dtype, device), randn((n, k), dtype, device) * k**-0.5, randn((n,), dtype, device)


def column_slice_linear_args(shape, dtype, device):
    """x's rows start one element apart from 16-byte boundaries: the kernel of the program for any alignment."""
    m, k, n = shape
    return randn((m, k + 1), dtype, device), randn((n, k), dtype, device) * k**-0.5, randn((n,), dtype, device)


case("small_linear_bias", F.linear, linear_args, SMALL_MM_SHAPES, plan=(1, 0, 0))
case("small_linear_no_bias_gelu", lambda x, w, b: F.gelu(F.linear(x, w)) + b, linear_args, SMALL_MM_SHAPES,
     plan=(2, 0, 0))
case("small_linear_3d_rows", F.linear, rows_3d_linear_args, ((1, 8, 3), (16, 64, 100)), plan=(1, 0, 0))
case("small_linear_sliced_x", lambda x, w, b: F.linear(x[:, 1:], w, b), column_slice_linear_args,
     ((4, 64, 100), (32, 512, 256)), plan=(1, 0, 0))
# A weight stored transposed (k not contiguous) is read in place by cuBLASLt rather than copied for the kernel (the
# one kernel is the function's own .contiguous()).
case("small_linear_transposed_w_uses_cublaslt", lambda x, w, b: F.linear(x, w.t().contiguous().t(), b), linear_args,
     ((4, 64, 100),), plan=(1, 1, 0))
case("matmul_2d", lambda a, b: a @ b, matmul_args, MM_SHAPES, plan=(0, 1, 0))
case("matmul_transposed_b", lambda a, b: a @ b.t().t(), matmul_args, MM_SHAPES, plan=(0, 1, 0))
case("bmm_q_kT", lambda q, k: torch.softmax(q @ k.transpose(-2, -1), -1), batched_args, MM_SHAPES, plan=(1, 1, 0))
case("nd_at_2d", lambda a, b: (a.unsqueeze(0).expand(2, -1, -1).contiguous() @ b) * 2, matmul_args, MM_SHAPES,
     plan=(2, 1, 0))

# ---- indirect loads: embedding, gather, index_select --------------------------------------------------------------
# One pointwise kernel reads the index, checks it against the gathered dimension and reads the element, fused with
# what consumes it. Shapes are (index shape, gathered tensor's shape).


def indices(shape, size, dtype, device):
    """Fresh random indices in [0, size): with two or more, 0 and size - 1 each at a random place (the whole range is
    covered, ends included); a single one is never 0 unless size is 1."""
    flat = torch.randint(0, size, (max(1, int(torch.Size(shape).numel())),), dtype=dtype)
    if flat.numel() >= 2:
        at = torch.randperm(flat.numel())[:2]
        flat[at[0]], flat[at[1]] = size - 1, 0
    elif size > 1:
        flat[0] = torch.randint(1, size, ())
    return flat[: torch.Size(shape).numel()].reshape(shape).to(device)


def embedding_args(index_dtype, positions=False, transposed=False):
    def make(shape, dtype, device):
        idx_shape, (n, d) = shape
        idx = indices(idx_shape, n, index_dtype, device)
        table = randn((d, n), dtype, device).t() if transposed else randn((n, d), dtype, device)
        if not positions:
            return idx, table
        pos = torch.arange(idx_shape[-1], device=device).expand(idx_shape)
        return idx, table, pos, randn((idx_shape[-1], d), dtype, device)

    return make


EMBEDDINGS = (((1,), (7, 3)), ((3, 5), (1000, 64)), ((2, 1025), (50, 129)))
for index_dtype in (torch.int64, torch.int32):
    tag = str(index_dtype).split(".")[1]
    case(f"embedding_{tag}", F.embedding, embedding_args(index_dtype), EMBEDDINGS)
    case(f"embedding_epilogue_{tag}", lambda i, w: F.embedding(i, w) * 2 + 1, embedding_args(index_dtype),
         EMBEDDINGS)
case("embedding_plus_positions", lambda i, w, p, pw: F.embedding(i, w) * 0.5 + F.embedding(p, pw),
     embedding_args(torch.int64, positions=True), EMBEDDINGS)
case("embedding_transposed_table", lambda i, w: F.embedding(i, w) - 1, embedding_args(torch.int64, transposed=True),
     EMBEDDINGS)
case("embedding_padding_idx", lambda i, w: F.embedding(i, w, padding_idx=0) * 3, embedding_args(torch.int64),
     EMBEDDINGS)
# A row reduction of embedding rows (an index per row) reads them in its prologue: one kernel, the index checked
# once per row. max_norm renormalises the table in place: torch's.
case("embedding_then_layer_norm", lambda i, w: F.layer_norm(F.embedding(i, w), w.shape[-1:]),
     embedding_args(torch.int64), EMBEDDINGS)
LN_EMBEDDINGS = (((2, 3), (50, 64)), ((2, 5), (40, 129)), ((3, 7), (30, 768)))


def embedding_layer_norm_args(index_dtype):
    def make(shape, dtype, device):
        idx, table, pos, pos_table = embedding_args(index_dtype, positions=True)(shape, dtype, device)
        d = table.shape[1]
        return idx, table, pos.to(index_dtype), pos_table, randn((d,), dtype, device), randn((d,), dtype, device)

    return make


for index_dtype in (torch.int64, torch.int32):
    tag = str(index_dtype).split(".")[1]
    case(f"embedding_positions_layer_norm_{tag}",
         lambda i, w, p, pw, lw, lb: F.layer_norm(F.embedding(i, w) + F.embedding(p, pw), w.shape[-1:], lw, lb),
         embedding_layer_norm_args(index_dtype), LN_EMBEDDINGS)
    case(f"embedding_softmax_{tag}", lambda i, w: torch.softmax(F.embedding(i, w) * 2, -1),
         embedding_args(index_dtype), LN_EMBEDDINGS)
# An index varying along the row: the gathered values are written, then the reduction reads them.
case("gather_last_then_softmax", lambda x, i: torch.softmax(x.gather(-1, i), -1), lambda shape, dtype, device: (
    randn(shape, dtype, device), indices(shape, shape[-1], torch.int64, device)), ((3, 64), (5, 129)), plan=(2, 0, 0))
case("embedding_max_norm_is_extern", lambda i, w: F.embedding(i, w, max_norm=1.0) * 2, embedding_args(torch.int64),
     EMBEDDINGS[1:2], plan=(1, 0, 1))


def gather_args(dim, smaller):
    """x of `shape`, an index along `dim` smaller than x by `smaller` in every dimension (at least 1 long)."""
    def make(shape, dtype, device):
        x = randn(shape, dtype, device)
        idx_shape = [max(1, s - smaller) for s in shape]
        idx_shape[dim] = shape[dim] + 2  # more picks than x has along dim: repeats
        return x, indices(tuple(idx_shape), shape[dim], torch.int64, device)

    return make


GATHERS = ((1, 1), (3, 5), (64, 1025))
case("gather_dim1", lambda x, i: x.gather(1, i) + 1, gather_args(1, 1), GATHERS)
case("gather_dim0", lambda x, i: torch.gather(x, 0, i) * 2, gather_args(0, 1), GATHERS)
case("gather_last_of_3d", lambda x, i: torch.gather(x, -1, index=i).exp(), gather_args(2, 1),
     ((1, 1, 1), (2, 3, 5), (4, 33, 65)))
# An index computed over the result's space joins the gathering kernel.
case("gather_computed_index", lambda x, i: x.gather(1, (i * 2).clamp(max=x.shape[1] - 1)) + 1, gather_args(1, 1),
     GATHERS)
case("gather_transposed_source", lambda x, i: x.t().gather(1, i) * 2,
     lambda shape, dtype, device: (randn(shape[::-1], dtype, device), gather_args(1, 1)(shape, dtype, device)[1]),
     GATHERS)


def index_select_args(dim):
    def make(shape, dtype, device):
        return randn(shape, dtype, device), indices((shape[dim] * 2 + 1,), shape[dim], torch.int64, device)

    return make


case("index_select_dim0", lambda x, i: torch.index_select(x, 0, i) * 2, index_select_args(0), GATHERS)
case("index_select_dim1", lambda x, i: x.index_select(1, i).sigmoid() + x[:, :1], index_select_args(1), GATHERS)


def tensor_index_args(index_shape, index_dtype=torch.int64):
    """x and an index into its first dimension, half of the entries made negative (counted from the end)."""
    def make(shape, dtype, device):
        i = indices(index_shape, shape[0], index_dtype, device)
        flip = torch.rand(index_shape, device=device) < 0.5
        return randn(shape, dtype, device), torch.where(flip, i - shape[0], i)

    return make


# x[idx]: index_select along dimension 0 generalised to any index shape; negative indices count from the end.
case("tensor_index", lambda x, i: x[i] * 2, tensor_index_args((5,)), GATHERS)
case("tensor_index_2d_int32", lambda x, i: x[i] + 1, tensor_index_args((3, 4), torch.int32), GATHERS)
case("tensor_index_of_3d", lambda x, i: x[i].sum(-1), tensor_index_args((6,)), ((4, 5, 7), (33, 2, 65)),
     plan=(2, 0, 0))

# ---- attention --------------------------------------------------------------------------------------------------
# (batch, seq, embed, heads); the module is an argument: one per shape and dtype, kept across calls (a new module
# would be a new guard, so a recompile).
MHA_SHAPES = ((2, 5, 24, 3), (3, 1, 16, 4), (4, 33, 64, 8), (1, 7, 24, 3))
_MHA_MODULES = {}


def mha_args(batch_first):
    def make(shape, dtype, device):
        b, t, e, h = shape
        key = (batch_first, shape, dtype, str(device))
        if key not in _MHA_MODULES:
            attn = torch.nn.MultiheadAttention(e, h, batch_first=batch_first).to(device, dtype).eval()
            with torch.no_grad():  # a non-zero in_proj_bias (torch starts it at 0)
                attn.in_proj_bias.normal_()
            _MHA_MODULES[key] = attn
        return randn((b, t, e) if batch_first else (t, b, e), dtype, device), _MHA_MODULES[key]

    return make


def mha_weights_used(x, attn):
    out, weights = attn(x, x, x)
    return out + weights.sum(-1, keepdim=True)


# QKV projection, one kernel splitting heads, scores, softmax kernel, values, output projection; the module's
# three mask/dtype helper calls are computed while tracing (constant arguments), and the transpose back to
# batch-first that is returned stays an extern op. (fastcomp.config.fused_attention off: the path for heads too
# long for the attention kernel.) Each case its own function, so its cache entry is its own.
# small_matmul off: the projections stay cuBLASLt calls at every shape here (some have 32 rows or fewer).
UNFUSED = {"fused_attention": False, "small_matmul": False}
FUSED = {"small_matmul": False}
case("mha_unfused_batch_first", lambda x, attn: attn(x, x, x)[0], mha_args(True), MHA_SHAPES, plan=(2, 4, 1),
     config=UNFUSED)
case("mha_unfused_seq_first", lambda x, attn: attn(x, x, x, need_weights=False)[0] * 2, mha_args(False),
     MHA_SHAPES, plan=(3, 4, 0), config=UNFUSED)
# By default the heads are one attention kernel between the two projections (the shapes' heads all fit in shared
# memory, T=424 of width 64 just, on an H100).
case("mha_fused_batch_first", lambda x, attn: attn(x, x, x)[0], mha_args(True), MHA_SHAPES, plan=(1, 2, 1),
     config=FUSED)
case("mha_fused_seq_first", lambda x, attn: attn(x, x, x, need_weights=False)[0] * 2, mha_args(False),
     MHA_SHAPES + ((2, 424, 128, 2),), plan=(2, 2, 0), config=FUSED)
# At 32 tokens or fewer (batch * seq) the two projections are small-matmul kernels, as F.linear's are.
SMALL_MHA_SHAPES = ((2, 5, 24, 3), (3, 1, 16, 4), (1, 32, 64, 8))
case("mha_fused_small_projections", lambda x, attn: attn(x, x, x)[0], mha_args(True), SMALL_MHA_SHAPES,
     plan=(3, 0, 1))
case("mha_unfused_small_projections", lambda x, attn: attn(x, x, x, need_weights=False)[0] * 2, mha_args(False),
     SMALL_MHA_SHAPES, plan=(5, 2, 0), config={"fused_attention": False})
# Keys that do not fit in shared memory (T=430, D=64): the four steps of the unfused heads.
case("mha_fused_too_long_keeps_the_steps", lambda x, attn: attn(x, x, x, need_weights=False)[0] * 2,
     mha_args(False), ((2, 430, 128, 2),), plan=(3, 4, 0))
# F.scaled_dot_product_attention: one attention kernel reading q, k, v in place (then the pointwise * 2);
# (B, H, T, D), ViT's 197 tokens, the longest T of width 64 that fits in an H100's shared memory. Off, torch's
# kernel.
SDPA_SHAPES = ((2, 3, 5, 8), (1, 1, 1, 16), (2, 4, 33, 64), (2, 3, 197, 64), (1, 2, 424, 64))


def sdpa_args(shape, dtype, device):
    return tuple(randn(shape, dtype, device) for _ in range(3))


def sdpa_head_views(shape, dtype, device):
    """q, k, v as a model makes them: [B, T, H*D] projections viewed as [B, H, T, D] heads."""
    b, h, t, d = shape
    return tuple(randn((b, t, h * d), dtype, device).view(b, t, h, d).transpose(1, 2) for _ in range(3))


case("sdpa_fused", lambda q, k, v: F.scaled_dot_product_attention(q, k, v) * 2, sdpa_args, SDPA_SHAPES,
     plan=(2, 0, 0))
case("sdpa_fused_causal_scaled", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3) * 2,
     sdpa_head_views, SDPA_SHAPES, plan=(2, 0, 0))
# `+ x`, not `- x`: a query attends mostly to itself, so `- x` cancels to near 0 and one bf16 rounding step of the
# attention output (torch's kernel rounds its probabilities to bf16) would exceed a tolerance scaled by the result.
case("sdpa_fused_same_tensor", lambda x: F.scaled_dot_product_attention(x, x, x, is_causal=True) + x, one,
     SDPA_SHAPES, plan=(2, 0, 0))
# Masks: a bool one made in the graph (its kernel, then the attention kernel reading it), an additive one broadcast
# over the heads as HF's [B, 1, T, S] masks are, a key padding mask [B, 1, 1, S] (in f16 and bf16 rounded as the
# kernel torch picks rounds: LowerOptions::sdp_kernel); grouped-query heads;
# queries against keys of another length (cross-attention).
case("sdpa_fused_with_a_bool_mask",
     lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=q[..., :1] > k[..., :1].mT) * 2, sdpa_args,
     ((2, 3, 5, 8), (2, 4, 33, 64)), plan=(3, 0, 0), dtypes=(torch.float32,))


def sdpa_with_additive_mask(shape, dtype, device):
    b, h, t, d = shape
    return sdpa_head_views(shape, dtype, device) + (randn((b, 1, t, t), dtype, device),)


def sdpa_with_key_padding(shape, dtype, device):
    b, h, t, d = shape
    keep = torch.arange(t, device=device) < torch.tensor([t, max(t // 2, 1)] * b, device=device)[:b, None]
    return sdpa_head_views(shape, dtype, device) + (keep[:, None, None, :],)


def sdpa_grouped(shape, dtype, device):
    b, h, t, d = shape
    return (randn((b, h, t, d), dtype, device), randn((b, h // 2, t, d), dtype, device),
            randn((b, h // 2, t, d), dtype, device))


def sdpa_cross(shape, dtype, device):
    b, h, t, d = shape
    return (randn((b, h, t, d), dtype, device), randn((b, h, 2 * t + 1, d), dtype, device),
            randn((b, h, 2 * t + 1, d), dtype, device), randn((1, h, t, 2 * t + 1), dtype, device))


case("sdpa_fused_with_an_additive_mask", lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m) * 2,
     sdpa_with_additive_mask, ((2, 3, 5, 8), (2, 4, 33, 64)), plan=(2, 0, 0), dtypes=(torch.float32,))
# Masked half heads under torch's kernels that give a row with no key 0 (not cuDNN's): torch picks one of them on
# any torch version, so the plan is fixed.
HALF_MASK_KERNELS = (torch.nn.attention.SDPBackend.EFFICIENT_ATTENTION, torch.nn.attention.SDPBackend.MATH)
case("sdpa_fused_half_with_an_additive_mask",
     lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m) * 2,
     sdpa_with_additive_mask, ((2, 3, 5, 8), (2, 4, 33, 64)), plan=(2, 0, 0), dtypes=(torch.float16, torch.bfloat16),
     sdpa=HALF_MASK_KERNELS)
case("sdpa_fused_with_a_key_padding_mask",
     lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.2) * 2,
     sdpa_with_key_padding, ((2, 3, 5, 8), (2, 4, 33, 64)), plan=(2, 0, 0),
     dtypes=(torch.float32, torch.float16, torch.bfloat16), sdpa=HALF_MASK_KERNELS)
case("sdpa_fused_grouped_query_heads",
     lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True) * 2,
     sdpa_grouped, ((2, 4, 5, 8), (1, 8, 33, 64)), plan=(2, 0, 0))
case("sdpa_fused_cross_attention_with_a_bias",
     lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m) * 2,
     sdpa_cross, ((2, 3, 5, 8), (2, 4, 33, 64)), plan=(2, 0, 0), dtypes=(torch.float32,))
case("sdpa_fused_cross_attention", lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v) * 2,
     sdpa_cross, ((2, 3, 5, 8), (2, 4, 33, 64)), plan=(2, 0, 0))
# Keys that do not fit in shared memory, or fused attention off: torch's own kernel.
case("sdpa_unfused_is_extern", lambda q, k, v: F.scaled_dot_product_attention(q, k, v) * 2, sdpa_args,
     ((2, 3, 5, 8),), plan=(1, 0, 1), config=UNFUSED)
case("sdpa_fused_too_long_is_extern", lambda q, k, v: F.scaled_dot_product_attention(q, k, v) * 2, sdpa_args,
     ((1, 2, 425, 64),), plan=(1, 0, 1))
# The averaged weights are needed: torch's own multi_head_attention_forward runs (the sum and the add are kernels).
case("mha_weights_used_is_extern", mha_weights_used, mha_args(True), MHA_SHAPES, plan=(2, 0, 4))
