"""cuBLASLt matmul plans: on the CPU, what the wrapper accepts and refuses, how it lowers a row-major matmul to
cuBLASLt's column-major one, its texts, its errors, and that cuBLASLt accepts every descriptor attribute it sets
(descriptors need no GPU). On a GPU, results against torch (torch.matmul, F.linear, torch.baddbmm, F.gelu with
approximate='tanh', relu) and against a float64 reference, for f32, f16 and bf16, odd shapes, transposed views,
shared weights, epilogues, residuals, misaligned pointers and side streams."""
import math
import os
import subprocess
import sys
import textwrap

import pytest

import fastcomp
from fastcomp._C import _testing as T

try:
    CUBLASLT_VERSION, CUBLASLT_ERROR = T.cublaslt_version(), ""
except T.CudaLibraryError as e:
    CUBLASLT_VERSION, CUBLASLT_ERROR = None, str(e)

needs_cublaslt = pytest.mark.skipif(
    CUBLASLT_VERSION is None, reason=f"cuBLASLt not found (pip install nvidia-cublas): {CUBLASLT_ERROR}")

PACKAGE_ROOT = os.path.dirname(os.path.dirname(fastcomp.__file__))


def row_major(m, n, k, dtype="f16", **fields):
    """The desc of a plain contiguous D[m, n] = A[m, k] @ B[k, n], with `fields` overriding."""
    desc = dict(m=m, n=n, k=k, dtype=dtype, a_row_stride=k, a_col_stride=1, b_row_stride=n, b_col_stride=1,
                d_row_stride=n)
    desc.update(fields)
    return desc


# ---------------------------------------------------------------------------------------------------------
# CPU: texts, decisions and lowering (no library needed)


def test_desc_text_is_stable():
    assert T.matmul_desc_to_string(**row_major(17, 33, 5)) == (
        "f16 m=17 n=33 k=5 batch=1 a=[5,1;0] b=[33,1;0] d=[33;0] alpha=1 beta=0 epilogue=none tf32=off "
        "reduced_precision_reduction=on")
    desc = row_major(4, 8, 16, dtype="f32", batch=3, a_batch_stride=64, b_batch_stride=0, d_batch_stride=32,
                     has_c=True, c_row_stride=8, c_batch_stride=0, alpha=0.5, beta=1.0, epilogue="gelu_tanh_bias",
                     allow_tf32=True, allow_reduced_precision_reduction=False)
    assert T.matmul_desc_to_string(**desc) == (
        "f32 m=4 n=8 k=16 batch=3 a=[16,1;64] b=[8,1;0] d=[8;32] c=[8;0] alpha=0.5 beta=1 epilogue=gelu_tanh_bias "
        "tf32=on reduced_precision_reduction=off")


def test_desc_fields_are_checked_by_name():
    with pytest.raises(TypeError, match="unknown MatmulDesc field 'a_rowstride'"):
        T.matmul_desc_to_string(**row_major(2, 2, 2), a_rowstride=3)
    with pytest.raises(ValueError, match="epilogue must be one of"):
        T.matmul_desc_to_string(**row_major(2, 2, 2, epilogue="gelu"))
    with pytest.raises(ValueError, match="dtype must be"):
        T.matmul_desc_to_string(**row_major(2, 2, 2, dtype="f64"))


def test_contiguous_matmul_is_the_column_major_product_with_operands_swapped():
    # D[17, 33] = A[17, 5] @ B[5, 33] is D^T[33, 17] = B^T[33, 5] @ A^T[5, 17], both read as stored (N).
    assert T.lower_matmul(**row_major(17, 33, 5)) == (
        "m=33 n=17 k=5 batch=1 a=N[33x5,ld=33,bs=0] b=N[5x17,ld=5,bs=0] c=[33x17,ld=33,bs=0] d=[33x17,ld=33,bs=0]")


def test_transposed_views_become_transposed_operands():
    # F.linear: B = W.t() for W [n=33, k=5] row-major, so B has strides (1, 5); A = x.t() of x [k=5, m=17].
    desc = row_major(17, 33, 5, a_row_stride=1, a_col_stride=17, b_row_stride=1, b_col_stride=5)
    assert T.lower_matmul(**desc) == (
        "m=33 n=17 k=5 batch=1 a=T[5x33,ld=5,bs=0] b=T[17x5,ld=17,bs=0] c=[33x17,ld=33,bs=0] d=[33x17,ld=33,bs=0]")


def test_padded_rows_become_leading_dimensions():
    desc = row_major(4, 6, 3, a_row_stride=8, b_row_stride=16, d_row_stride=10, has_c=True, c_row_stride=7)
    assert T.lower_matmul(**desc) == (
        "m=6 n=4 k=3 batch=1 a=N[6x3,ld=16,bs=0] b=N[3x4,ld=8,bs=0] c=[6x4,ld=7,bs=0] d=[6x4,ld=10,bs=0]")


def test_batch_strides_follow_the_swapped_operands():
    desc = row_major(4, 6, 3, batch=5, a_batch_stride=12, b_batch_stride=0, d_batch_stride=24, has_c=True,
                     c_row_stride=6, c_batch_stride=0)
    assert T.lower_matmul(**desc) == (
        "m=6 n=4 k=3 batch=5 a=N[6x3,ld=6,bs=0] b=N[3x4,ld=3,bs=12] c=[6x4,ld=6,bs=0] d=[6x4,ld=6,bs=24]")


def test_strides_of_size_one_dimensions_are_ignored():
    # torch gives size-1 dimensions arbitrary strides (x[:, None], expand, slicing); m = 1, k = 1, n = 1 here.
    vector_times_matrix = row_major(1, 7, 5, a_row_stride=999, a_col_stride=1)
    assert T.matmul_unsupported_reason(**vector_times_matrix) == ""
    assert "b=N[5x1,ld=5,bs=0]" in T.lower_matmul(**vector_times_matrix)
    outer = row_major(6, 7, 1, a_row_stride=3, a_col_stride=42, b_row_stride=13, b_col_stride=1, d_row_stride=7)
    assert T.matmul_unsupported_reason(**outer) == ""
    column = row_major(6, 1, 4, b_row_stride=1, b_col_stride=0, d_row_stride=1)
    assert T.matmul_unsupported_reason(**column) == ""
    assert T.lower_matmul(**column).startswith("m=1 n=6 k=4 batch=1 a=N[1x4,ld=1,bs=0]")


@pytest.mark.parametrize("change, reason", [
    (dict(m=0), "an empty matmul (m=0, n=8, k=4, batch=1)"),
    (dict(k=0), "an empty matmul"),
    (dict(batch=0), "an empty matmul"),
    (dict(n=2**31), "a size above 2^31-1"),
    (dict(a_row_stride=-4), "a negative stride"),
    (dict(a_row_stride=2, a_col_stride=3), "A [6, 4] has strides (2, 3): cuBLASLt needs one of them to be 1"),
    (dict(b_row_stride=1, b_col_stride=1), "B [4, 8] has strides (1, 1)"),
    (dict(b_row_stride=0, b_col_stride=1), "B [4, 8] has strides (0, 1)"),  # an expanded row
    (dict(d_row_stride=7), "D [6, 8] has row stride 7: rows overlap"),
    (dict(batch=2, d_batch_stride=0), "D has batch stride 0"),
    (dict(has_c=True, c_row_stride=0), "C [6, 8] has row stride 0"),
    (dict(beta=1.0), "beta=1 without a C matrix"),
    (dict(batch=2, d_batch_stride=48, bias_batch_stride=8), "a bias batch stride (8) without a bias epilogue"),
    (dict(batch=2, d_batch_stride=48, epilogue="bias", bias_batch_stride=-8), "a negative stride"),
])
def test_unsupported_descs_say_why(change, reason):
    desc = {**row_major(6, 8, 4), **change}
    assert reason in T.matmul_unsupported_reason(**desc)
    with pytest.raises(ValueError, match="check matmul_supported"):
        T.lower_matmul(**desc)


def test_supported_descs_have_no_reason():
    for desc in [row_major(6, 8, 4), row_major(6, 8, 4, has_c=True, c_row_stride=8, beta=1.0),
                 row_major(6, 8, 4, batch=3, a_batch_stride=0, b_batch_stride=0, d_batch_stride=48),
                 row_major(6, 8, 4, epilogue="relu_bias", dtype="bf16"), row_major(1, 1, 1)]:
        assert T.matmul_unsupported_reason(**desc) == "", desc


# ---------------------------------------------------------------------------------------------------------
# CPU with the cuBLASLt library: descriptors, status texts, missing library


@needs_cublaslt
def test_cublaslt_version_text():
    major, minor, patch = CUBLASLT_VERSION.split(".")
    assert int(major) >= 12 and int(minor) >= 0 and int(patch) >= 0


@needs_cublaslt
@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
@pytest.mark.parametrize("epilogue", ["none", "bias", "gelu_tanh", "gelu_tanh_bias", "relu", "relu_bias"])
def test_cublaslt_accepts_every_descriptor_attribute(dtype, epilogue):
    """cuBLASLt checks each attribute's size against its own type: this catches a wrong declaration in
    cuda_api.h on a machine without a GPU."""
    desc = row_major(17, 33, 5, dtype=dtype, batch=3, a_batch_stride=85, b_batch_stride=0, d_batch_stride=561,
                     has_c=True, c_row_stride=33, c_batch_stride=561, beta=1.0, epilogue=epilogue,
                     allow_tf32=dtype == "f32", allow_reduced_precision_reduction=False)
    assert T.check_matmul_descriptors(1 << 20, **desc) == T.lower_matmul(**desc)
    assert T.check_matmul_descriptors(0, **row_major(3, 3, 3, dtype=dtype, epilogue=epilogue))


@needs_cublaslt
def test_cublaslt_accepts_a_bias_batch_stride():
    """A group of F.linear products (plan/group_products.h): a bias a batch, bias_batch_stride apart."""
    desc = row_major(17, 33, 5, batch=3, a_batch_stride=0, b_batch_stride=4096, d_batch_stride=561, epilogue="bias",
                     bias_batch_stride=512)
    assert "epilogue=bias bias_bs=512 tf32" in T.matmul_desc_to_string(**desc)
    assert T.check_matmul_descriptors(1 << 20, **desc) == T.lower_matmul(**desc)


@needs_cublaslt
def test_cublas_status_texts_name_the_status_and_what_to_do():
    assert T.describe_cublas_status(0) == "CUBLAS_STATUS_SUCCESS (success)"
    not_supported = T.describe_cublas_status(15)
    assert not_supported.startswith("CUBLAS_STATUS_NOT_SUPPORTED (")
    assert "run this matmul through torch instead" in not_supported
    assert "please report it" in T.describe_cublas_status(7)  # INVALID_VALUE: our bug
    assert T.describe_cublas_status(12345) == "cublasStatus_t 12345"


def run_python(code, **env):
    full_env = dict(os.environ, PYTHONPATH=os.pathsep.join([PACKAGE_ROOT, os.environ.get("PYTHONPATH", "")]))
    for key, value in env.items():
        if value is None:
            full_env.pop(key, None)
        else:
            full_env[key] = value
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_missing_cublaslt_says_how_to_install_it(tmp_path):
    """A fresh process whose sys.path hides the wheel folders and whose FASTCOMP_CUDA_HOME is empty."""
    out = run_python("""
        import os, sys
        from fastcomp._C import _testing as T
        sys.path[:] = [p for p in sys.path if not os.path.isdir(os.path.join(p, "nvidia"))]
        try:
            print("FOUND", T.cublaslt_version())
        except T.CudaLibraryError as e:
            print(e)
        try:
            T.MatmulPlan(0, 0, m=2, n=2, k=2, dtype="f32", a_row_stride=2, a_col_stride=1, b_row_stride=2,
                         b_col_stride=1, d_row_stride=2)
        except RuntimeError as e:
            print("PLAN:", type(e).__name__)
        """, FASTCOMP_CUDA_HOME=str(tmp_path), CUDA_HOME=None, CUDA_PATH=None)
    if out.startswith("FOUND"):
        pytest.skip("cuBLASLt is also installed outside the pip wheel folders (a toolkit or the loader path)")
    assert out.startswith("fastcomp could not load cuBLASLt (libcublasLt.so.13 or libcublasLt.so.12); searched:")
    assert f"{tmp_path} (FASTCOMP_CUDA_HOME): no lib64/ or lib/ folder" in out
    assert "to fix: pip install nvidia-cublas" in out
    assert "PLAN: CudaLibraryError" in out


@needs_cublaslt
def test_plan_without_a_driver_names_the_driver():
    driver = next(s for s in T.cuda_libraries_status() if s["name"] == "CUDA driver")
    if driver["path"] is not None:
        pytest.skip(f"a CUDA driver is installed ({driver['path']})")
    with pytest.raises(T.CudaLibraryError, match=r"could not load CUDA driver"):
        T.MatmulPlan(0, 0, **row_major(2, 2, 2))


def test_plan_of_unsupported_desc_is_a_value_error():
    with pytest.raises(ValueError, match=r"beta=1 without a C matrix"):
        T.MatmulPlan(0, 0, **row_major(2, 2, 2, beta=1.0))


# ---------------------------------------------------------------------------------------------------------
# GPU: results against torch and a float64 reference

WORKSPACE_BYTES = 4 << 20
DTYPES = ["float32", "float16", "bfloat16"]
NAMES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
# Relative to |reference| and to the root-mean-square of the whole result (the error of a dot product is
# relative to the size of its terms, not of its sum, which can cancel to ~0). f32 runs without TF32, so only
# accumulation order differs from the float64 reference; f16/bf16 also round the output (2^-11, 2^-8).
TOLERANCE = {"float32": 2e-5, "float16": 1e-2, "bfloat16": 1e-2}


@pytest.fixture
def torch_cuda():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    # The f32 comparisons with torch assume full fp32 products on torch's side too.
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield torch
    torch.backends.cuda.matmul.allow_tf32 = saved


def dtype_of(name):
    import torch

    dtype = getattr(torch, name)
    if dtype == torch.bfloat16 and torch.cuda.get_device_capability()[0] < 8:
        pytest.skip("bf16 matmuls need sm_80 or newer")
    return dtype


def matrix(t):
    """(rows, cols, row stride, column stride, batch stride) of a 2-D matrix or a 3-D batch of them."""
    if t.dim() == 2:
        return (*t.shape, *t.stride(), 0)
    return (t.shape[1], t.shape[2], t.stride(1), t.stride(2), t.stride(0))


def desc_of(a, b, d, c=None, **fields):
    m, k, a_rs, a_cs, a_bs = matrix(a)
    k2, n, b_rs, b_cs, b_bs = matrix(b)
    m2, n2, d_rs, d_cs, d_bs = matrix(d)
    assert (k, m, n) == (k2, m2, n2) and d_cs == 1
    desc = dict(m=m, n=n, k=k, batch=d.shape[0] if d.dim() == 3 else 1, dtype=NAMES[str(d.dtype)[6:]],
                a_row_stride=a_rs, a_col_stride=a_cs, a_batch_stride=a_bs, b_row_stride=b_rs, b_col_stride=b_cs,
                b_batch_stride=b_bs, d_row_stride=d_rs, d_batch_stride=d_bs)
    if c is not None:
        _, _, c_rs, c_cs, c_bs = matrix(c)
        assert c_cs == 1
        desc.update(has_c=True, c_row_stride=c_rs, c_batch_stride=c_bs)
    desc.update(fields)
    return desc


def new_output(torch, a, b, dtype):
    shape = (*([a.shape[0]] if a.dim() == 3 else [b.shape[0]] if b.dim() == 3 else []), a.shape[-2], b.shape[-1])
    return torch.full(shape, float("nan"), dtype=dtype, device="cuda")


def cublaslt_matmul(a, b, *, c=None, bias=None, out=None, stream=None, workspace_bytes=WORKSPACE_BYTES, plan=None,
                    **fields):
    """D = act(alpha * a @ b + beta * c + bias) through a MatmulPlan, on `stream` (default: torch's current
    one). `out` (default: a fresh NaN-filled tensor, so an unwritten element shows) may be a strided view."""
    import torch

    d = new_output(torch, a, b, a.dtype) if out is None else out
    if plan is None:
        plan = T.MatmulPlan(a.device.index or 0, workspace_bytes, **desc_of(a, b, d, c, **fields))
    workspace = torch.empty(workspace_bytes, dtype=torch.uint8, device=a.device) if workspace_bytes else None
    stream = stream or torch.cuda.current_stream()
    plan.run(a.data_ptr(), b.data_ptr(), 0 if c is None else c.data_ptr(), d.data_ptr(),
             0 if bias is None else bias.data_ptr(), 0 if workspace is None else workspace.data_ptr(),
             stream.cuda_stream)
    if workspace is not None:
        workspace.record_stream(stream)
    return d


def reference(a, b, *, c=None, bias=None, alpha=1.0, beta=0.0, epilogue="none"):
    import torch
    import torch.nn.functional as F

    ref = alpha * (a.double() @ b.double())
    if c is not None:
        ref = ref + beta * c.double()
    if bias is not None:
        ref = ref + bias.double()
    if epilogue.startswith("gelu_tanh"):
        ref = F.gelu(ref, approximate="tanh")
    elif epilogue.startswith("relu"):
        ref = torch.relu(ref)
    return ref


def assert_matches(out, ref, tolerance, what="cuBLASLt"):
    import torch

    assert out.shape == ref.shape, (out.shape, ref.shape)
    assert torch.isfinite(out).all(), f"{what}: {(~torch.isfinite(out)).sum().item()} elements not finite"
    rms = ref.pow(2).mean().sqrt().item() or 1.0
    error = (out.double() - ref).abs()
    allowed = tolerance * (ref.abs() + rms)
    bad = error > allowed
    if bad.any():
        worst = (error / allowed).argmax()
        index = [int(i) for i in torch.unravel_index(worst, out.shape)]
        raise AssertionError(f"{what}: {bad.sum().item()} of {out.numel()} elements off; worst at {index}: "
                             f"{out.flatten()[worst].item()} vs {ref.flatten()[worst].item()} (rms {rms:.3g}, "
                             f"tolerance {tolerance})")


def check(ours, torch_result, ref, dtype_name, tolerance=None):
    """Ours and torch's results both within tolerance of the float64 reference: if torch's is not, the tolerance
    is wrong, not cuBLASLt."""
    tolerance = tolerance or TOLERANCE[dtype_name]
    assert_matches(torch_result, ref, tolerance, "torch (checks the tolerance itself)")
    assert_matches(ours, ref, tolerance)


def randn(torch, *shape, dtype, scale=1.0):
    return (torch.randn(*shape, device="cuda", dtype=torch.float32) * scale).to(dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("m, n, k", [(1, 1, 1), (3, 17, 5), (17, 3, 1025), (1025, 17, 3), (64, 128, 256),
                                     (1, 1025, 17), (128, 1, 64), (33, 65, 127)])
def test_matmul_matches_torch(torch_cuda, dtype_name, m, n, k):
    torch = torch_cuda
    dtype = dtype_of(dtype_name)
    torch.manual_seed(m * 1_000_000 + n * 1000 + k)
    a, b = randn(torch, m, k, dtype=dtype), randn(torch, k, n, dtype=dtype)
    ours = cublaslt_matmul(a, b)
    theirs = torch.matmul(a, b)
    check(ours, theirs, reference(a, b), dtype_name)


@pytest.mark.gpu
def test_f32_without_tf32_is_as_close_to_torch_as_cublas_to_itself(torch_cuda):
    torch = torch_cuda
    torch.manual_seed(0)
    for m, n, k in [(17, 33, 1025), (256, 256, 256), (5, 1000, 7)]:
        a, b = torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")
        ours, theirs = cublaslt_matmul(a, b), a @ b
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5 * math.sqrt(k))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("a_transposed, b_transposed", [(True, False), (False, True), (True, True)])
def test_transposed_views(torch_cuda, dtype_name, a_transposed, b_transposed):
    torch = torch_cuda
    dtype = dtype_of(dtype_name)
    torch.manual_seed(1)
    m, n, k = 37, 19, 70
    a = randn(torch, k, m, dtype=dtype).t() if a_transposed else randn(torch, m, k, dtype=dtype)
    b = randn(torch, n, k, dtype=dtype).t() if b_transposed else randn(torch, k, n, dtype=dtype)
    assert a.shape == (m, k) and b.shape == (k, n)
    check(cublaslt_matmul(a, b), a @ b, reference(a, b), dtype_name)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", DTYPES)
def test_batched_transposed_operands(torch_cuda, dtype_name):
    """q @ k.transpose(-2, -1), attention's first product."""
    torch = torch_cuda
    dtype = dtype_of(dtype_name)
    torch.manual_seed(2)
    q, kk = randn(torch, 6, 33, 16, dtype=dtype), randn(torch, 6, 47, 16, dtype=dtype)
    kt = kk.transpose(-2, -1)
    check(cublaslt_matmul(q, kt), q @ kt, reference(q, kt), dtype_name)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", DTYPES)
def test_weight_shared_across_the_batch(torch_cuda, dtype_name):
    """B with batch stride 0: x[batch, m, k] @ w[k, n], as torch.matmul broadcasts it."""
    torch = torch_cuda
    dtype = dtype_of(dtype_name)
    torch.manual_seed(3)
    x, w = randn(torch, 4, 17, 40, dtype=dtype), randn(torch, 40, 24, dtype=dtype)
    w_batched = w.expand(4, 40, 24)
    assert w_batched.stride(0) == 0
    ours = cublaslt_matmul(x, w_batched)
    check(ours, torch.matmul(x, w), reference(x, w), dtype_name)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", DTYPES)
def test_bias_epilogue_matches_f_linear(torch_cuda, dtype_name):
    """F.linear(x, W, b) = x @ W^T + b with W [n, k] row-major, so B = W.t() has strides (1, k)."""
    import torch.nn.functional as F

    torch = torch_cuda
    dtype = dtype_of(dtype_name)
    torch.manual_seed(4)
    for m, n, k in [(10, 48, 64), (1, 3, 17), (1025, 17, 33)]:
        x, w, bias = randn(torch, m, k, dtype=dtype), randn(torch, n, k, dtype=dtype), randn(torch, n, dtype=dtype,
                                                                                              scale=4.0)
        ours = cublaslt_matmul(x, w.t(), bias=bias, epilogue="bias")
        check(ours, F.linear(x, w, bias), reference(x, w.t(), bias=bias), dtype_name)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", DTYPES)
def test_bias_is_broadcast_over_rows_and_batches(torch_cuda, dtype_name):
    import torch.nn.functional as F

    torch = torch_cuda
    dtype = dtype_of(dtype_name)
    torch.manual_seed(5)
    x, w, bias = randn(torch, 3, 9, 32, dtype=dtype), randn(torch, 20, 32, dtype=dtype), randn(torch, 20, dtype=dtype,
                                                                                               scale=4.0)
    ours = cublaslt_matmul(x, w.t().expand(3, 32, 20), bias=bias, epilogue="bias")
    check(ours, F.linear(x, w, bias), reference(x, w.t(), bias=bias), dtype_name)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("with_bias", [True, False])
def test_gelu_tanh_epilogue_matches_f_gelu_tanh(torch_cuda, dtype_name, with_bias):
    import torch.nn.functional as F

    torch = torch_cuda
    dtype = dtype_of(dtype_name)
    torch.manual_seed(6)
    m, n, k = 65, 96, 48
    x, w = randn(torch, m, k, dtype=dtype, scale=0.3), randn(torch, n, k, dtype=dtype, scale=0.3)
    bias = randn(torch, n, dtype=dtype) if with_bias else None
    ours = cublaslt_matmul(x, w.t(), bias=bias, epilogue="gelu_tanh_bias" if with_bias else "gelu_tanh")
    theirs = F.gelu(F.linear(x, w, bias), approximate="tanh")
    # Looser in f32 than a plain product: cuBLASLt's tanh need not round like torch's. On an H200 it came within
    # 5e-6 of the exact tanh-GELU, but a cuBLAS that used the fast tanh.approx would be up to ~5e-4 off.
    tolerance = 1e-3 if dtype_name == "float32" else None
    check(ours, theirs, reference(x, w.t(), bias=bias, epilogue="gelu_tanh"), dtype_name, tolerance)


@pytest.mark.gpu
def test_gelu_epilogue_is_the_tanh_approximation_not_erf(torch_cuda):
    """The header's warning, measured on x in [-5, 5] (D = x @ ones[1, 8], f32). erf-GELU (F.gelu's default)
    differs from tanh-GELU by a smooth curve e(x) of up to 4.7e-4; cuBLASLt may evaluate tanh approximately,
    with errors of similar size but no resemblance to e(x). So: project cuBLASLt's deviation from tanh-GELU on
    e(x); an erf implementation would give ~1, a tanh one ~0."""
    import torch.nn.functional as F

    torch = torch_cuda
    x = torch.linspace(-5, 5, 8192, device="cuda").unsqueeze(1)
    ours = cublaslt_matmul(x, torch.ones(1, 8, device="cuda"), epilogue="gelu_tanh").double()
    exact = x.double().expand(8192, 8)
    tanh_gelu = F.gelu(exact, approximate="tanh")
    e = F.gelu(exact) - tanh_gelu
    assert e.abs().max().item() > 4e-4
    deviation = ours - tanh_gelu
    assert deviation.abs().max().item() < 2e-3, "far from both GELUs"
    resemblance = ((deviation * e).sum() / (e * e).sum()).item()
    assert abs(resemblance) < 0.5, f"cuBLASLt's GELU looks like erf-GELU (projection {resemblance:.2f})"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("with_bias", [True, False])
def test_relu_epilogue_matches_relu_of_linear(torch_cuda, dtype_name, with_bias):
    import torch.nn.functional as F

    torch = torch_cuda
    dtype = dtype_of(dtype_name)
    torch.manual_seed(7)
    x, w = randn(torch, 33, 40, dtype=dtype), randn(torch, 50, 40, dtype=dtype)
    bias = randn(torch, 50, dtype=dtype, scale=4.0) if with_bias else None
    ours = cublaslt_matmul(x, w.t(), bias=bias, epilogue="relu_bias" if with_bias else "relu")
    assert (ours == 0).float().mean().item() > 0.3  # the activation did clip
    check(ours, torch.relu(F.linear(x, w, bias)), reference(x, w.t(), bias=bias, epilogue="relu"), dtype_name)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("alpha, beta", [(1.0, 1.0), (2.0, 0.5), (1.0, 0.0)])
def test_residual_matches_baddbmm(torch_cuda, dtype_name, alpha, beta):
    torch = torch_cuda
    dtype = dtype_of(dtype_name)
    torch.manual_seed(8)
    c, a, b = randn(torch, 3, 21, 14, dtype=dtype, scale=5.0), randn(torch, 3, 21, 30, dtype=dtype), randn(
        torch, 3, 30, 14, dtype=dtype)
    ours = cublaslt_matmul(a, b, c=c, alpha=alpha, beta=beta)
    theirs = torch.baddbmm(c, a, b, alpha=alpha, beta=beta)
    check(ours, theirs, reference(a, b, c=c, alpha=alpha, beta=beta), dtype_name)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", ["float32", "float16"])
def test_residual_shared_across_the_batch(torch_cuda, dtype_name):
    """C with batch stride 0 (one [m, n] residual added to every batch)."""
    torch = torch_cuda
    dtype = dtype_of(dtype_name)
    torch.manual_seed(9)
    c, a, b = randn(torch, 21, 14, dtype=dtype, scale=5.0), randn(torch, 3, 21, 30, dtype=dtype), randn(
        torch, 3, 30, 14, dtype=dtype)
    ours = cublaslt_matmul(a, b, c=c.expand(3, 21, 14), beta=1.0)
    check(ours, torch.baddbmm(c.expand(3, 21, 14), a, b), reference(a, b, c=c, beta=1.0), dtype_name)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
def test_activation_applies_to_the_sum_with_the_residual(torch_cuda, dtype_name):
    """relu(a @ b + c + bias): cuBLASLt adds beta * C before the epilogue, as the header says."""
    torch = torch_cuda
    dtype = dtype_of(dtype_name)
    torch.manual_seed(10)
    a, b = randn(torch, 40, 24, dtype=dtype), randn(torch, 24, 36, dtype=dtype)
    c, bias = randn(torch, 40, 36, dtype=dtype, scale=5.0), randn(torch, 36, dtype=dtype, scale=4.0)
    ours = cublaslt_matmul(a, b, c=c, bias=bias, beta=1.0, epilogue="relu_bias")
    theirs = torch.relu(torch.addmm(c, a, b) + bias)
    check(ours, theirs, reference(a, b, c=c, bias=bias, beta=1.0, epilogue="relu"), dtype_name)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", DTYPES)
def test_in_place_residual(torch_cuda, dtype_name):
    """c == d: x += a @ b, as a residual connection written into its own buffer."""
    torch = torch_cuda
    dtype = dtype_of(dtype_name)
    torch.manual_seed(11)
    a, b, x = randn(torch, 30, 20, dtype=dtype), randn(torch, 20, 25, dtype=dtype), randn(torch, 30, 25, dtype=dtype)
    expected_ref = reference(a, b, c=x, beta=1.0)
    theirs = torch.addmm(x, a, b)
    ours = cublaslt_matmul(a, b, c=x, out=x, beta=1.0)
    assert ours.data_ptr() == x.data_ptr()
    check(ours, theirs, expected_ref, dtype_name)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", DTYPES)
def test_strided_views_and_output_padding(torch_cuda, dtype_name):
    """A, B and D as column slices of wider buffers (row stride > width); D's padding must stay untouched."""
    torch = torch_cuda
    dtype = dtype_of(dtype_name)
    torch.manual_seed(12)
    m, n, k = 19, 23, 29
    a = randn(torch, m, k + 11, dtype=dtype)[:, 3:3 + k]
    b = randn(torch, k, n + 5, dtype=dtype)[:, :n]
    buffer = torch.full((m, n + 9), 7.0, dtype=dtype, device="cuda")
    d = buffer[:, 4:4 + n]
    cublaslt_matmul(a, b, out=d)
    assert (buffer[:, :4] == 7).all() and (buffer[:, 4 + n:] == 7).all(), "wrote outside D"
    check(d, a @ b, reference(a, b), dtype_name)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("offset_elements", [1, 2, 4, 8, 64])
def test_less_aligned_pointers_use_an_algorithm_for_their_alignment(torch_cuda, dtype_name, offset_elements):
    """Views starting `offset_elements` into a fresh allocation (f16 offset 1: 2-byte aligned; 8: 16-byte;
    64: 128-byte). The plan was chosen for 256-byte alignment, so run() must switch algorithm."""
    torch = torch_cuda
    dtype = dtype_of(dtype_name)
    torch.manual_seed(13)
    m, n, k = 64, 96, 128  # sizes whose aligned algorithm loads 16 bytes at a time
    a = randn(torch, m * k + offset_elements, dtype=dtype)[offset_elements:].view(m, k)
    b = randn(torch, k, n, dtype=dtype)
    bias = randn(torch, n + offset_elements, dtype=dtype)[offset_elements:]
    d = torch.full((m * n + offset_elements,), float("nan"), dtype=dtype, device="cuda")[offset_elements:].view(m, n)
    plan = T.MatmulPlan(0, WORKSPACE_BYTES, **desc_of(a, b, d, epilogue="bias"))
    cublaslt_matmul(a, b, bias=bias, out=d, plan=plan)
    check(d, a @ b + bias, reference(a, b, bias=bias), dtype_name)
    # The same plan still runs aligned pointers correctly afterwards.
    a2, d2 = a.clone(), torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
    cublaslt_matmul(a2, b, bias=bias.clone(), out=d2, plan=plan)
    check(d2, a @ b + bias, reference(a, b, bias=bias), dtype_name)


@pytest.mark.gpu
def test_pointer_less_aligned_than_its_element_is_refused(torch_cuda):
    torch = torch_cuda
    raw = torch.zeros(4 * 4 * 4 + 2, dtype=torch.uint8, device="cuda")
    b, d = torch.ones(4, 4, device="cuda"), torch.zeros(4, 4, device="cuda")
    plan = T.MatmulPlan(0, 0, **row_major(4, 4, 4, dtype="f32"))
    with pytest.raises(ValueError, match="aligned to 2 bytes, less than one f32 element"):
        plan.run(raw.data_ptr() + 2, b.data_ptr(), 0, d.data_ptr(), 0, 0, torch.cuda.current_stream().cuda_stream)


@pytest.mark.gpu
def test_missing_pointers_are_refused(torch_cuda):
    torch = torch_cuda
    x = torch.ones(4, 4, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    with_c = T.MatmulPlan(0, 0, **row_major(4, 4, 4, dtype="f32", has_c=True, c_row_stride=4, beta=1.0))
    with pytest.raises(ValueError, match="c is null"):
        with_c.run(x.data_ptr(), x.data_ptr(), 0, x.data_ptr(), 0, 0, stream)
    with_bias = T.MatmulPlan(0, 0, **row_major(4, 4, 4, dtype="f32", epilogue="bias"))
    with pytest.raises(ValueError, match="bias is null"):
        with_bias.run(x.data_ptr(), x.data_ptr(), 0, x.data_ptr(), 0, 0, stream)
    needs_workspace = T.MatmulPlan(0, 1024, **row_major(4, 4, 4, dtype="f32"))
    with pytest.raises(ValueError, match="1024-byte workspace but none was given"):
        needs_workspace.run(x.data_ptr(), x.data_ptr(), 0, x.data_ptr(), 0, 0, stream)


@pytest.mark.gpu
def test_one_plan_runs_many_times_with_new_pointers_and_data(torch_cuda):
    torch = torch_cuda
    torch.manual_seed(14)
    m, n, k = 48, 40, 56
    x0, w0 = torch.randn(m, k, device="cuda", dtype=torch.float16), torch.randn(n, k, device="cuda",
                                                                                dtype=torch.float16)
    plan = T.MatmulPlan(0, WORKSPACE_BYTES, **desc_of(x0, w0.t(), torch.empty(m, n, dtype=torch.float16),
                                                      epilogue="gelu_tanh_bias"))
    assert plan.device == 0 and plan.workspace_bytes == WORKSPACE_BYTES and plan.workspace_used <= WORKSPACE_BYTES
    text = str(plan)
    assert text.startswith("f16 m=48 n=40 k=56") and "\n  cublasLt: m=40 n=48 k=56" in text
    for _ in range(4):
        x, w = torch.randn(m, k, device="cuda", dtype=torch.float16), torch.randn(n, k, device="cuda",
                                                                                  dtype=torch.float16)
        bias = torch.randn(n, device="cuda", dtype=torch.float16)  # a new bias pointer every run
        ours = cublaslt_matmul(x, w.t(), bias=bias, plan=plan)
        check(ours, torch.nn.functional.gelu(torch.nn.functional.linear(x, w, bias), approximate="tanh"),
              reference(x, w.t(), bias=bias, epilogue="gelu_tanh"), "float16")


@pytest.mark.gpu
def test_runs_on_the_given_stream(torch_cuda):
    """The inputs are written on a side stream after a long sleep there; the matmul queued on that stream must
    see them (on any other stream it would read the zeros they held before)."""
    torch = torch_cuda
    torch.manual_seed(15)
    source_a, b = torch.randn(128, 256, device="cuda"), torch.randn(256, 64, device="cuda")
    a = torch.zeros_like(source_a)
    d = torch.full((128, 64), float("nan"), device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time
        a.copy_(source_a)
        cublaslt_matmul(a, b, out=d, stream=stream)
    torch.cuda.current_stream().wait_stream(stream)
    check(d, source_a @ b, reference(source_a, b), "float32")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
def test_without_reduced_precision_reduction(torch_cuda, dtype_name):
    """A long k (split-K territory) with reduced-precision split-K reductions forbidden."""
    torch = torch_cuda
    dtype = dtype_of(dtype_name)
    torch.manual_seed(16)
    a, b = randn(torch, 32, 16384, dtype=dtype), randn(torch, 16384, 48, dtype=dtype)
    ours = cublaslt_matmul(a, b, allow_reduced_precision_reduction=False)
    check(ours, (a.float() @ b.float()).to(dtype), reference(a, b), dtype_name)


@pytest.mark.gpu
def test_tf32_is_used_only_when_allowed(torch_cuda):
    """With allow_tf32 the inputs are rounded to 10-bit mantissas: the result is close to torch's TF32 result,
    and (for inputs with full fp32 mantissas) measurably further from the float64 reference than without."""
    torch = torch_cuda
    if torch.cuda.get_device_capability()[0] < 8:
        pytest.skip("TF32 needs sm_80 or newer")
    torch.manual_seed(17)
    a, b = torch.randn(256, 512, device="cuda"), torch.randn(512, 128, device="cuda")
    ref = reference(a, b)
    exact = cublaslt_matmul(a, b)
    tf32 = cublaslt_matmul(a, b, allow_tf32=True)
    exact_error = (exact.double() - ref).abs().max().item()
    tf32_error = (tf32.double() - ref).abs().max().item()
    assert tf32_error > 10 * exact_error, (tf32_error, exact_error)
    assert_matches(tf32, ref, 5e-3, "cuBLASLt with TF32")


@pytest.mark.gpu
def test_zero_workspace(torch_cuda):
    torch = torch_cuda
    torch.manual_seed(18)
    a, b = torch.randn(16, 4096, device="cuda"), torch.randn(4096, 16, device="cuda")
    check(cublaslt_matmul(a, b, workspace_bytes=0), a @ b, reference(a, b), "float32")


@pytest.mark.gpu
def test_runs_on_another_device_and_leaves_the_current_one(torch_cuda):
    torch = torch_cuda
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    torch.manual_seed(19)
    a, b = torch.randn(20, 30, device="cuda:1"), torch.randn(30, 40, device="cuda:1")
    with torch.cuda.device(0):
        d = torch.full((20, 40), float("nan"), device="cuda:1")
        plan = T.MatmulPlan(1, 0, **desc_of(a, b, d))
        plan.run(a.data_ptr(), b.data_ptr(), 0, d.data_ptr(), 0, 0, torch.cuda.current_stream(1).cuda_stream)
        assert torch.cuda.current_device() == 0
    torch.cuda.synchronize(1)
    check(d, a @ b, reference(a, b), "float32")


# ---------------------------------------------------------------------------------------------------------
# Tuning: the first aligned run times the heuristic's candidates and keeps the fastest


def tuning_case(torch, seed, m=1024, n=512, k=2048):
    """A W7-sized fp32 product with a bias (the shapes where the heuristic's favourite is often not the fastest)."""
    torch.manual_seed(seed)
    a, w = randn(torch, m, k, dtype=torch.float32), randn(torch, n, k, dtype=torch.float32)
    bias = randn(torch, n, dtype=torch.float32)
    return a, w.t(), bias


@pytest.mark.gpu
def test_tuning_keeps_the_result_and_says_what_it_chose(torch_cuda):
    import fastcomp

    torch = torch_cuda
    a, b, bias = tuning_case(torch, 21, n=520)  # a shape no other test tunes, so this process has no pick yet
    d = new_output(torch, a, b, a.dtype)
    with fastcomp.config.patch(matmul_tuning=True):
        plan = T.MatmulPlan(0, WORKSPACE_BYTES, **desc_of(a, b, d, epilogue="bias"))
        assert plan.tuning == "not tuned yet"
        cublaslt_matmul(a, b, bias=bias, out=d, plan=plan)
        torch.cuda.synchronize()
        assert plan.tuning.startswith("tuned: "), plan.tuning
        assert "candidate" in plan.tuning and " us" in plan.tuning
        assert plan.tuning in str(plan)
        check(d, a @ b + bias, reference(a, b, bias=bias), "float32")
        # New values through the tuned plan, and a second plan of the same product reuses the pick.
        a2 = randn(torch, *a.shape, dtype=torch.float32)
        d2 = cublaslt_matmul(a2, b, bias=bias, plan=plan)
        check(d2, a2 @ b + bias, reference(a2, b, bias=bias), "float32")
        again = T.MatmulPlan(0, WORKSPACE_BYTES, **desc_of(a, b, d, epilogue="bias"))
        assert again.tuning == plan.tuning + " (earlier in this process)"
        d3 = cublaslt_matmul(a2, b, bias=bias, plan=again)
        check(d3, a2 @ b + bias, reference(a2, b, bias=bias), "float32")


@pytest.mark.gpu
def test_a_tuned_pick_is_kept_on_disk_for_the_next_process(tmp_path):
    """The kernel cache keeps the pick: a new process plans the same product as tuned and does not time it again
    (a warm start would otherwise pay ~10 ms of GPU time and the candidates' module loads per product)."""
    code = """
        import torch, fastcomp
        from fastcomp._C import _testing as T
        from tests.runtime.test_cublaslt import WORKSPACE_BYTES, cublaslt_matmul, desc_of, new_output, tuning_case
        a, b, bias = tuning_case(torch, 23, n=536)
        with fastcomp.config.patch(matmul_tuning=True):
            plan = T.MatmulPlan(0, WORKSPACE_BYTES, **desc_of(a, b, new_output(torch, a, b, a.dtype), epilogue="bias"))
            print(plan.tuning)
            d = cublaslt_matmul(a, b, bias=bias, plan=plan)
            torch.cuda.synchronize()
            print(plan.tuning)
            print(float((d - (a @ b + bias)).abs().max()))
    """
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {"FASTCOMP_CACHE_DIR": str(tmp_path), "PYTHONPATH": os.pathsep.join([PACKAGE_ROOT, root])}
    first = run_python(code, **env).splitlines()
    assert first[0] == "not tuned yet" and first[1].startswith("tuned: "), first
    second = run_python(code, **env).splitlines()
    assert second[0] == second[1] == first[1] + " (in an earlier process, from the kernel cache)", second
    assert float(second[2]) < 1e-2
    assert len(list((tmp_path / "kernels").glob("*.bin"))) == 1


@pytest.mark.gpu
def test_a_product_of_a_few_us_is_tuned_once_in_a_cuda_graph(tmp_path):
    """A product of a few µs, which launches on the stream would time by the host's launch cost, is timed from
    CUDA-graph replays of its candidates; the decision is kept like any pick, so neither another plan of it (even
    one built before the decision) nor a new process times it again (each timing waits for the GPU)."""
    code = """
        import torch, fastcomp
        from fastcomp._C import _testing as T
        from tests.runtime.test_cublaslt import WORKSPACE_BYTES, cublaslt_matmul, desc_of, new_output, tuning_case
        a, b, bias = tuning_case(torch, 24, m=32, n=256, k=256)  # a few us
        with fastcomp.config.patch(matmul_tuning=True):
            # Both plans are built before either runs, as an executable builds its plans.
            out = new_output(torch, a, b, a.dtype)
            plans = [T.MatmulPlan(0, WORKSPACE_BYTES, **desc_of(a, b, out, epilogue="bias")) for _ in range(2)]
            for plan in plans:
                d = cublaslt_matmul(a, b, bias=bias, plan=plan)
                torch.cuda.synchronize()
                print(plan.tuning)
            print(float((d - (a @ b + bias)).abs().max()))
    """
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {"FASTCOMP_CACHE_DIR": str(tmp_path), "PYTHONPATH": os.pathsep.join([PACKAGE_ROOT, root])}
    first = run_python(code, **env).splitlines()
    # Timed in a CUDA graph either way: picked there, or (over 12 µs in the graph) left to the heuristic.
    assert first[0].startswith("tuned in a CUDA graph: ") or (
        first[0].startswith("not tuned: ") and " us in a CUDA graph" in first[0]), first
    assert first[1] == first[0] + " (earlier in this process)"
    second = run_python(code, **env).splitlines()
    assert second[0] == first[0] + " (in an earlier process, from the kernel cache)", second
    assert second[1] == first[0] + " (earlier in this process)", second
    assert float(second[2]) < 1e-4


@pytest.mark.gpu
def test_tuning_can_be_turned_off(torch_cuda):
    import fastcomp

    torch = torch_cuda
    a, b, bias = tuning_case(torch, 22, n=528)
    with fastcomp.config.patch(matmul_tuning=False):
        plan = T.MatmulPlan(0, WORKSPACE_BYTES, **desc_of(a, b, new_output(torch, a, b, a.dtype), epilogue="bias"))
        d = cublaslt_matmul(a, b, bias=bias, plan=plan)
        torch.cuda.synchronize()
        assert plan.tuning == "not tuned yet"
        check(d, a @ b + bias, reference(a, b, bias=bias), "float32")


@pytest.mark.gpu
def test_tuning_off_ignores_decisions_taken_before(torch_cuda):
    """With tuning off a plan runs the heuristic's favourite even when this process (or the disk) already holds a
    tuning decision for its product: the algorithm then never depends on timing."""
    import fastcomp

    torch = torch_cuda
    a, b, bias = tuning_case(torch, 24, n=544)
    with fastcomp.config.patch(matmul_tuning=True):
        tuned = T.MatmulPlan(0, WORKSPACE_BYTES, **desc_of(a, b, new_output(torch, a, b, a.dtype), epilogue="bias"))
        cublaslt_matmul(a, b, bias=bias, plan=tuned)
        torch.cuda.synchronize()
        assert tuned.tuning != "not tuned yet", tuned.tuning
    with fastcomp.config.patch(matmul_tuning=False):
        plan = T.MatmulPlan(0, WORKSPACE_BYTES, **desc_of(a, b, new_output(torch, a, b, a.dtype), epilogue="bias"))
        d = cublaslt_matmul(a, b, bias=bias, plan=plan)
        torch.cuda.synchronize()
        assert plan.tuning == "not tuned yet", plan.tuning
        check(d, a @ b + bias, reference(a, b, bias=bias), "float32")


@pytest.mark.gpu
def test_no_tuning_while_a_cuda_graph_is_captured(torch_cuda):
    """Tuning waits for the GPU, which a capture forbids: a plan first run under capture keeps the heuristic's
    favourite, and the captured graph replays it correctly."""
    import fastcomp

    torch = torch_cuda
    a, b, bias = tuning_case(torch, 23, n=536)
    d = new_output(torch, a, b, a.dtype)
    workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
    with fastcomp.config.patch(matmul_tuning=True):
        plan = T.MatmulPlan(0, WORKSPACE_BYTES, **desc_of(a, b, d, epilogue="bias"))
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
            plan.run(a.data_ptr(), b.data_ptr(), 0, d.data_ptr(), bias.data_ptr(), workspace.data_ptr(),
                     stream.cuda_stream)
        assert plan.tuning == "not tuned yet"
        a.copy_(randn(torch, *a.shape, dtype=torch.float32))
        graph.replay()
        torch.cuda.synchronize()
        check(d, a @ b + bias, reference(a, b, bias=bias), "float32")
