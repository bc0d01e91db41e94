"""Small-matmul kernels (Kernel::Kind::SmallMatmul): their launch shape and loads, the kernels they refuse, NVRTC
compiling them for compute_75 and compute_90 (no GPU needed), and on a GPU (`gpu` marker) their results against
torch's F.linear on fresh random inputs."""
import pytest

from fastcomp._C import _testing as T

import codegen_specs as S

# (M, N, K): W5's two products, one row, odd sizes read an element at a time, an odd column count split two a
# warp, a K that is not a multiple of 32 lanes' loads.
SHAPES = [(32, 1024, 512), (32, 512, 1024), (1, 1, 1), (3, 300, 37), (17, 37, 1000), (5, 1001, 40), (8, 64, 200)]


def shape_id(shape):
    return "x".join(map(str, shape))


def test_kernel_text_lays_out_a_w_bias_and_d_over_m_n_k():
    assert T.kernel_text(S.small_matmul(2, 3, 4)) == (
        "kernel small_matmul small_matmul shape=[2,3,4]\n"
        "  in0 f32 strides=[4,0,1]\n"
        "  in1 f32 strides=[0,4,1]\n"
        "  in2 f32 strides=[0,1,0]\n"
        "  out0 f32 strides=[3,1,0]\n")


@pytest.mark.parametrize("shape, grid, rows, warps", [
    ((32, 1024, 512), 32 * 4, 8, 8),   # W5's fc1: 32 column blocks of 8 rows, 128 blocks for 132 SMs
    ((32, 512, 1024), 16 * 8, 4, 16),  # W5's fc2: 16 column blocks, so 4 rows a block and 16 warps
    ((4, 8192, 64), 256 * 1, 4, 8),    # enough column blocks: every row in one
    ((3, 100, 64), 4 * 3, 1, 16),      # never more blocks than rows times column blocks
])
def test_launch_shape_gives_about_every_sm_a_block(shape, grid, rows, warps):
    code, got_grid, block, shared = T.emit_kernel(S.small_matmul(*shape), 132)
    assert (got_grid, block, shared) == (grid, warps * 32, 0)  # static shared memory for the warps' partial sums
    assert f"a block per 32 columns and {rows} row(s), {warps} warps splitting K" in code.splitlines()[0]
    assert f"constexpr int R = {rows}," in code and f"__shared__ float partial[{warps}][R][32];" in code


@pytest.mark.parametrize("dtype, k, a_row, vec", [
    ("f32", 512, None, 8), ("f16", 512, None, 16), ("bf16", 1000, None, 8),
    ("f32", 37, None, 1),    # K odd: one element at a time
    ("f32", 512, 514, 2),    # rows of x 514 apart: 8-byte loads keep every row aligned
    ("f16", 1004, None, 4),  # K a multiple of 4 halves, not 8
])
def test_loads_are_the_widest_every_row_stays_aligned_for(dtype, k, a_row, vec):
    spec = S.small_matmul(4, 8, k, dtype, a_row=a_row)
    code = T.emit_kernel(spec)[0]
    assert f"V = {vec};" in code
    assert sorted(o for o, _, _ in T.vector_operands(spec)) == ([0, 1] if vec > 1 else [])
    if vec == 1:  # no vector operands: the program declares no kVectorAccess, the kernel reads element by element
        assert "small_matmul_tile<false>(" in code


def test_halves_compute_in_f32_and_round_once_with_the_bias():
    code = T.emit_kernel(S.small_matmul(4, 8, 64, "bf16"))[0]
    assert "acc[r] = fmaf(fc_bf16_to_float(av[v]), fc_bf16_to_float(wv[v]), acc[r]);" in code
    assert "= fc_float_to_bf16(sum + fc_bf16_to_float(in2[0 + col * 1]));" in code


@pytest.mark.parametrize("mutate, message", [
    (lambda d: [o.update(dtype="f64") for o in d["inputs"] + d["outputs"]], "f32, f16 or bf16"),
    (lambda d: d["inputs"][1].update(dtype="f16"), "share one dtype"),
    (lambda d: d["inputs"].pop(0), "not laid out"),
    (lambda d: d.update(shape=[33, 8, 4]), "1 to 32 rows"),
    (lambda d: d.update(shape=[2, 8]), r"static \[M, N, K\]"),
    (lambda d: d["inputs"][0].update(strides=[4, 0, 2]), "operand A is not laid out"),
    (lambda d: d["outputs"].append(dict(d["outputs"][0])), "takes A, W and maybe a bias"),
    (lambda d: d["exprs"].append(dict(op="constant", dtype="f32", value=1.0)), "no expressions"),
])
def test_malformed_small_matmul_kernels_are_rejected(mutate, message):
    spec = S.small_matmul(2, 8, 4)
    mutate(spec)
    with pytest.raises(ValueError, match=message):
        T.emit_kernel(spec)


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_compiles(nvrtc, shape, dtype):
    spec = S.small_matmul(*shape, dtype=dtype, bias=shape[0] % 2 == 0)
    for sm in (75, 90):
        for alignment in ("vector", "any"):
            ok, log, _ = nvrtc.compile(T.emit_program([spec], sm=sm, alignment=alignment), arch=f"compute_{sm}")
            assert ok, log
            assert "warning" not in log, log


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("bias, a_offset", [(True, 0), (False, 1)])  # x one element off: the scalar program
def test_gpu_matches_torch(shape, dtype, bias, a_offset):
    import codegen_gpu as G
    import torch

    m, n, k = shape
    spec = S.small_matmul(m, n, k, dtype, bias=bias, a_row=k + a_offset, a_offset=a_offset)
    inputs = G.random_inputs(spec, seed=m * 131 + k)
    (out,) = G.view_outputs(spec, G.launch(spec, inputs))  # [M, N, K] with stride 0 along K
    out = out[..., 0]
    x, w = (torch.as_strided(t, (rows, k), (i["strides"][dim], 1), i["offset"])
            for t, i, rows, dim in zip(inputs, spec["inputs"], (m, n), (0, 1)))
    want = torch.nn.functional.linear(x.double(), w.double(), inputs[2][:n].double() if bias else None)
    tol = {"f32": 1e-5, "f16": 1e-2, "bf16": 2e-2}[dtype]
    torch.testing.assert_close(out.double(), want, rtol=tol, atol=tol * float(want.abs().max()))
