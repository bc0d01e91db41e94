"""Emitted kernels (f32, and attention's f16 and bf16) run on the CPU (cpu_launch.py, cuda_on_cpu.h: a thread per CUDA thread, warps and blocks
synchronised by barriers) and compared with torch on fresh random inputs, so CI without a GPU checks what the
kernels compute (index arithmetic, shared memory, warp reductions, masks) and not only that NVRTC accepts them.
The GPU tests (`gpu` marker) remain the word on the real hardware: libm and CUDA's math differ in the last bits."""
import os
import signal
import subprocess
import sys
import textwrap

import pytest
import torch

from fastcomp._C import _testing as T

import codegen_gpu as G
import codegen_specs as S
import cpu_launch

pytestmark = pytest.mark.skipif(cpu_launch.compiler() is None, reason="no host C++ compiler")

SM_COUNT = 4  # small grids: each CUDA thread is a host thread


def run(spec, inputs):
    """Launches the spec's kernel on CPU storages; returns its outputs viewed over the iteration shape."""
    code, grid, block, _ = T.emit_kernel(spec, SM_COUNT)
    program = cpu_launch.Program(T.emit_program([spec], sm_count=SM_COUNT), [spec["name"]])
    # Unwritten elements show: NaN, or -7 in an integer output.
    outputs = [torch.full((G.storage_elements(spec["shape"], o["strides"], o.get("offset", 0)),),
                          float("nan") if G.TORCH_DTYPES[o["dtype"]].is_floating_point else -7,
                          dtype=G.TORCH_DTYPES[o["dtype"]]) for o in spec["outputs"]]
    program.launch(spec["name"], grid, block, inputs + outputs)
    return G.view_outputs(spec, outputs)


@pytest.mark.parametrize("spec", [
    S.w2_tiny_ops(n=3001), S.bias_add(shape=(3, 5, 67)), S.binary("add", "f32", shape=(64, 48), b_strides=[1, 64]),
    S.w3_softmax(rows=6, n=100), S.stable_softmax(rows=5, n=1500), S.layer_norm(rows=7, n=96, in_dtype="f32",
                                                                                 out_dtype="f32"),
], ids=lambda s: s["name"])
def test_pointwise_and_row_kernels_compute_what_torch_does(spec):
    inputs = G.random_inputs(spec, seed=3, device="cpu")
    for got, want in zip(run(spec, inputs), G.reference(spec, inputs)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("spec", S.TRANSPOSING, ids=lambda s: s["name"])
def test_transposing_kernels_compute_what_torch_does(spec):
    """Tiles through shared memory (emit_transposing_pointwise.cpp): edges of partial tiles, casts, broadcasts."""
    assert "through shared memory" in T.emit_kernel(spec, SM_COUNT)[0]
    inputs = G.random_inputs(spec, seed=7, device="cpu")
    for got, want in zip(run(spec, inputs), G.reference(spec, inputs)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


# (B, H, T, D): one query, odd sizes, a width that is not a multiple of 32, T > 64 (three key chunks).
ATTENTION_SHAPES = [(1, 1, 1, 8), (2, 3, 5, 8), (3, 2, 33, 48), (1, 2, 70, 64)]


@pytest.mark.parametrize("shape", ATTENTION_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("batch_major, causal", [(False, False), (True, False), (False, True)],
                         ids=["t_major", "b_major", "causal"])
def test_attention_kernels_compute_softmax_q_kt_v(shape, batch_major, causal):
    b, h, t, d = shape
    spec = S.mha_attention(b, h, t, d, batch_major, causal=causal,
                           rounding="probabilities" if causal else "every_step")
    inputs = G.random_inputs(spec, seed=t * 7 + d, device="cpu")
    (got,) = run(spec, inputs)
    q, k, v = (torch.as_strided(x, spec["shape"], i["strides"], i["offset"]).double()
               for x, i in zip(inputs, spec["inputs"]))
    scores = (q * spec["scale"]) @ k.transpose(-1, -2)
    if causal:
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    want = torch.softmax(scores, -1) @ v
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))


@pytest.mark.parametrize("causal", [False, True])
def test_attention_kernels_read_each_operand_in_its_own_layout(causal):
    spec = S.sdpa_attention(causal=causal)
    inputs = G.random_inputs(spec, seed=11, device="cpu")
    (got,) = run(spec, inputs)
    q, k, v = (torch.as_strided(x, spec["shape"], i["strides"], i["offset"]).double()
               for x, i in zip(inputs, spec["inputs"]))
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=spec["scale"])
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))


def attention_reference(spec, inputs):
    """torch's F.scaled_dot_product_attention in f64 on an attention spec's operands (operand_shapes)."""
    q, k, v, *mask = (torch.as_strided(x, shape, i["strides"], i["offset"])
                      for x, shape, i in zip(inputs, S.operand_shapes(spec), spec["inputs"]))
    mask = mask[0] if mask else None
    if mask is not None and mask.dtype != torch.bool:
        mask = mask.double()
    return torch.nn.functional.scaled_dot_product_attention(
        q.double(), k.double(), v.double(), attn_mask=mask, is_causal=spec["causal"], scale=spec["scale"],
        enable_gqa=spec["kv_heads"] != spec["shape"][1])


def attention_inputs(spec, seed):
    g = torch.Generator().manual_seed(seed)
    return [G.random_storage(i["dtype"], G.storage_elements(shape, i["strides"], i["offset"]), g, device="cpu")
            for shape, i in zip(S.operand_shapes(spec), spec["inputs"])]


@pytest.mark.parametrize("case", [
    dict(mask="float"), dict(mask="bool"), dict(mask="bool", mask_dims=(3,)),  # a key padding mask
    dict(mask="float", mask_dims=(1, 2, 3)), dict(mask=None, causal=True), dict(mask=None, t=9, s=4, causal=True),
    dict(mask="bool", t=1, s=40), dict(mask=None, kv_heads=4), dict(mask="float", h=3, kv_heads=1, d=6),
], ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_attention_kernels_take_masks_other_key_counts_and_key_heads(case):
    """Cross-attention (S keys, not T), grouped-query heads and masks (bool: a left-out key; float: added to the
    scores; broadcast over batch, heads or queries), and rows whose keys a bool mask all leaves out (0, as torch
    gives), against torch's F.scaled_dot_product_attention."""
    spec = S.sdpa_masked_attention(**case)
    inputs = attention_inputs(spec, seed=len(str(case)))
    left_out = case["mask"] == "bool" and case.get("mask_dims", (0, 2, 3)) == (0, 2, 3)
    if left_out:
        inputs[3][: spec["keys"]] = False  # query 0 of batch 0 (every head) sees no key
    (got,) = run(spec, inputs)
    want = attention_reference(spec, inputs)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))
    if left_out:
        assert (want[0, :, 0] == 0).all() and (want[1:] != 0).any()


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_masked_half_attention_rounds_only_its_output(dtype):
    """A masked f16 or bf16 head rounded as torch's math path (everything in f32, the output rounded once): the f64
    reference over the same operands, rounded to the dtype."""
    spec = S.sdpa_masked_attention(mask="float", dtype=dtype, rounding="output")
    inputs = attention_inputs(spec, seed=3)
    (got,) = run(spec, inputs)
    want = attention_reference(spec, inputs)
    assert got.dtype == G.TORCH_DTYPES[dtype]
    # A value the f32 result rounds one way and the f64 one the other lies within a hair of a tie: one unit in the
    # last place at most, and rare.
    rounded = want.to(got.dtype)
    ulp = {"bf16": 2.0**-7, "f16": 2.0**-10}[dtype]
    torch.testing.assert_close(got.double(), rounded.double(), rtol=ulp, atol=0)
    assert (got == rounded).float().mean() > 0.98


# Column reductions: a column per thread (or `vec` of them), R split across a block's threads where there are few
# columns; strided inputs, reduced dimensions apart from each other, a per-element store and epilogue inputs.
@pytest.mark.parametrize("spec", [
    S.column_sum(), S.column_sum((3, 1025), name="odd_columns"), S.column_sum((1, 8), name="one_row"),
    S.column_sum((2, 3, 5, 7), (0, 2), name="two_apart"), S.column_sum((4, 6, 5, 16), (1, 2), name="middle"),
    S.column_sum((64, 40), strides=[1, 64], name="transposed"), S.column_sum((3000, 8), scale=0.5, name="long_column"),
    S.column_var(), S.column_var((7, 3, 24), (0, 1), correction=0, name="var_two"), S.column_prologue_epilogue(),
], ids=lambda s: s["name"])
def test_column_kernels_compute_what_torch_does(spec):
    inputs = G.random_inputs(spec, seed=5, device="cpu")
    for got, want in zip(run(spec, inputs), G.reference(spec, inputs)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def embedding_inputs(n, t, v, d, index_dtype, bad=None):
    """Storages of S.embedding's inputs: indices covering [0, v) (both ends), the table and the positions; `bad`
    replaces one index."""
    idx = torch.randint(0, v, (n * t,), dtype=index_dtype)
    at = torch.randperm(n * t)[:2]
    idx[at[0]], idx[at[1]] = v - 1, 0
    if bad is not None:
        idx[at[0]] = bad
    return [idx, torch.randn(v * d), torch.randn(t * d)]


@pytest.mark.parametrize("index", ["i32", "i64"])
@pytest.mark.parametrize("n, t, v, d", [(1, 2, 7, 3), (3, 5, 50, 129), (2, 9, 1000, 64)])
def test_gather_kernel_computes_embedding(n, t, v, d, index):
    spec = S.embedding(n=n, t=t, v=v, d=d, index=index)
    inputs = embedding_inputs(n, t, v, d, torch.int32 if index == "i32" else torch.int64)
    (got,) = run(spec, inputs)
    idx, table, pos = inputs[0].view(n, t).long(), inputs[1].view(v, d), inputs[2].view(t, d)
    torch.testing.assert_close(got, table[idx] * 2 + pos, rtol=1e-6, atol=1e-6)


def run_embedding_in_a_child(bad, d, spec="embedding", extra="[]"):
    """Runs S.<spec> (rows of d) with index `bad` in a child process (a trap ends it), `extra` inputs after
    embedding_inputs'; returns the CompletedProcess."""
    script = textwrap.dedent(f"""
        import torch, test_kernels_on_cpu as K, codegen_specs as S
        inputs = K.embedding_inputs(3, 5, 50, {d}, torch.int64, bad={bad}) + {extra}
        (got,) = K.run(S.{spec}(n=3, t=5, v=50, d={d}), inputs)
        print("ran to the end", float(got.sum()))
    """)
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([here] + [os.path.abspath(p) for p in sys.path if p]))
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=here,
                          timeout=300)


@pytest.mark.parametrize("index", ["i32", "i64"])
@pytest.mark.parametrize("d", [64, 129, 768, 20001])  # 20001: rows streamed
def test_row_reduce_with_a_gather_computes_layer_norm_of_embeddings(d, index):
    n, t, v = 3, 5, 50
    spec = S.embedding_layer_norm(n=n, t=t, v=v, d=d, index=index)
    idx, table, pos = embedding_inputs(n, t, v, d, torch.int32 if index == "i32" else torch.int64)
    w, b = torch.randn(d), torch.randn(d)
    (got,) = run(spec, [idx, table, pos, w, b])
    x = table.view(v, d)[idx.view(n, t).long()] + pos.view(t, d)
    torch.testing.assert_close(got.view(n, t, d), torch.nn.functional.layer_norm(x, (d,), w, b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("d", [8, 7], ids=["vector_loop", "scalar_loop"])
@pytest.mark.parametrize("bad", [None, -1, 50, 1 << 40], ids=["in_range", "negative", "size", "huge"])
def test_gather_kernel_traps_on_an_index_out_of_range(bad, d):
    """__trap() ends the CUDA context on a GPU; on the CPU (cuda_on_cpu.h) it aborts the process."""
    r = run_embedding_in_a_child(bad, d)
    if bad is None:
        assert r.returncode == 0 and "ran to the end" in r.stdout, r.stderr[-2000:]
    else:
        assert r.returncode == -signal.SIGABRT and "ran to the end" not in r.stdout, (r.returncode, r.stderr[-2000:])


@pytest.mark.parametrize("bad", [None, -1, 50], ids=["in_range", "negative", "size"])
def test_row_reduce_gather_traps_on_an_index_out_of_range(bad):
    r = run_embedding_in_a_child(bad, 64, "embedding_layer_norm", "[torch.randn(64), torch.randn(64)]")
    if bad is None:
        assert r.returncode == 0 and "ran to the end" in r.stdout, r.stderr[-2000:]
    else:
        assert r.returncode == -signal.SIGABRT and "ran to the end" not in r.stdout, (r.returncode, r.stderr[-2000:])
