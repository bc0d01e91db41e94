"""emit_cuda / emit_program: the text of emitted kernels (names, signatures, vector paths, index widths, launch
shapes), NVRTC compiling every op, dtype and kernel shape to PTX for compute_90 (no GPU needed), and on a GPU
(`gpu` marker) the kernels' results against eager torch."""
import math
import re

import pytest

from fastcomp._C import _testing as T
from fastcomp.testing import elf_sections

import codegen_specs as S


def compile_ptx(nvrtc, specs):
    """PTX of one program holding `specs` (for aligned pointers); fails with NVRTC's log on an error or any warning.
    The program for pointers of any alignment must compile too."""
    for alignment in ("any", "vector"):
        ok, log, ptx = nvrtc.compile(T.emit_program(specs, alignment=alignment))
        assert ok, f"NVRTC failed ({alignment} alignment):\n{log}"
        assert "warning" not in log, f"NVRTC warned ({alignment} alignment):\n{log}"
    return ptx


def emit(spec, sm_count=132):
    code, grid, block, shared = T.emit_kernel(spec, sm_count)
    return code, grid, block, shared


# ---------------------------------------------------------------------------------------------------------
# Text: the IR's stable form and the shape of emitted code


def test_kernel_text_is_stable():
    s = S.Spec("k", [4, 3])
    x = s.load(s.input("f16", [1, 4], offset=2))
    s.pointwise_output(s.op("mul", "f32", s.op("cast", "f32", x), s.const(0.5)))
    assert T.kernel_text(s.spec) == (
        "kernel k pointwise shape=[4,3]\n"
        "  in0 f16 strides=[1,4] offset=2\n"
        "  out0 f32 strides=[3,1]\n"
        "  e0 = load f16 in0\n"
        "  e1 = cast f32 e0\n"
        "  e2 = constant f32 0.5\n"
        "  e3 = mul f32 e1 e2\n"
        "  store e3 -> out0\n")


def test_golden_scalar_pointwise_kernel():
    s = S.Spec("add_t", [4, 3])
    s.pointwise_output(s.op("add", "f32", s.load(s.input("f32")), s.load(s.input("f32", [6, 1]))))
    code, grid, block, shared = emit(s.spec)
    assert (grid, block, shared) == (1, 32, 0)
    assert code == (
        "// add_t: pointwise over [4, 3] (iteration space [4, 3]), one element per thread and step, 32-bit indices\n"
        'extern "C" __global__ void __launch_bounds__(32) add_t(const float* __restrict__ in0, '
        "const float* __restrict__ in1, float* __restrict__ out0) {\n"
        "  using idx_t = int32_t;\n"
        "  for (idx_t i = blockIdx.x * blockDim.x + threadIdx.x; i < 12; i += gridDim.x * blockDim.x) {\n"
        "    const idx_t c0 = i / 3;\n"
        "    const idx_t c1 = i % 3;\n"
        "    const float e0 = in0[i];\n"
        "    const float e1 = in1[c0 * 6 + c1];\n"
        "    const float e2 = e0 + e1;\n"
        "    out0[i] = e2;\n"
        "  }\n"
        "}\n")


def test_signature_names_every_operand_in_order():
    code, *_ = emit(S.bias_add())
    assert ('extern "C" __global__ void __launch_bounds__(256) bias_add(const float* __restrict__ in0, '
            'const float* __restrict__ in1, float* __restrict__ out0)') in code


def test_broadcast_bias_collapses_and_vectorizes():
    code, grid, block, shared = emit(S.bias_add())
    assert ("pointwise over [16384, 512] (iteration space [32, 512, 512]), groups of 4 elements, 2 per thread and "
            "step") in code
    assert "const idx_t c1 = i % 512;" in code               # the bias's offset: one modulo, no division chain
    assert "fc_load<4, kVector>(in0 + i, a0[w]);" in code    # the contiguous input uses the linear index
    assert "fc_load<4, kVector>(in1 + c1, a1[w]);" in code
    assert "fc_store<4, kVector>(out0 + i, r0);" in code
    assert code.index("a1[w]);") < code.index("r0[u] =")      # both groups' loads come before any compute
    # one instantiation of the loop; the launcher checks the three pointers and picks the program
    assert "  bias_add_groups<kVectorAccess>(in0, in1, out0);" in code and "<false>" not in code
    assert T.vector_operands(S.bias_add()) == [(0, "0", 16), (1, "0", 16), (2, "0", 16)]
    assert (grid, block, shared) == (8 * 1024 * 1024 // 4 // 512, 256, 0)


def test_vector_width_is_16_bytes_of_the_widest_dtype():
    assert "groups of 8 elements" in emit(S.unary("exp", "f16", shape=(4096,)))[0]
    assert "fc_load<8, kVector>" in emit(S.unary("exp", "bf16", shape=(4096,)))[0]
    assert "groups of 2 elements" in emit(S.unary("exp", "f64", shape=(4096,)))[0]
    assert "groups of 4 elements" in emit(S.cast("f16", "f32", shape=(4096,)))[0]  # f32 output decides
    assert "groups of 16 elements" in emit(S.cast("u8", "bool", shape=(4096,)))[0]


def test_odd_sizes_get_a_scalar_tail():
    code, *_ = emit(S.unary("exp", "f32", shape=(1025,)))
    assert "v0 < 256" in code
    assert "for (idx_t i = 1024 + blockIdx.x * blockDim.x + threadIdx.x; i < 1025;" in code


def test_strided_operand_takes_the_scalar_path_with_coordinates():
    s = S.Spec("add_s", [64, 48])
    a = s.load(s.input("f32"))
    b = s.load(s.input("f32", [100, 2]))  # x[:, :96:2] of a [64, 100] tensor: no unit stride to tile along
    s.pointwise_output(s.op("add", "f32", a, b))
    code, *_ = emit(s.spec)
    assert "one element per thread and step" in code and "_groups" not in code and "__shared__" not in code
    assert "const idx_t c0 = i / 48;" in code and "const idx_t c1 = i % 48;" in code
    assert "in1[c0 * 100 + c1 * 2]" in code and "in0[i]" in code


def test_transposed_operand_is_read_in_tiles_through_shared_memory():
    s = S.Spec("add_t", [64, 48])
    a = s.load(s.input("f32"))
    b = s.load(s.input("f32", [1, 64]))  # x.t() of a [48, 64] tensor
    s.pointwise_output(s.op("add", "f32", a, b))
    code, grid, block, _ = emit(s.spec)
    assert "tiles of 32 x 32 over dimensions 0 and 1 through shared memory" in code
    assert (grid, block) == (2 * 2, 256)
    assert "__shared__ float tile1[32][32 + 1];" in code and "tile0" not in code
    # x.t() read along its own rows (A fastest), the contiguous input and the output along the output's (B).
    assert "const int a = e % 32, b = e / 32;" in code and "tile1[b][a] = in1[in1_base + (a0 + a) * 1 + (b0 + b) * 64];" in code
    assert "const int b = e % 32, a = e / 32;" in code and "= in0[in0_base + (a0 + a) * 48 + (b0 + b) * 1];" in code
    assert "out0[out0_base + (a0 + a) * 48 + (b0 + b)] =" in code


def test_tiles_grow_along_a_dimension_where_the_other_is_short():
    weight = S.TRANSPOSING[0]  # [64, 32, 3, 3] NCHW -> NHWC: [64, 9, 32] walked, read along the 9 taps
    code, grid, _, _ = emit(weight)
    assert "pointwise over [64, 9, 32]" in code and "tiles of 9 x 32 over dimensions 1 and 2" in code
    assert grid == 64
    image = S.TRANSPOSING[2]  # [2, 3, 17, 19] -> NHWC: [2, 323, 3], read along the 323 pixels
    code, grid, _, _ = emit(image)
    assert "pointwise over [2, 323, 3]" in code and "tiles of 320 x 3 over dimensions 1 and 2" in code
    assert grid == 2 * 2


def test_compiles_transposing_kernels(nvrtc):
    specs = S.TRANSPOSING + [S.layout_copy([3, 1 << 16, 1 << 15], [1 << 31, 1, 1 << 16], [1 << 31, 1 << 15, 1],
                                           name="big_t")]
    assert "64-bit indices" in emit(specs[-1])[0]
    ptx = compile_ptx(nvrtc, specs)
    assert ".shared" in ptx and ".local" not in ptx


def test_size_one_dims_are_skipped():
    s = S.Spec("ones", [1, 7, 1, 5])
    s.pointwise_output(s.op("neg", "f32", s.load(s.input("f32", [0, 12, 0, 2]))))
    code, *_ = emit(s.spec)
    assert "pointwise over [7, 5]" in code and "in0[c0 * 12 + c1 * 2]" in code


def test_index_width_is_32_bit_unless_something_can_pass_int32():
    assert "using idx_t = int32_t;" in emit(S.bias_add())[0]
    big = S.unary("neg", "f32", shape=(3, 1 << 30))                    # 3 Gi elements
    assert "using idx_t = int64_t;" in emit(big)[0]
    s = S.Spec("far", [1024])                                          # few elements, one far offset
    s.pointwise_output(s.op("neg", "f32", s.load(s.input("f32", [1], offset=(1 << 31)))))
    code, *_ = emit(s.spec)
    assert "using idx_t = int64_t;" in code and "2147483648LL" in code
    s = S.Spec("wide_stride", [2, 8])
    s.pointwise_output(s.op("neg", "f32", s.load(s.input("f32", [1 << 31, 1]))))
    assert "64-bit indices" in emit(s.spec)[0]
    assert "32-bit indices" in emit(S.w3_softmax())[0]
    assert "64-bit indices" in emit(S.w3_softmax(rows=1 << 21, n=2048))[0]  # 2^32 elements


def test_launch_shape_follows_the_work_and_the_sm_count():
    assert emit(S.unary("neg", "f32", shape=(8,)))[1:3] == (1, 32)
    _, grid, block, _ = emit(S.w2_tiny_ops())
    assert (grid, block) == ((1 << 24) // 4 // 512, 256)  # 2 float4 groups per thread: 8192 blocks < 8 waves
    _, grid, block, _ = emit(S.w2_tiny_ops(), sm_count=16)
    assert (grid, block) == (16 * 8 * 8, 256)               # capped at 8 waves of 8 resident blocks per SM
    _, grid, block, _ = emit(S.unary("neg", "f32", shape=(4096 * 4,)))
    assert (grid, block) == (8, 256)  # 4096 float4 groups: never more blocks than needed


def test_zero_dim_and_empty_kernels():
    s = S.Spec("scalar", [])
    s.pointwise_output(s.op("add", "f32", s.load(s.input("f32")), s.const(1)))
    code, grid, block, _ = emit(s.spec)
    assert (grid, block) == (1, 32) and "i < 1;" in code
    empty = S.unary("neg", "f32", shape=(0, 5))
    code, grid, _, _ = emit(empty)
    assert grid == 1 and "for (idx_t i" not in code


def test_constants_keep_every_float_and_the_special_values():
    s = S.Spec("consts", [16])
    x = s.load(s.input("f32"))
    for v in (math.nan, math.inf, -math.inf, 0.1, 3.0, 1e-30):
        x = s.op("add", "f32", x, s.const(v))
    s.pointwise_output(x)
    code, *_ = emit(s.spec)
    for text in ("__int_as_float(0x7fc00000)", "__int_as_float(0x7f800000)", "__int_as_float(0xff800000)",
                 "0.100000001f", "3.0f", "1e-30f"):
        assert text in code


def test_pow_by_small_constants_is_written_as_torch_does():
    s = S.Spec("pows", [16])
    x = s.load(s.input("f32"))
    outs = [s.op("pow", "f32", x, s.const(c)) for c in (2, 0.5, -1, 2.5)]
    for o in outs:
        s.pointwise_output(o)
    code, *_ = emit(s.spec)
    assert "e0 * e0" in code and "sqrtf(e0)" in code and "1.0f / e0" in code and "powf(e0, e7)" in code
    assert "= 2.0f;" not in code  # an exponent written into the pow is not emitted on its own


def test_half_values_round_where_produced_and_compute_in_float():
    code, *_ = emit(S.binary("add", "f16", shape=(64,)))
    assert "const float e0 = fc_f16_to_float(a0[w][u]);" in code
    assert "const float e2 = fc_round_f16(e0 + e1);" in code
    assert "r0[u] = fc_float_to_f16(e2);" in code


# Doubles just above the halfway point between two f16 (bf16) values that float rounds onto that point: rounded
# once they go up, rounded through float (as torch does) they tie to even and stay at 1.0.
DOUBLE_ROUNDING = {"f16": 1 + 2.0 ** -11 + 2.0 ** -40, "bf16": 1 + 2.0 ** -8 + 2.0 ** -40}


@pytest.mark.parametrize("dst", ["f16", "bf16"])
def test_double_to_half_rounds_through_float_like_torch(dst):
    import torch

    # torch's Half and BFloat16 are built from a float only, so eager rounds a double twice.
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16}[dst]
    assert torch.tensor([DOUBLE_ROUNDING[dst]], dtype=torch.float64).to(tdt).item() == 1.0
    code, *_ = emit(S.cast("f64", dst, shape=(64,)))
    assert f"const float e1 = fc_round_{dst}((float)(e0));" in code


def test_program_declares_half_types_only_when_used():
    f32 = T.emit_program([S.bias_add()])
    assert "fc_f16" not in f32 and "fc_bf16" not in f32 and "#include" not in f32 and "fc_warp_reduce" in f32
    f16 = T.emit_program([S.bias_add(), S.unary("exp", "f16")])
    assert f16.count("struct alignas(2) fc_f16 ") == 1 and "fc_bf16" not in f16 and "#include" not in f16
    both = T.emit_program([S.layer_norm(), S.w8_rmsnorm()])
    assert both.count("struct alignas(2) fc_f16 ") == 1 and both.count("struct alignas(2) fc_bf16 ") == 1
    assert "#include" not in both and both.index("fc_round_f16") < both.index("layer_norm_rows")


def test_one_program_has_one_kind_of_access_and_the_launcher_picks_the_program(nvrtc):
    specs = [S.bias_add(), S.w8_rmsnorm()]
    vector, scalar = T.emit_program(specs), T.emit_program(specs, alignment="any")
    assert "constexpr bool kVectorAccess = true;" in vector and "constexpr bool kVectorAccess = false;" in scalar
    assert vector.replace("true;", "false;") != scalar  # only the constant and its comment differ
    assert vector.count("_groups<kVectorAccess>(") == 1 and vector.count("_rows<kVectorAccess>(") == 1
    with pytest.raises(ValueError, match="alignment is 'vector' or 'any', not 'aligned'"):
        T.emit_program(specs, alignment="aligned")
    # the scalar program really has no vector access: its PTX loads one element at a time
    ok, log, ptx = nvrtc.compile(scalar)
    assert ok, log
    assert "ld.global.v4" not in ptx and "ld.global.nc.v4" not in ptx
    assert "ld.global.nc.v4" in compile_ptx(nvrtc, specs) or "ld.global.v4" in compile_ptx(nvrtc, specs)


def half_specs():
    casts = [("f32", "f16"), ("f32", "bf16"), ("f16", "f32"), ("bf16", "f32"), ("f16", "bf16"), ("bf16", "f16"),
             ("f64", "bf16"), ("bf16", "f64"), ("i64", "f16"), ("bf16", "i32")]
    return [S.cast(a, b, shape=(64,)) for a, b in casts] + [S.layer_norm(rows=64), S.w8_rmsnorm(rows=64)]


@pytest.mark.parametrize("sm", [75, 80, 89, 90])
def test_half_programs_declare_their_types_from_sm80_and_include_the_headers_before(nvrtc, sm):
    # From sm_80 every f16/bf16 conversion is one instruction, so the prelude declares the types itself; before,
    # they come from cuda_fp16.h / cuda_bf16.h. Either program compiles to a cubin with fastcomp's own options
    # (which add -I only for the one with #include).
    program = T.emit_program(half_specs(), sm=sm)
    own = sm >= 80
    assert program.count("struct alignas(2) fc_f16 ") == own and program.count("struct alignas(2) fc_bf16 ") == own
    assert ("#include <cuda_fp16.h>" in program) != own and ("#include <cuda_bf16.h>" in program) != own
    cubin = T.nvrtc_compile(program, "half.cu", sm // 10, sm % 10, "cubin")
    assert {f".text.{spec['name']}" for spec in half_specs()} == set(elf_sections(cubin, ".text."))


@pytest.mark.parametrize("sm", [80, 90])
def test_own_half_conversions_round_to_nearest_even_like_torch(nvrtc, sm):
    import torch

    # torch rounds float to f16/bf16 to the nearest value, ties to even: 1 + 2^-8 and 1 + 3 * 2^-8 are bf16 ties.
    assert torch.tensor([1 + 2 ** -8, 1 + 3 * 2 ** -8]).to(torch.bfloat16).tolist() == [1.0, 1 + 2 ** -6]
    assert torch.tensor([1 + 2 ** -11, 1 + 3 * 2 ** -11]).to(torch.float16).tolist() == [1.0, 1 + 2 ** -9]
    # So does PTX's cvt.rn, and the prelude must round with it and nothing else: no conversion of its own.
    program = T.emit_program([S.cast("f32", "f16", shape=(64,)), S.cast("f32", "bf16", shape=(64,)),
                              S.cast("f16", "f32", shape=(64,)), S.cast("bf16", "f32", shape=(64,))], sm=sm)
    ok, log, ptx = nvrtc.compile(program, f"compute_{sm}")
    assert ok, log
    half_cvts = {c for c in re.findall(r"\bcvt(?:\.\w+)+", ptx) if "f16" in c}
    widen_bf16 = {"cvt.f32.bf16"} if sm >= 90 else set()  # exact either way; a shift before sm_90
    assert half_cvts == {"cvt.rn.f16.f32", "cvt.rn.bf16.f32", "cvt.f32.f16"} | widen_bf16


@pytest.mark.parametrize("sm, dtypes", [(80, ["f16"]), (90, ["f16", "bf16"])])
def test_own_half_types_give_the_machine_code_of_the_cuda_headers(nvrtc, sm, dtypes):
    # The same kernels with our declarations and with the headers' (the sm_75 program) compile to the same
    # instructions. On sm_80 our bf16 widens with a shift, not as the headers do, so only f16 is compared there.
    specs = [S.layer_norm(rows=64)] + (["bf16"] == dtypes[1:]) * [S.w8_rmsnorm(rows=64)]
    for dt in dtypes:
        specs += [S.cast("f32", dt, shape=(64,)), S.cast(dt, "f32", shape=(64,)), S.unary("exp", dt),
                  S.binary("add", dt, shape=(3, 1025))]
    own, headers = T.emit_program(specs, sm=sm), T.emit_program(specs, sm=75)
    assert "#include" not in own and "#include <cuda_fp16.h>" in headers
    code = [elf_sections(T.nvrtc_compile(p, "half.cu", sm // 10, sm % 10, "cubin"), ".text.") for p in (own, headers)]
    assert len(code[0]) == len(specs) and code[0] == code[1]


def cubin_code(nvrtc, source, arch, extra=()):
    ok, log, cubin = nvrtc.compile(source, arch, ["-default-device", *extra])
    assert ok, f"NVRTC failed for {arch}:\n{log}"
    code = elf_sections(cubin, ".text.")
    assert code
    return code


def test_split_compile_code_does_not_depend_on_the_thread_count(nvrtc):
    import fastcomp

    # Splitting may change a kernel's code (here the two with __shared__ slots come out otherwise than from a
    # serial compile, see nvrtc.cpp), but the thread count must not: it is the usable cores, so machines differ.
    program = T.emit_program([S.w3_softmax(rows=64), S.unary("tanh", "f32"), S.w8_rmsnorm(rows=64),
                              S.layer_norm(rows=64), S.bias_add()])
    code = {}
    for threads in (1, 2, 3, 8):
        with fastcomp.config.patch(nvrtc_threads=threads):
            options = T.nvrtc_options(program, 9, 0, "cubin")
            assert (f"--split-compile={threads}" in options) == (threads > 1)
            code[threads] = elf_sections(T.nvrtc_compile(program, "split.cu", 9, 0, "cubin"), ".text.")
    assert len(code[2]) == 5 and code[2] == code[3] == code[8]
    assert code[1][".text.bias_add"] == code[2][".text.bias_add"]


def test_minimal_option_leaves_the_code_unchanged(nvrtc):
    # nvrtc_options adds --minimal from NVRTC 12.4 on because it only drops declarations our programs never use.
    if nvrtc.version < (12, 4):
        pytest.skip("NVRTC before 12.4 has no --minimal")
    program = T.emit_program([S.w3_softmax(rows=64), S.unary("tanh", "f32"), S.w8_rmsnorm(rows=64)])
    assert cubin_code(nvrtc, program, "sm_90", ["--minimal"]) == cubin_code(nvrtc, program, "sm_90")


def test_row_reduce_picks_warp_block_or_streaming_by_row_length():
    code, grid, block, _ = emit(S.layer_norm())
    assert "one warp of 32 threads per row, 2 x 8 elements per thread in registers" in code
    assert (grid, block) == (132 * 8, 256) and "__shared__" not in code
    code, grid, block, _ = emit(S.w3_softmax())
    assert "one block of 256 threads per row, 4 x 4 elements per thread in registers, 2 passes" in code
    assert (grid, block) == (4096, 256)  # a block per row: long rows run best with many blocks
    _, grid, block, _ = emit(S.w3_softmax(rows=1 << 20, n=1024))
    assert grid == 132 * (2048 // block) * 16  # ... up to 16 waves of resident blocks
    code, grid, block, _ = emit(S.w3_softmax(rows=8, n=1000))
    assert "one block of 64 threads per row, 4 x 4 elements per thread in registers" in code
    assert "if (j < 1000)" in code and grid == 8
    code, _, block, _ = emit(S.stable_softmax(rows=3, n=65537))
    assert "1024 threads per row, 65 x 1 elements per thread streamed, 3 passes" in code
    assert "for (idx_t j = t * 1; j < 65537; j += 1024)" in code and block == 1024


def test_row_reduce_passes_follow_reduction_dependencies():
    code, *_ = emit(S.stable_softmax())
    max_at, sum_at = code.index("a1 = fc_warp_reduce(a1, fc_max_op())"), code.index("a4 = fc_warp_reduce(a4")
    assert max_at < code.index("const float e1 = a1;") < sum_at  # max finishes before exp(x - max) is summed
    assert code.count("__syncthreads();") == 2                    # one barrier per reduction pass
    assert "__shared__ float s1[2][8];" in code                    # slots double-buffered by row parity
    assert "if (t == 0) out1[b2] = e1;" in code and "if (t == 0) out2[b3] = e4;" in code  # once per row


def test_row_reduce_keeps_reused_inputs_and_row_invariant_weights_in_registers():
    code, *_ = emit(S.w8_rmsnorm())
    rows_at = code.index("for (idx_t row")
    assert "fc_bf16 x0[2][8];" in code[rows_at:]          # x: once per row, read by 2 passes
    assert code.count("fc_load<8, kVector>(in0") == 1
    assert "fc_bf16 y1[8];" in code                       # the weight: in the one pass that reads it
    code, *_ = emit(S.layer_norm())                       # warp mode: each warp sees many rows
    rows_at = code.index("for (idx_t row")
    assert "fc_f16 x1[2][8];" in code[:rows_at]           # the weight: once per thread, before the row loop


def test_row_reduce_reads_strided_rows_with_scalar_loads():
    s = S.Spec("col_sum", [64, 300], "row_reduce")  # sum over dim 0 of a [300, 64] tensor
    s.per_row_output(s.op("reduce_sum", "f32", s.load(s.input("f32", [1, 64]))))
    code, *_ = emit(s.spec)
    assert "x0[s][u] = in0[b0 + (j + u) * 64];" in code or "y0[u] = in0[b0 + (j + u) * 64];" in code
    assert "col_sum_rows<false>" in code and T.vector_operands(s.spec) == []


# ---------------------------------------------------------------------------------------------------------
# Column reductions: the kept innermost dimension across threads, the reduced ones along each thread's loop


def test_column_reduce_text_names_its_reduced_dimensions():
    assert T.kernel_text(S.column_sum((2, 3, 5, 7), (0, 2))).startswith(
        "kernel column_sum column_reduce shape=[2,3,5,7] reduced=[0,2]\n")


def test_column_reduce_reads_columns_coalesced_and_vectorized():
    code, grid, block, shared = emit(S.column_sum((300, 4096)))
    assert "[] x [4096] columns of [300]" in code and "4 columns per thread" in code
    assert "fc_load<4, kVector>(in0 + b0 + q0 * 4096, y0);" in code  # 16 bytes of consecutive columns per thread
    assert [(o, b) for o, _, b in T.vector_operands(S.column_sum((300, 4096)))] == [(0, 16), (1, 16)]
    code, *_ = emit(S.column_sum((300, 4096), dtype="bf16"))
    assert "8 columns per thread" in code and "float a2[8];" in code  # bf16 sums accumulate in float


def test_column_reduce_splits_the_reduced_dimension_only_when_columns_are_few():
    # 2^21 columns of f32 (2^19 threads of 4) are over 2 waves of an H100's threads: one R-slice, 256 threads.
    code, grid, block, _ = emit(S.column_sum((64, 1 << 21)))
    assert "256 x 1 threads per block" in code and "__shared__" not in code and "__syncthreads" not in code
    assert (grid, block) == (2048, 256)
    code, *_ = emit(S.column_sum((64, 1 << 20)))  # half as many: two R-slices
    assert "128 x 2 threads per block" in code
    # 64 columns: R is split across the block, a warp still reads whole 128-byte lines (8 threads x 16 bytes).
    code, grid, block, _ = emit(S.column_sum((4096, 64)))
    assert "8 x 128 threads per block (columns x R-slices)" in code and (grid, block) == (2, 1024)
    assert "__shared__ float s2[128][4][8];" in code
    assert "for (idx_t r = ty; active && r < 4096; r += 128)" in code
    assert code.count("__syncthreads();") == 2  # the slots are written, then one barrier per tree step
    # Short columns keep at least 8 elements per slice.
    code, *_ = emit(S.column_sum((20, 64)))
    assert "x 2 threads per block" in code


def test_column_reduce_passes_follow_reduction_dependencies():
    code, *_ = emit(S.column_var())
    assert "2 passes" in code and code.count("for (idx_t r = ty;") == 2
    assert code.index("v4[u] = e4;") < code.index("a7[u] = fc_sum_op()(a7[u], e6);")  # the mean, then deviations
    # The mean is read back by every thread for the second pass; the last pass's result only by ty 0, which stores.
    assert "a2[u] = s2[0][u][tx];" in code and "a7[u] = s7[0][u][tx];" not in code
    assert "if (active && ty == 0) {" in code


def test_column_reduce_indexes_reduced_dimensions_apart_and_strided_columns():
    code, *_ = emit(S.column_sum((2, 3, 5, 7), (0, 2)))
    assert "[3] x [7] columns of [2, 5]" in code
    assert "const idx_t q0 = r / 5;" in code and "in0[b0 + q0 * 105 + q1 * 7]" in code
    spec = S.column_sum((64, 40), strides=[1, 64], name="transposed")
    code, *_ = emit(spec)
    assert "1 column per thread" in code and T.vector_operands(spec) == []


def test_column_reduce_stores_prologue_values_per_element_and_reads_epilogue_inputs_once():
    code, *_ = emit(S.column_prologue_epilogue())
    assert "fc_store<4, kVector>(out0 + b3 + q0 * 96, z0);" in code  # y = x * w, in the reduction's own pass
    assert code.count("fc_load<4, kVector>(in1 + b1, w1);") == 1 and "1 pass," in code


def test_column_reduce_of_a_varying_value_per_column_is_rejected():
    s = S.Spec("bad_column", [4, 8], "column_reduce", [0])
    s.per_column_output(s.load(s.input("f32")))
    with pytest.raises(ValueError, match="varies along the reduced dimensions"):
        T.emit_kernel(s.spec)


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.update(reduced=[1]), "keeps its last dimension"),
    (lambda d: d.update(reduced=[]), "at least one"),
    (lambda d: d.update(kind="row_reduce"), "only column-reduce kernels"),
    (lambda d: d["exprs"].append(dict(op="row_index", dtype="i64")), "no meaning in a column-reduce"),
])
def test_malformed_column_kernels_are_rejected(mutate, message):
    spec = S.column_sum((4, 8))
    mutate(spec)
    with pytest.raises(ValueError, match=message):
        T.emit_kernel(spec)


# ---------------------------------------------------------------------------------------------------------
# Ranges: inputs readable in part of the space and InRange (how lowering writes torch.cat)


def test_kernel_text_shows_ranges():
    s = S.Spec("k", [4, 6])
    x = s.load(s.input("f32", offset=-3, valid=(1, 3, 6)))
    s.pointwise_output(s.op("where", "f32", s.in_range(1, 0, 3), s.const(0), x))
    text = T.kernel_text(s.spec)
    assert "  in0 f32 strides=[6,1] offset=-3 valid d1=[3,6)\n" in text
    assert "  e1 = in_range bool d1=[0,3)\n" in text


def test_cat_pieces_read_in_their_range_with_whole_groups():
    code, *_ = emit(S.w9_rope(rows=32, d=1024))
    assert "groups of 8 elements" in code and "pointwise over [32, 1024]" in code
    # each half of x is read only by the groups inside its range, from where it starts; the two halves (disjoint
    # pieces of one cat) share one register array and one load
    assert ("if ((c1 < 512) || (c1 >= 512)) fc_load<8, kVector>((c1 < 512) ? in3 + i + 512 : in4 + i - 512, "
            "a3[w]);") in code
    assert "a4[" not in code
    assert "const float e6 = (c1 < 512) ? fc_bf16_to_float(a3[w][u]) : 0.0f;" in code
    assert "const float e8 = (c1 >= 512) ? fc_bf16_to_float(a3[w][u]) : 0.0f;" in code
    assert "const bool e10 = (c1 < 512);" in code
    # the alignment test looks at each piece's first readable element, not at its (negative) offset
    ops = dict((o, (first, nbytes)) for o, first, nbytes in T.vector_operands(S.w9_rope(rows=32, d=1024)))
    assert ops[3] == ("512", 16) and ops[4] == ("0", 16)


def test_a_range_dimension_is_not_merged_with_its_neighbours():
    def spec(valid):
        s = S.Spec("kept", [4, 8, 16])
        s.pointwise_output(s.op("neg", "f32", s.load(s.input("f32", valid=valid))))
        return s.spec

    assert "pointwise over [512]" in emit(spec(None))[0]
    code, *_ = emit(spec((1, 0, 4)))
    assert "pointwise over [4, 8, 16]" in code and "const idx_t c1 = (i / 16) % 8;" in code
    assert "if (c1 < 4) fc_load<4, kVector>(in0 + i, a0[w]);" in code
    assert "pointwise over [4, 128]" in emit(spec((0, 0, 2)))[0]  # the outermost has one neighbour
    assert "pointwise over [512]" in emit(spec((1, 0, 8)))[0]     # a range over a whole dimension is none


@pytest.mark.parametrize("shape, valid", [
    ((3, 10), (1, 0, 5)),     # a row is not a whole number of groups
    ((4, 12), (1, 0, 6)),     # a boundary inside a group
    ((8, 7), (0, 0, 3)),      # an outer range, rows of 7
])
def test_ranges_that_split_groups_take_the_scalar_path(shape, valid):
    s = S.Spec("guarded", shape)
    s.pointwise_output(s.op("neg", "f32", s.load(s.input("f32", valid=valid))))
    code, *_ = emit(s.spec)
    assert "one element per thread and step" in code and "_groups" not in code
    assert " ? in0[" in code


def test_scalar_path_guards_every_piece_of_an_outer_cat():
    code, *_ = emit(S.cat_rows((3, 5), 7))
    assert "const idx_t c0 = i / 7;" in code
    assert "const float e0 = (c0 < 3) ? in0[i] : 0.0f;" in code
    assert "const float e1 = (c0 >= 3) ? in1[i - 21] : 0.0f;" in code
    assert "const bool e2 = (c0 < 3);" in code


def test_a_one_dimensional_cat_vectorizes_with_a_scalar_tail():
    s = S.Spec("cat_1d", [1030])
    a = s.load(s.input("f32", valid=(0, 0, 512)))
    b = s.load(s.input("f32", offset=-512, valid=(0, 512, 1030)))
    s.pointwise_output(s.op("where", "f32", s.in_range(0, 0, 512), a, b))
    code, *_ = emit(s.spec)
    assert "groups of 4 elements" in code
    assert "if ((c0 < 512) || (c0 >= 512)) fc_load<4, kVector>((c0 < 512) ? in0 + i : in1 + i - 512, a0[w]);" in code
    assert "for (idx_t i = 1028 + blockIdx.x" in code


def test_only_disjoint_pieces_of_one_dimension_share_registers():
    s = S.Spec("pieces", [4, 16])
    a = s.load(s.input("f32", valid=(1, 0, 8)))
    b = s.load(s.input("f32", offset=-4, valid=(1, 4, 16)))    # overlaps a: its own array
    c = s.load(s.input("f32", offset=-8, valid=(1, 8, 16)))    # disjoint from a: a's array
    d = s.load(s.input("f32", offset=-32, valid=(0, 2, 4)))    # another dimension: its own array
    total = s.op("add", "f32", s.op("add", "f32", a, b), s.op("add", "f32", c, d))
    s.pointwise_output(total)
    code, *_ = emit(s.spec)
    assert "fc_load<4, kVector>((c1 < 8) ? in0 + i : in2 + i - 8, a0[w]);" in code
    assert "if (c1 >= 4) fc_load<4, kVector>(in1 + i - 4, a1[w]);" in code
    assert "if (c0 >= 2) fc_load<4, kVector>(in3 + i - 32, a3[w]);" in code
    assert "a2[" not in code


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["inputs"][0].update(valid=[2, 0, 1]), "missing dimension"),
    (lambda d: d["inputs"][0].update(valid=[1, 4, 9]), "not inside its dimension"),
    (lambda d: d["inputs"][0].update(valid=[1, 5, 4]), "not inside its dimension"),
    (lambda d: d["inputs"][0].update(valid=[1, 2, 4], offset=-3), "negative storage offset"),
    (lambda d: d["outputs"][0].update(valid=[1, 0, 4]), "validity range"),
    (lambda d: d["exprs"].append(dict(op="in_range", dtype="i64", range=[1, 0, 4])), "yields bool"),
    (lambda d: d["exprs"].append(dict(op="in_range", dtype="bool", range=[-1, 0, 4])), "needs a dimension"),
    (lambda d: d.update(kind="row_reduce") or d["inputs"][0].update(valid=[1, 0, 4]), "row-reduce"),
])
def test_malformed_ranges_are_rejected(mutate, message):
    spec = S.binary("add", "f32", shape=(4, 8))
    mutate(spec)
    with pytest.raises(ValueError, match=message):
        T.emit_kernel(spec)


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["exprs"].append(dict(op="add", dtype="f32", args=[0, 9])), "later or missing"),
    (lambda d: d["exprs"].append(dict(op="exp", dtype="i32", args=[0])), "floating"),
    (lambda d: d["exprs"].append(dict(op="lt", dtype="f32", args=[0, 0])), "yields bool"),
    (lambda d: d["exprs"].append(dict(op="reduce_sum", dtype="f32", args=[0])), "row-reduce"),
    (lambda d: d["stores"].append((0, 0)), "stored twice"),
    (lambda d: d["inputs"][0].update(strides=[1]), "strides for 2 dimensions"),
    (lambda d: d["outputs"][0].update(strides=[0, 1]), "repeats elements"),
    (lambda d: d.update(name="9lives"), "C identifier"),
    (lambda d: d.update(name="fc_max"), "prelude"),
])
def test_malformed_kernels_are_rejected(mutate, message):
    spec = S.binary("add", "f32", shape=(4, 8))
    mutate(spec)
    with pytest.raises(ValueError, match=message):
        T.emit_kernel(spec)


def test_per_row_store_of_a_varying_value_is_rejected():
    s = S.Spec("bad_row", [4, 8], "row_reduce")
    s.per_row_output(s.load(s.input("f32")))
    with pytest.raises(ValueError, match="varies along the row"):
        T.emit_kernel(s.spec)


# ---------------------------------------------------------------------------------------------------------
# Gather: indirect loads (how lowering writes embedding, gather and index_select)


def test_kernel_text_shows_gathers():
    text = T.kernel_text(S.embedding(v=1000, d=64))
    assert "  in1 f32 strides=[0,0,1]\n" in text
    assert "  e1 = gather f32 in1 size=1000 stride=64 e0\n" in text


def test_gather_checks_its_index_before_reading():
    code, *_ = emit(S.embedding(n=3, t=5, v=1000, d=65, index="i32"))  # odd rows: the scalar loop
    assert "one element per thread and step" in code and "_groups" not in code
    assert "    const int32_t e0 = in0[c0 * 5 + c1];\n" in code
    check = "    if (e0 < 0 || e0 >= 1000) __trap();\n"
    read = "    const float e1 = in1[c2 + (idx_t)e0 * 65];\n"
    assert check in code and read in code and code.index(check) < code.index(read)
    assert "32-bit indices" in code


def test_gathered_rows_are_read_a_group_at_a_time_after_the_groups_index_is_checked():
    code, *_ = emit(S.embedding(n=3, t=5, v=1000, d=64, index="i32"))
    assert "groups of 4 elements" in code
    check = "        if (a0[w] < 0 || a0[w] >= 1000) __trap();\n"
    read = "        fc_load<4, kVector>(in1 + c2 + (idx_t)a0[w] * 64, g1[w]);\n"
    assert check in code and read in code and code.index("a0[w] = in0[c0 * 5 + c1];") < code.index(check) < code.index(read)
    assert "const float e1 = g1[w][u];" in code and "e0 = a0[w]" not in code  # the index is not recomputed
    ops = [o for o, _, _ in T.vector_operands(S.embedding(n=3, t=5, v=1000, d=64, index="i32"))]
    assert 1 in ops and 0 not in ops  # the table's rows are vector loads; the shared index is not


def test_group_width_comes_from_the_operands_that_vary_along_a_group():
    # An i64 index shared by a group of f32 elements leaves the groups at 16 bytes of f32 ...
    assert "groups of 4 elements" in emit(S.embedding(d=64, index="i64"))[0]
    # ... and where rows of 6 split such groups, the groups are 16 bytes of the index's width.
    assert "groups of 2 elements" in emit(S.embedding(d=6, index="i64"))[0]
    assert "one element per thread and step" in emit(S.embedding(d=6, index="i32"))[0]


@pytest.mark.parametrize("spec", [
    S.embedding(n=3, t=5, v=1000, d=64, weight_strides=[66, 1], index="i32"),  # rows starting mid-vector
    S.embedding(n=3, t=5, v=50, d=64, weight_strides=[1, 50]),    # a transposed table
], ids=["row_stride_66", "transposed"])
def test_gathers_whose_groups_cannot_be_vectors_take_the_scalar_loop(spec):
    code, *_ = emit(spec)
    assert "one element per thread and step" in code and "__trap();" in code


def test_a_gather_whose_index_varies_along_the_group_takes_the_scalar_loop():
    s = S.Spec("gather_last", [8, 64])  # x.gather(1, idx): each element its own index
    idx = s.load(s.input("i64"))
    s.pointwise_output(s.gather(s.input("f32", [64, 0]), idx, 64, 1))
    code, *_ = emit(s.spec)
    assert "one element per thread and step" in code and "if (e0 < 0 || e0 >= 64) __trap();" in code


def test_gather_of_a_transposed_table():
    code, *_ = emit(S.embedding(v=50, d=129, weight_strides=[1, 50]))
    assert "if (e0 < 0 || e0 >= 50) __trap();" in code
    assert "in1[c2 * 50 + (idx_t)e0 * 1]" in code


def test_gather_reach_decides_the_index_width():
    # 40000 rows of 65536: the output is small, but the table's last row lies past int32.
    code, *_ = emit(S.embedding(n=1, t=2, v=40000, d=65536))
    assert "64-bit indices" in code
    code, *_ = emit(S.embedding(n=1, t=2, v=30000, d=65536))
    assert "32-bit indices" in code


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["exprs"][1].update(args=[1]), "later or missing"),
    (lambda d: d["exprs"][1].update(operand=9), "missing input"),
    (lambda d: d["inputs"][0].update(dtype="f32") or d["exprs"][0].update(dtype="f32"), "i32 or i64 index"),
    (lambda d: d["inputs"][0].update(dtype="i16") or d["exprs"][0].update(dtype="i16"), "i32 or i64 index"),
    (lambda d: d["inputs"][1].update(valid=[2, 0, 4]), "input with a range"),
    (lambda d: d["exprs"][1].update(gather=[-1, 64]), "negative size or stride"),
    (lambda d: d.update(kind="column_reduce", reduced=[True, False, False]), "pointwise or row-reduce kernel"),
])
def test_malformed_gathers_are_rejected(mutate, message):
    spec = S.embedding(n=2, t=3, v=10, d=8)
    mutate(spec)
    with pytest.raises(ValueError, match=message):
        T.emit_kernel(spec)


@pytest.mark.parametrize("d", [64, 129, 768])
def test_row_reduce_checks_a_gathered_rows_index_once_per_row_before_reading_it(d):
    code, *_ = emit(S.embedding_layer_norm(d=d))
    check = "    if (e0 < 0 || e0 >= 50) __trap();\n"
    assert code.count("__trap();") == 1 and check in code, code
    assert code.index("const int64_t e0 = in0[b0];") < code.index(check) < code.index("in1 + b1")
    assert f"    const idx_t b1 = (idx_t)e0 * {d};\n" in code, code
    ops = [o for o, _, _ in T.vector_operands(S.embedding_layer_norm(d=d))]
    assert (1 in ops) == (d % 4 == 0) and 0 not in ops  # the table's rows are vector loads when they can be


def test_row_reduce_rejects_a_gather_whose_index_varies_along_the_row():
    s = S.Spec("gather_last_sum", [8, 64], "row_reduce")
    x = s.gather(s.input("f32", [64, 0]), s.load(s.input("i64")), 64, 1)
    s.per_row_output(s.op("reduce_sum", "f32", x))
    with pytest.raises(ValueError, match="not one load per row"):
        T.emit_kernel(s.spec)


@pytest.mark.parametrize("dtype", S.FLOAT_DTYPES)
@pytest.mark.parametrize("index", ["i32", "i64"])
def test_compiles_row_reduce_gathers(nvrtc, dtype, index):
    specs = [S.embedding_layer_norm(d=d, dtype=dtype, index=index, name=f"ln{d}") for d in (64, 129, 768)]
    assert "trap;" in compile_ptx(nvrtc, specs)


@pytest.mark.parametrize("dtype", S.FLOAT_DTYPES)
@pytest.mark.parametrize("index", ["i32", "i64"])
def test_compiles_gathers(nvrtc, dtype, index):
    ptx = compile_ptx(nvrtc, [S.embedding(dtype=dtype, index=index), S.embedding(n=2, t=1025, v=50, d=129, dtype=dtype,
                                                                                 index=index, name="odd_rows"),
                              S.embedding(v=40000, d=65536, dtype=dtype, index=index, name="wide")])
    assert "trap;" in ptx


# ---------------------------------------------------------------------------------------------------------
# NVRTC: every op, dtype and shape compiles for compute_90


@pytest.mark.parametrize("dtype", S.FLOAT_DTYPES)
def test_compiles_float_unary_ops(nvrtc, dtype):
    compile_ptx(nvrtc, [S.unary(op, dtype) for op in S.UNARY_FLOAT])


@pytest.mark.parametrize("dtype", S.FLOAT_DTYPES + S.INT_DTYPES)
def test_compiles_binary_ops(nvrtc, dtype):
    compile_ptx(nvrtc, [S.binary(op, dtype) for op in S.BINARY_ARITH + S.COMPARISONS])


def test_compiles_integer_and_bool_ops(nvrtc):
    specs = [S.unary(op, dt) for op in ("neg", "abs", "not") for dt in S.INT_DTYPES] + [S.unary("not", "bool")]
    specs += [S.binary(op, dt) for op in ("and", "or") for dt in ["bool"] + S.INT_DTYPES]
    specs += [S.binary(op, "bool") for op in ("add", "mul", "max", "min", "eq")]
    compile_ptx(nvrtc, specs)


def test_compiles_every_cast(nvrtc):
    compile_ptx(nvrtc, [S.cast(a, b) for a in S.ALL_DTYPES for b in S.ALL_DTYPES if a != b])


def test_compiles_where_row_index_and_constants(nvrtc):
    s = S.Spec("mask_fill", [33, 65])
    x = s.load(s.input("f32"))
    idx = s.row_index()
    even = s.op("eq", "bool", s.op("and", "i64", idx, s.const(1, "i64")), s.const(0, "i64"))
    s.pointwise_output(s.op("where", "f32", even, x, s.const(-math.inf)))
    s.pointwise_output(s.op("cast", "f16", s.op("mul", "f32", x, s.const(math.nan))))
    compile_ptx(nvrtc, [s.spec])


@pytest.mark.parametrize("shape", [(), (1,), (3,), (1025,), (65537,), (1, 1, 1), (7, 1, 3)])
def test_compiles_odd_sizes(nvrtc, shape):
    compile_ptx(nvrtc, [S.binary("mul", "f32", shape=shape, name="mul_f32"),
                        S.unary("gelu_erf", "bf16", shape=shape, name="gelu_bf16")])


def test_compiles_broadcast_transposed_and_offset_operands(nvrtc):
    s = S.Spec("mixed_layouts", [32, 64, 48])
    a = s.load(s.input("f16"))
    b = s.load(s.input("f32", [0, 0, 1], offset=3))           # [48] at an offset
    c = s.load(s.input("f32", [64 * 48, 1, 64]))              # last two dims transposed
    d = s.load(s.input("f32", [0, 1, 0]))                     # [64, 1] column
    y = s.op("add", "f32", s.op("cast", "f32", a), s.op("mul", "f32", b, c))
    s.pointwise_output(s.op("sub", "f32", y, d))
    specs = [s.spec, S.bias_add(), S.bias_add(dtype="f16", name="bias_add_f16")]
    ptx = compile_ptx(nvrtc, specs)
    assert "ld.global.nc.v4.f32" in ptx and "st.global.v4.f32" in ptx  # 16-byte accesses in the f32 bias add


def test_compiles_seed_workloads(nvrtc):
    ptx = compile_ptx(nvrtc, [S.w2_tiny_ops(), S.w3_softmax(), S.stable_softmax(), S.layer_norm(), S.w8_rmsnorm()])
    for name in ("w2_tiny_ops", "w3_softmax", "stable_softmax", "layer_norm", "w8_rmsnorm"):
        assert f".entry {name}(" in ptx
    assert ".local" not in ptx  # register arrays stayed in registers


def test_compiles_cat_pieces(nvrtc):
    specs = [S.w9_rope(rows=32, d=1024), S.w9_rope(rows=3, d=10, dtype="f32", name="rope_odd"),
             S.w9_rope(rows=4, d=64, dtype="f16", name="rope_f16"), S.cat_rows(),
             S.cat_rows((8, 16, 8), 64, "f16", "cat_rows_f16"), S.cat_rows((1, 2, 3), 5, "i64", "cat_rows_i64")]
    ptx = compile_ptx(nvrtc, specs)
    assert ".local" not in ptx  # the registers of unread groups stayed registers


def test_compiles_64_bit_indexing(nvrtc):
    compile_ptx(nvrtc, [S.unary("neg", "f32", shape=(3, 1 << 30), name="big_neg"),
                        S.bias_add(shape=(1 << 20, 4096), name="big_bias"),
                        S.w3_softmax(rows=1 << 21, n=2048, name="big_softmax"),
                        S.layer_norm(rows=1 << 23, n=512, name="big_ln")])


@pytest.mark.parametrize("n", [1, 3, 32, 100, 512, 1000, 4096, 16384, 65537])
def test_compiles_row_lengths(nvrtc, n):
    compile_ptx(nvrtc, [S.w3_softmax(rows=5, n=n), S.stable_softmax(rows=5, n=n),
                        S.layer_norm(rows=5, n=n, in_dtype="f32", out_dtype="f16"),
                        S.w8_rmsnorm(rows=5, n=n)])


def test_compiles_reductions_of_every_kind_and_dtype(nvrtc):
    specs = []
    for dt in ("f16", "bf16", "f32", "f64", "u8", "i8", "i16", "i32", "i64"):
        for op in ("reduce_sum", "reduce_max", "reduce_min"):
            s = S.Spec(f"{op}_{dt}", [6, 700], "row_reduce")
            x = s.load(s.input(dt))
            r = s.op(op, dt, x)
            s.per_row_output(r)
            s.pointwise_output(s.op("sub", dt, x, r))
            specs.append(s.spec)
    s = S.Spec("argmax_like", [9, 200], "row_reduce")  # a reduction of the row index, and of a per-row input
    x = s.load(s.input("f32"))
    first_max = s.op("where", "i64", s.op("eq", "bool", x, s.op("reduce_max", "f32", x)), s.row_index(),
                     s.const(1 << 40, "i64"))
    s.per_row_output(s.op("reduce_min", "i64", first_max))
    s.per_row_output(s.op("reduce_sum", "f32", s.load(s.input("f32", [1, 0]))))
    specs.append(s.spec)
    compile_ptx(nvrtc, specs)


def column_specs():
    """Column reductions of every kind and dtype, odd and big shapes, strided columns, fusion."""
    specs = []
    for dt in ("f16", "bf16", "f32", "f64", "u8", "i8", "i16", "i32", "i64"):
        for op in ("reduce_sum", "reduce_max", "reduce_min"):
            s = S.Spec(f"col_{op}_{dt}", [700, 6], "column_reduce", [0])
            x = s.load(s.input(dt))
            r = s.op(op, dt, x)
            s.per_column_output(r)
            s.per_column_output(s.op("add", dt, r, s.load(s.input(dt, [0, 1]))))
            specs.append(s.spec)
    specs += [S.column_sum((3, 1025), name="col_odd"), S.column_sum((65537, 3), name="col_long"),
              S.column_sum((1, 1), name="col_one"), S.column_sum((3, 65537), dtype="f16", name="col_wide"),
              S.column_sum((2, 3, 5, 7), (0, 2), name="col_apart"), S.column_sum((8, 9, 10, 64), (1, 2), "bf16",
                                                                                  name="col_middle"),
              S.column_sum((64, 40), strides=[1, 64], name="col_transposed"), S.column_var(),
              S.column_var((7, 3, 24), (0, 1), "bf16", correction=0, name="col_var_bf16"),
              S.column_prologue_epilogue(), S.column_sum((1 << 16, 1 << 15), name="col_big"),
              S.column_sum((3, 1 << 30), name="col_64_bit")]
    return specs


def test_compiles_column_reductions(nvrtc):
    compile_ptx(nvrtc, column_specs())


# ---------------------------------------------------------------------------------------------------------
# GPU: results against eager torch (run by scripts/gpu-test.sh on a GPU machine)

GPU_POINTWISE = (
    [S.unary(op, dt, shape=(1025,)) for op in S.UNARY_FLOAT for dt in S.FLOAT_DTYPES]
    + [S.binary(op, dt, shape=(3, 1025)) for op in S.BINARY_ARITH + S.COMPARISONS
       for dt in S.FLOAT_DTYPES + S.INT_DTYPES if not (op == "pow" and dt in S.INT_DTYPES)]
    + [S.unary(op, dt, shape=(999,)) for op in ("neg", "abs", "not") for dt in S.INT_DTYPES]
    + [S.binary(op, dt, shape=(999,)) for op in ("and", "or") for dt in ["bool"] + S.INT_DTYPES]
    + [S.cast(a, b, shape=(1027,)) for a in S.ALL_DTYPES for b in S.ALL_DTYPES if a != b]
    + [S.bias_add(), S.bias_add(shape=(7, 3, 1025), dtype="f16", name="bias_add_odd"), S.w2_tiny_ops(),
       S.binary("add", "f32", shape=(), name="add_0d"), S.binary("add", "f32", shape=(1,), name="add_1"),
       S.binary("add", "bf16", shape=(64, 48), b_strides=[1, 64], name="add_transposed")]
    + S.TRANSPOSING + [S.layout_copy([512, 512, 3, 3], S.contiguous([512, 512, 3, 3]),
                                     S.nhwc_strides([512, 512, 3, 3]), name="weight_512_to_nhwc"),
                       S.layout_copy([8, 3, 224, 224], S.contiguous([8, 3, 224, 224]),
                                     S.nhwc_strides([8, 3, 224, 224]), name="image_224_to_nhwc")]
    + [S.w9_rope(rows=32, d=1024), S.w9_rope(rows=3, d=10, dtype="f32", name="rope_odd"),
       S.cat_rows(), S.cat_rows((8, 16, 8), 64, "f16", "cat_rows_f16"), S.cat_rows((1, 2, 3), 5, "i64", "cat_rows_i64")]
)


@pytest.mark.gpu
@pytest.mark.parametrize("spec", GPU_POINTWISE, ids=lambda s: s["name"])
def test_gpu_pointwise_matches_torch(spec):
    import codegen_gpu as G

    # float -> unsigned casts of negative values are undefined in C++ and torch alike: keep those positive
    nonneg = (0,) if spec["name"].startswith("cast_") and spec["name"].endswith("_u8") else ()
    G.check(spec, G.random_inputs(spec, nonnegative=nonneg))


@pytest.mark.gpu
@pytest.mark.parametrize("dst", ["f16", "bf16"])
def test_gpu_double_to_half_rounds_like_torch(dst):
    import codegen_gpu as G
    import torch

    x = torch.tensor([DOUBLE_ROUNDING[dst], -DOUBLE_ROUNDING[dst], 1.0 + 2.0 ** -40, 3.0], device="cuda",
                     dtype=torch.float64).repeat(64)
    G.check(S.cast("f64", dst, shape=(256,)), [x])


@pytest.mark.gpu
def test_gpu_int_pow_matches_torch():
    import codegen_gpu as G
    import torch

    for dt in S.INT_DTYPES:
        spec = S.binary("pow", dt, shape=(1000,))
        base, _ = G.random_inputs(spec)
        exponent = torch.randint(0, 5, (1000,), device="cuda").to(G.TORCH_DTYPES[dt])
        G.check(spec, [base % 7, exponent])


@pytest.mark.gpu
def test_gpu_nan_and_inf_propagate_like_torch():
    import codegen_gpu as G
    import torch

    specials = torch.tensor([math.nan, math.inf, -math.inf, 1.0, -2.0, math.nan, 0.5, -math.inf], device="cuda")
    a = specials.repeat(128)
    b = specials.roll(3).repeat(128)
    for op in ("max", "min"):
        G.check(S.binary(op, "f32", shape=(1024,)), [a, b])
    G.check(S.unary("relu", "f32", shape=(1024,)), [a])
    s = S.Spec("row_max_nan", [128, 8], "row_reduce")
    x = s.load(s.input("f32"))
    s.per_row_output(s.op("reduce_max", "f32", x))
    s.per_row_output(s.op("reduce_min", "f32", x))
    rows = torch.randn(128, 8, device="cuda")
    rows[::3, 5] = math.nan
    rows[1::3, 2] = math.inf
    G.check(s.spec, [rows.flatten()])


@pytest.mark.gpu
@pytest.mark.parametrize("make", [
    lambda: S.w3_softmax(), lambda: S.stable_softmax(), lambda: S.stable_softmax(rows=33, n=1000),
    lambda: S.stable_softmax(rows=5, n=65537), lambda: S.w3_softmax(rows=100, n=3),
    lambda: S.layer_norm(), lambda: S.layer_norm(rows=65, n=4096, in_dtype="f32", out_dtype="f16"),
    lambda: S.layer_norm(rows=7, n=1000), lambda: S.w8_rmsnorm(), lambda: S.w8_rmsnorm(rows=9, n=65537),
], ids=["w3", "stable", "stable_1000", "stable_65537", "w3_3", "ln", "ln_f32_4096", "ln_1000", "w8", "w8_65537"])
def test_gpu_row_reduce_matches_torch_expressions(make):
    import codegen_gpu as G

    spec = make()
    G.check(spec, G.random_inputs(spec), tolerance=None)


@pytest.mark.gpu
@pytest.mark.parametrize("spec", [s for s in column_specs() if s["name"] not in ("col_big", "col_64_bit")],
                         ids=lambda s: s["name"])
def test_gpu_column_reduce_matches_torch_expressions(spec):
    import codegen_gpu as G

    G.check(spec, G.random_inputs(spec), tolerance=None)


@pytest.mark.gpu
def test_gpu_seed_workloads_match_torch_functions():
    """The fused kernels against the torch functions the workloads call (not the op-by-op reference)."""
    import codegen_gpu as G
    import torch
    import torch.nn.functional as F

    x = torch.randn(4096 * 4096, device="cuda")
    (out,) = G.view_outputs(S.w3_softmax(), G.launch(S.w3_softmax(), [x]))
    torch.testing.assert_close(out, torch.softmax(x.view(4096, 4096), -1), rtol=1e-5, atol=1e-8)

    ln = S.layer_norm()
    x, w, b = G.random_inputs(ln)
    (out,) = G.view_outputs(ln, G.launch(ln, [x, w, b]))
    want = F.layer_norm(x.view(16384, 512).float(), [512], w.float(), b.float()).half()
    torch.testing.assert_close(out, want, rtol=1e-3, atol=2e-3)

    rms = S.w8_rmsnorm()
    x, w = G.random_inputs(rms)
    (out,) = G.view_outputs(rms, G.launch(rms, [x, w]))
    xf = x.view(8192, 4096).float()
    want = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w).to(torch.bfloat16)
    torch.testing.assert_close(out, want, rtol=8e-3, atol=1e-2)


@pytest.mark.gpu
def test_gpu_unaligned_pointers_take_the_scalar_path():
    import codegen_gpu as G

    s = S.Spec("offset_add", [4096])
    s.pointwise_output(s.op("add", "f32", s.load(s.input("f32", offset=1)), s.load(s.input("f32"))))
    G.check(s.spec, G.random_inputs(s.spec))
    ln = S.layer_norm(rows=64, n=512, in_dtype="f32", out_dtype="f32", name="ln_offset")
    ln["inputs"][0]["offset"] = 3
    G.check(ln, G.random_inputs(ln))


@pytest.mark.gpu
def test_gpu_64_bit_indices_reach_past_2_to_the_31():
    import codegen_gpu as G
    import torch

    spec = S.unary("neg", "bf16", shape=((1 << 31) + 1029,), name="neg_huge")  # 4 GiB each way, odd tail
    assert "64-bit indices" in T.emit_kernel(spec)[0]
    x = torch.randn(spec["shape"][0], device="cuda", dtype=torch.bfloat16)
    (out,) = G.launch(spec, [x])
    assert torch.equal(out, -x)


def mixed_specs():
    """Kernels of every size: attention (the costliest to compile), row reductions, pointwise, and a twin."""
    return [S.bias_add(name="k0"), S.sdpa_masked_attention(name="k1"), S.layer_norm(name="k2", in_dtype="f32",
            out_dtype="f32"), S.unary("exp", "f32", name="k3"), S.w3_softmax(name="k4"),
            S.unary("tanh", "f32", name="k5"), S.mha_attention(name="k6"), S.bias_add(name="k7"),
            S.binary("mul", "f32", name="k8")]


def test_a_graph_of_many_kernels_is_cut_into_programs_that_each_compile(nvrtc):
    parts = T.split_program(mixed_specs(), 4)
    assert 2 <= len(parts) <= 4
    names = [n for _, kernels in parts for n in kernels]
    # every kernel with code of its own is in exactly one part; k7 is k0's twin and is launched as k0
    assert sorted(names) == ["k0", "k1", "k2", "k3", "k4", "k5", "k6", "k8"]
    for source, kernels in parts:
        defined = re.findall(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(', source)
        assert defined == kernels == sorted(kernels, key=lambda n: int(n[1:]))  # program order within a part
        assert source.startswith("// fastcomp program: prelude")
        ok, log, _ = nvrtc.compile(source)
        assert ok, log
    # the two attention kernels (the longest to compile) are not put together while a part has less
    assert not any({"k1", "k6"} <= set(kernels) for _, kernels in parts)
    assert T.split_program(mixed_specs(), 4) == parts  # the same plan, the same parts (and kernel-cache keys)


def test_one_part_is_the_whole_program_and_small_programs_stay_whole():
    specs = mixed_specs()
    [(whole, kernels)] = T.split_program(specs, 1)
    assert kernels == ["k0", "k1", "k2", "k3", "k4", "k5", "k6", "k8"]
    assert whole == T.emit_program([s for s in specs if s["name"] != "k7"])  # the twin is k0's code
    # two small pointwise kernels are not worth a second front end over the prelude, however many threads
    assert len(T.split_program([S.unary("exp", "f32", name="a"), S.unary("tanh", "f32", name="b")], 8)) == 1
