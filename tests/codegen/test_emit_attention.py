"""Attention kernels (Kernel::Kind::Attention): the launch shape and shared memory they ask for, the kernels
they refuse, NVRTC compiling them for compute_90 (no GPU needed), and on a GPU (`gpu` marker) their results
against torch's softmax(q k^T) v on fresh random inputs."""
import pytest

from fastcomp._C import _testing as T

import codegen_specs as S

# (B, H, T, D): W7's heads, W10's, one query, odd sizes, a width that is not a multiple of 32, ViT's 197 tokens,
# the longest T of D=64 that fits in shared memory.
SHAPES = [(16, 8, 64, 64), (4, 4, 32, 64), (1, 1, 1, 8), (3, 2, 33, 48), (2, 3, 5, 8), (1, 2, 89, 64),
          (2, 1, 40, 128), (2, 3, 197, 64),
          (1, 1, 424, 64)]


def shape_id(shape):
    return "x".join(map(str, shape))


def test_kernel_text_shows_the_scale():
    assert T.kernel_text(S.mha_attention(b=2, h=2, t=4, d=8)) == (
        "kernel mha_attention attention shape=[2,2,4,8] scale=0.3535533905932738\n"
        "  in0 f32 strides=[48,8,96,1]\n"
        "  in1 f32 strides=[48,8,96,1] offset=16\n"
        "  in2 f32 strides=[48,8,96,1] offset=32\n"
        "  out0 f32 strides=[16,8,32,1]\n")


def test_kernel_text_shows_a_causal_mask_and_the_rounding():
    spec = S.mha_attention(b=2, h=2, t=4, d=8, causal=True, rounding="probabilities")
    assert T.kernel_text(spec).startswith(
        "kernel mha_attention attention shape=[2,2,4,8] scale=0.3535533905932738 causal rounding=probabilities\n")


def test_a_causal_row_sees_the_keys_up_to_its_own():
    code = T.emit_kernel(S.mha_attention(b=2, h=2, t=40, d=8, causal=True))[0]
    assert code.startswith("// mha_attention: causal attention")
    assert "const int keys = min(t0 + warp + 8 * i + 1, S);" in code and "if (c * 32 + lane < keys) m = fc_max(m, s[i][c]);" in code
    # p is 0 past a row's keys, so the product with the values stops at the warp's last row's keys
    assert "const int j_end = min(t0 + warp + 8 * (RW - 1) + 1, S);" in code
    plain = T.emit_kernel(S.mha_attention(b=2, h=2, t=40, d=8))[0]
    assert "const int keys = S;" in plain and "const int j_end = S;" in plain


def test_sdpa_rounding_keeps_the_scores_in_f32():
    code = T.emit_kernel(S.mha_attention(2, 3, 33, 48, dtype="bf16", rounding="probabilities"))[0]
    assert "fc_round_bf16(s[i][c]);" not in code and "qp[r][d] = t0 + r < T ? fc_bf16_to_float(q[" in code
    assert "s[i][c] = fc_round_bf16(s[i][c] / l);" in code


@pytest.mark.parametrize("b, h, t, grid, rows_per_warp", [
    (16, 8, 64, 128 * 2, 4),  # W7: 128 heads, each split over 2 blocks of 32 rows for a block per SM of 132
    (4, 4, 32, 16 * 4, 1),    # W10: 16 heads of 32 rows, 8 rows a block (one per warp)
    (256, 8, 64, 2048 * 2, 4),  # many heads: 4 rows a warp at most (NVRTC's time), so 2 blocks of 32 rows a head
    (256, 8, 48, 2048 * 2, 3),  # many heads of 48 rows: 2 blocks of 24 a head
    (256, 8, 160, 2048 * 5, 4),  # 160 keys and values take 81 KB of an H100's 227: 32 rows a block still fit
    (256, 8, 400, 2048 * 25, 2),  # 400 keys and values take 202 KB: 16 rows a block at most
])
def test_launch_shape_gives_each_sm_a_block_then_each_warp_the_most_rows(b, h, t, grid, rows_per_warp):
    code, got_grid, block, shared = T.emit_kernel(S.mha_attention(b=b, h=h, t=t, d=64), 132)
    # dynamic shared memory: the rows' queries (then probabilities), the keys padded to 65 columns, the values
    assert (got_grid, block, shared) == (grid, 256, (8 * rows_per_warp * max(t, 64) + t * 65 + t * 64) * 4)
    assert code.startswith(f"// mha_attention: attention over [B, H, T, D] = [{b}, {h}, {t}, 64]")
    assert f", {rows_per_warp} a warp;" in code.splitlines()[0]
    # padded: 32 lanes reading 32 keys hit 32 banks
    assert "float (*const ks)[D + 1] = reinterpret_cast<float (*)[D + 1]>(fc_shared + R * W);" in code


def test_heads_with_contiguous_rows_are_read_four_elements_at_a_time():
    spec = S.mha_attention(b=2, h=2, t=4, d=8)
    assert "mha_attention_head<kVectorAccess>" in T.emit_kernel(spec)[0]
    assert [(o, nbytes) for o, _, nbytes in T.vector_operands(spec)] == [(0, 16), (1, 16), (2, 16)]
    odd = S.mha_attention(b=2, h=2, t=4, d=6)  # rows of 6 elements: 4-element loads would straddle them
    assert "mha_attention_head<false>" in T.emit_kernel(odd)[0] and not T.vector_operands(odd)


def test_shared_memory_bound_is_the_dynamic_limit():
    # 8 query rows (one a warp) of max(S, D) entries, keys and values: 424 keys of 64 columns fit in the 227 KB a
    # block may opt into on an H100, and ViT's 197 keys (106 KB) no longer need the 96 KB of older GPUs
    assert T.attention_shared_bytes(424, 64) <= 227 * 1024 < T.attention_shared_bytes(425, 64)
    assert 96 * 1024 < T.attention_shared_bytes(197, 64) < 227 * 1024


@pytest.mark.parametrize("mutate, message", [
    (lambda d: [o.update(dtype="f64") for o in d["inputs"] + d["outputs"]], "f32, f16 or bf16"),
    (lambda d: d["inputs"][1].update(dtype="f16"), "share one dtype"),
    (lambda d: d["inputs"].pop(), "takes q, k, v"),
    (lambda d: d.update(shape=[2, 2, 4]), r"\[B, H, T, D\]"),
    (lambda d: d.update(shape=[1, 1, 425, 64]), "shared memory"),
    (lambda d: d.update(kv_heads=3), "key heads divide"),
    (lambda d: d["inputs"].append(dict(dtype="f16", strides=[0, 0, 4, 1], offset=0)), "mask has it too, or is bool"),
    (lambda d: d["exprs"].append(dict(op="constant", dtype="f32", value=1.0)), "no expressions"),
    (lambda d: d["outputs"][0].update(strides=[1, 1, 1]), "4 strides"),
    (lambda d: d.update(scale=float("inf")), "not finite"),
])
def test_malformed_attention_kernels_are_rejected(mutate, message):
    spec = S.mha_attention(b=2, h=2, t=4, d=8)
    mutate(spec)
    with pytest.raises(ValueError, match=message):
        T.emit_kernel(spec)


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("batch_major, causal, rounding", [(False, False, "every_step"), (True, False, "every_step"),
                                                           (False, True, "probabilities")])
def test_compiles(nvrtc, shape, batch_major, causal, rounding):
    b, h, t, d = shape
    spec = S.mha_attention(b, h, t, d, batch_major, causal=causal, rounding=rounding)
    ok, log, _ = nvrtc.compile(T.emit_program([spec]))
    assert ok, log
    assert "warning" not in log, log


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_half_kernels_round_each_step_as_torch_does_and_compile(nvrtc, dtype):
    spec = S.mha_attention(2, 3, 33, 48, dtype=dtype)
    code = T.emit_kernel(spec)[0]
    assert f"qp[r][d] = t0 + r < T ? fc_round_{dtype}(fc_{dtype}_to_float(q[" in code  # the scaled q
    assert f"s[i][c] = fc_round_{dtype}(s[i][c]);" in code                             # the scores
    assert f"s[i][c] = fc_round_{dtype}(s[i][c] / l);" in code                         # softmax's output
    assert f"= fc_float_to_{dtype}(acc[i][c]);" in code                                 # the output
    for sm in (75, 90):  # the prelude declares the half types itself from sm_80 on, includes the headers before
        ok, log, _ = nvrtc.compile(T.emit_program([spec], sm=sm), arch=f"compute_{sm}")
        assert ok, log
        assert "warning" not in log, log


def test_a_mask_is_added_to_the_scores_or_leaves_keys_out():
    additive = T.emit_kernel(S.sdpa_masked_attention(mask="float", dtype="bf16"))[0]
    assert additive.startswith("// sdpa_masked: attention over [B, H, T, D] = [2, 4, 5, 8], 7 keys, 2 key heads: "
                               "softmax(q k^T + mask) v")
    assert "const int64_t head = blockIdx.x / 1, b = head / 4, h = head % 4, hk = h / 2;" in additive
    assert "s[i][c] += fc_bf16_to_float(mask[mask_row + int64_t(c * 32 + lane) * 1]);" in additive
    # a row with every key left out has 0 probabilities, not 0 / 0
    assert "if (m == __int_as_float(0xff800000)) m = 0.0f;" in additive
    assert "s[i][c] = fc_round_bf16(l > 0.0f ? s[i][c] / l : 0.0f);" in additive
    boolean = T.emit_kernel(S.sdpa_masked_attention(mask="bool", mask_dims=(3,)))[0]
    assert "const bool* __restrict__ mask = in3 + (0 + b * 0 + h * 0);" in boolean
    assert "const int64_t mask_row = int64_t(min(t0 + warp + 8 * i, T - 1)) * 0;" in boolean
    assert "if (c * 32 + lane < keys && !mask[mask_row + int64_t(c * 32 + lane) * 1]) s[i][c] = __int_as_float(0xff800000);" in boolean
    plain = T.emit_kernel(S.sdpa_masked_attention(mask=None))[0]
    assert "mask_row" not in plain and "in3" not in plain and "s[i][c] = s[i][c] / l;" in plain


def test_math_path_rounding_keeps_the_probabilities_in_f32():
    """A masked f16 or bf16 head rounds as torch's math path, which computes it in f32: only the output."""
    code = T.emit_kernel(S.sdpa_masked_attention(mask="float", dtype="bf16", rounding="output"))[0]
    assert "s[i][c] = l > 0.0f ? s[i][c] / l : 0.0f;" in code and "fc_round_bf16(" not in code
    assert "= fc_float_to_bf16(acc[i][c]);" in code
    assert T.kernel_text(S.sdpa_masked_attention(mask="float", dtype="bf16", rounding="output")).startswith(
        "kernel sdpa_masked attention shape=[2,4,5,8] scale=0.25 keys=7 kv_heads=2 rounding=output\n")


@pytest.mark.parametrize("case", [dict(mask="float", dtype="bf16"), dict(mask="bool", dtype="f16", t=1, s=40),
                                  dict(mask="float", dtype="f16", rounding="output"),
                                  dict(mask=None, kv_heads=1, causal=True, t=9, s=4), dict(mask="bool", d=6)],
                         ids=str)
def test_masked_and_grouped_kernels_compile(nvrtc, case):
    ok, log, _ = nvrtc.compile(T.emit_program([S.sdpa_masked_attention(**case)]))
    assert ok, log
    assert "warning" not in log, log


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("batch_major, causal, rounding", [(False, False, "every_step"), (True, False, "every_step"),
                                                           (False, True, "probabilities")])
def test_gpu_matches_torch(shape, batch_major, causal, rounding, dtype):
    import codegen_gpu as G
    import torch

    b, h, t, d = shape
    spec = S.mha_attention(b, h, t, d, batch_major, dtype, causal=causal, rounding=rounding)
    inputs = G.random_inputs(spec, seed=t * 131 + d)
    (out,) = G.view_outputs(spec, G.launch(spec, inputs))
    q, k, v = (torch.as_strided(x, spec["shape"], i["strides"], i["offset"]) for x, i in zip(inputs, spec["inputs"]))
    if rounding == "every_step":  # torch's steps, each rounded to the dtype as F.multi_head_attention_forward's are
        want = torch.softmax((q * spec["scale"]) @ k.transpose(-1, -2), -1) @ v
    else:
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=spec["scale"])
    tol = {"f32": 1e-5, "f16": 1e-2, "bf16": 2e-2}[dtype]
    torch.testing.assert_close(out.float(), want.float(), rtol=tol, atol=tol * float(want.abs().max()))
