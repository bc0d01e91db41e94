"""Dynamic shapes on the CUDA backend: one compiled kernel set serves every size. Symbolic sizes become int64
kernel parameters (p0, p1, ...) evaluated per call, static ones stay constants in the CUDA C; launch grids,
allocations and cuBLASLt shapes are computed per call.

CPU tests rehearse the backend (lower, emit, NVRTC to PTX; the graph itself runs through torch); GPU tests run
W5, W7 and an attention block over many sizes against eager and count compiles and NVRTC programs."""
import re
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import fastcomp
from fastcomp import _C
from fastcomp.testing import CompileCounter

from benchmarks.workloads import MLP, TransformerLayer

# Batch (or sequence) sizes after the first compile: 1, 2 and primes included.
SIZES = [16, 1, 2, 3, 5, 7, 11, 13, 17, 31, 37, 64]


def backend_counts(backend):
    m = re.match(r"(?:rehearsal|cuda): (\d+) kernels, (\d+) cuBLAS calls, (\d+) extern ops", backend)
    assert m, backend
    return tuple(int(g) for g in m.groups())


def kernel_signatures(cuda_source):
    return re.findall(r'extern "C" __global__ void __launch_bounds__\(\d+\) (\w+)\(([^)]*)\)', cuda_source)


# --- CPU: rehearsal -------------------------------------------------------------------------------------------


def rehearse_compile(fn, inputs_per_call, **kwargs):
    """Compiles `fn`, calls it on each inputs tuple (checking eager's result) and returns the compile records."""
    compiled = fastcomp.compile(fn, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an NVRTC or lowering failure warns: make it fail the test
        with CompileCounter() as cc, torch.no_grad():
            for inputs in inputs_per_call:
                torch.testing.assert_close(compiled(*inputs), fn(*inputs), rtol=1e-5, atol=1e-5)
    return cc.records


def test_dynamic_mlp_is_planned_for_the_cuda_backend_with_symbolic_matmul_shapes(rehearse):
    torch.manual_seed(0)
    model = MLP().eval()  # W5's module: Linear(512, 1024), GELU, Linear(1024, 512)
    with fastcomp.config.patch(small_matmul=False):  # batch 8's products would be small-matmul kernels
        records = rehearse_compile(model, [(torch.randn(b, 512),) for b in (8, 16, 5)])
    assert len(records) == 2
    static, dynamic = records
    assert backend_counts(static["backend"]) == backend_counts(dynamic["backend"]) == (1, 2, 0)
    assert dynamic["backend"].endswith("dynamic shapes (s0)")
    assert "s0 = input 0 size(0)" in dynamic["plan"]
    assert "matmul f32 m=s0 n=1024 k=512" in dynamic["plan"]
    assert "matmul f32 m=s0 n=512 k=1024" in dynamic["plan"]
    # The GELU kernel: its element count is a parameter; the static graph's is a constant.
    (name, params), = kernel_signatures(dynamic["cuda_source"])
    assert params.endswith("const int64_t p0")
    (name, params), = kernel_signatures(static["cuda_source"])
    assert "int64_t p" not in params and "int64_t p" not in static["cuda_source"]


def test_small_batches_get_small_matmul_kernels_until_the_batch_is_a_symbol(rehearse):
    torch.manual_seed(0)
    model = MLP().eval()
    records = rehearse_compile(model, [(torch.randn(b, 512),) for b in (8, 16, 5)])
    static, dynamic = records
    # Static 8 rows: both products are kernels of their own; a symbolic batch has no bound on its rows (the kernel
    # keeps a sum per row in registers), so its products are cuBLASLt calls.
    assert backend_counts(static["backend"]) == (3, 0, 0)
    assert backend_counts(dynamic["backend"]) == (1, 2, 0)
    assert "kernel k0 small_matmul shape=[8,1024,512]" in static["plan"]


def test_reduce_overhead_keeps_cublaslt_for_small_products(rehearse):
    # Replayed from a CUDA graph a cuBLASLt call costs the host nothing and cuBLAS's kernels are the faster ones.
    torch.manual_seed(0)
    model = MLP().eval()
    (record,) = rehearse_compile(model, [(torch.randn(8, 512),)], mode="reduce-overhead")
    assert backend_counts(record["backend"]) == (1, 2, 0)
    assert "small_matmul" not in record["plan"]


def test_static_dims_stay_constants_and_symbolic_ones_become_parameters(rehearse):
    class BiasSoftmax(nn.Module):
        def __init__(self):
            super().__init__()
            self.bias = nn.Parameter(torch.randn(48))  # parameters stay static under dynamic=True

        def forward(self, x):
            return torch.softmax(x + self.bias, -1) * 2.0

    records = rehearse_compile(BiasSoftmax().eval(), [(torch.randn(b, s, 48),) for b, s in ((2, 8), (3, 5), (4, 7))],
                               dynamic=True)
    assert len(records) == 1
    assert "kernel k0 row_reduce shape=[s0,s1,48]" in records[0]["plan"]
    src = records[0]["cuda_source"]
    (name, params), = kernel_signatures(src)
    assert params.endswith("const int64_t p0")  # the only size parameter: the row count s0*s1
    assert "row < p0" in src
    # The row of 48 is static: 16-byte loads of 4 columns at constant steps, no parameter but the row count.
    assert "p1" not in src
    assert "rows of 48" in src and "fc_load<4, kVector>" in src


def test_symbolic_row_length_softmax_streams_with_the_length_as_a_parameter(rehearse):
    def f(x):
        return torch.softmax(x, -1)

    records = rehearse_compile(f, [(torch.randn(4, n),) for n in (9, 13, 6)], dynamic=True)
    assert len(records) == 1
    src = records[0]["cuda_source"]
    assert "kernel k0 row_reduce shape=[s0,s1]" in records[0]["plan"]
    assert re.search(r"j < p\d", src), src  # the row length bounds the streamed loop
    assert "x[" not in src.split("// k0")[1].split("\n")[0]  # not cached in registers: "streamed" in the comment
    assert "streamed" in src


def test_w7_with_dynamic_batch_and_sequence_keeps_the_static_plan(rehearse):
    torch.manual_seed(0)
    layer = TransformerLayer().eval()  # W7's layer: MultiheadAttention(512, 8), FF 2048, post-norm
    records = rehearse_compile(layer, [(torch.randn(b, s, 512),) for b, s in ((2, 16), (3, 9))], dynamic=True)
    assert len(records) == 1
    rec = records[0]
    # The static W7's plan without fused attention (tests/backend/test_lowering.py): the attention kernel needs a
    # static sequence length, so the heads are 4 cuBLAS calls and 2 kernels.
    assert backend_counts(rec["backend"]) == (5, 6, 0)
    assert rec["backend"].endswith("dynamic shapes (s0, s1)")
    assert "matmul f32 m=s1 n=s1 k=64 batch=8*s0" in rec["plan"]  # scores: K/N vary with the sequence
    assert "kernel k1 row_reduce shape=[8*s0,s1,s1]" in rec["plan"]  # softmax rows of symbolic length
    signatures = dict(kernel_signatures(rec["cuda_source"]))
    assert all("const int64_t p0" in p for p in signatures.values()), signatures
    # layer_norm rows are 512 long and static: cached in registers with 16-byte loads, the row count a parameter.
    assert re.search(r"// k2: row reduce over \[s0, s1, 512\], s0\*s1 rows of 512, .* in registers", rec["cuda_source"])


def test_w7_with_a_dynamic_batch_keeps_its_attention_kernel(rehearse):
    torch.manual_seed(0)
    layer = TransformerLayer().eval()
    records = rehearse_compile(layer, [(torch.randn(b, 16, 512),) for b in (2, 3, 5)])
    assert len(records) == 2  # the second batch size recompiles with the batch a symbol
    rec = records[1]
    assert rec["backend"].endswith("dynamic shapes (s0)"), rec["backend"]
    # The static W7's plan: one attention kernel for the heads, between the QKV and output projections; at batch 2
    # (32 rows) its four products are small-matmul kernels, which a symbolic batch makes cuBLASLt calls again.
    assert backend_counts(records[0]["backend"]) == (8, 0, 0)
    assert backend_counts(rec["backend"]) == (4, 4, 0)
    assert "kernel k0 attention shape=[s0,8,16,64]" in rec["plan"], rec["plan"]
    # t-major rows: q/k/v's t stride (3 * 512 * B) and o's (512 * B) and the grid follow the batch
    code = rec["cuda_source"].split("// k0: attention over [B, H, T, D] = [s0, 8, 16, 64]")[1].split("\n}\n")[0]
    assert "int64_t p0" in code and "if (blockIdx.x >= " in code, code


def test_one_kernel_set_serves_every_size_in_rehearsal(rehearse):
    torch.manual_seed(0)
    model = MLP(d=64, hidden=128).eval()
    compiled = fastcomp.compile(model, dynamic=True)
    with torch.no_grad():
        compiled(torch.randn(8, 64))
        before = _C._testing.kernel_cache_stats()
        with CompileCounter() as cc:
            for b in SIZES:
                x = torch.randn(b, 64)
                torch.testing.assert_close(compiled(x), model(x))
    assert cc.frame_count == 0
    assert _C._testing.kernel_cache_stats() == before


def test_column_reduce_takes_symbolic_sizes_as_parameters(rehearse):
    def f(x):
        return x.sum(1) * 2 + x.amax(1)

    records = rehearse_compile(f, [(torch.randn(n, 6, 40),) for n in (9, 13, 6)], dynamic=True)
    assert len(records) == 1 and backend_counts(records[0]["backend"]) == (1, 0, 0)
    assert "kernel k0 column_reduce shape=[s0,s1,s2] reduced=[1]" in records[0]["plan"]
    assert re.search(r"r < p\d", records[0]["cuda_source"])  # the reduced length bounds each thread's loop


def test_column_mean_over_a_symbolic_outer_dimension_divides_by_a_constant(rehearse):
    def f(x):
        return x.mean(1)

    def marked(n):
        x = torch.randn(n, 6, 40)
        fastcomp.mark_dynamic(x, 0)
        return (x,)

    records = rehearse_compile(f, [marked(n) for n in (9, 13, 6)])
    assert len(records) == 1 and backend_counts(records[0]["backend"]) == (1, 0, 0)
    assert "kernel k0 column_reduce shape=[s0,6,40] reduced=[1]" in records[0]["plan"]
    assert "4 columns per thread" in records[0]["cuda_source"]  # 40 static columns: 16-byte vectors
    # A mean over a symbolic reduced dimension divides by a size the kernel does not know: torch's.
    records = rehearse_compile(lambda x: x.mean(0), [(torch.randn(n, 40),) for n in (9, 13)], dynamic=True)
    assert "(a mean over symbolic reduced dimensions)" in records[0]["backend"]


def test_declined_ops_under_dynamic_shapes_say_why(rehearse):
    def f(x):
        return x.mean(-1) + x[1:].sum()

    records = rehearse_compile(f, [(torch.randn(4, n),) for n in (9, 13)], dynamic=True)
    backend = records[0]["backend"]
    assert "; through torch: " in backend, backend
    assert "(a mean over a symbolic row length)" in backend
    assert "getitem of a dynamic tensor: its storage offset may depend on the sizes" in backend
    assert "# a mean over a symbolic row length" in records[0]["plan"]


def test_cat_along_a_symbolic_dimension_picks_its_pieces_by_size_parameters(rehearse):
    def f(x, y):
        return torch.cat((x, y * 2), -1) + 1

    records = rehearse_compile(f, [(torch.randn(3, n), torch.randn(3, m)) for n, m in ((8, 5), (13, 6), (6, 6))],
                               dynamic=True)
    assert len(records) == 1, [r["recompile_reasons"] for r in records]
    rec = records[0]
    assert backend_counts(rec["backend"]) == (1, 0, 0) and "through torch" not in rec["backend"]
    # the result's size along the cat is the pieces' sum; the second piece starts where the first ends
    assert "kernel k0 pointwise shape=[s0,s1 + s3]" in rec["plan"], rec["plan"]
    assert "in1 f32 strides=[s3,1] offset=-s1 valid d1=[s1,s1 + s3)" in rec["plan"]
    assert "in_range bool d1=[0,s1)" in rec["plan"]
    src = rec["cuda_source"]
    assert re.search(r"\(c1 < p\d\) \? in0\[", src) and re.search(r"\(c1 >= p\d\) \? in1\[", src), src


def test_embedding_with_a_symbolic_batch_is_one_kernel(rehearse):
    emb = nn.Embedding(50, 33)

    def f(idx, pos):
        return emb(idx) * 2 + pos

    records = rehearse_compile(f, [(torch.randint(0, 50, (b, 7)), torch.randn(7, 33)) for b in (4, 9, 2)])
    assert len(records) == 2  # static first, then the batch becomes a symbol
    static, dynamic = records
    assert backend_counts(static["backend"]) == backend_counts(dynamic["backend"]) == (1, 0, 0)
    assert "kernel k0 pointwise shape=[s0,7,33]" in dynamic["plan"], dynamic["plan"]
    assert "gather f32 in1 size=50 stride=33 e0" in dynamic["plan"]
    src = dynamic["cuda_source"]
    assert "if (e0 < 0 || e0 >= 50) __trap();" in src and "64-bit indices" in src


def test_gather_from_a_table_of_symbolic_length_checks_against_a_parameter(rehearse):
    def f(idx, table):
        return F.embedding(idx, table) + 1

    records = rehearse_compile(f, [(torch.randint(0, v, (3,)), torch.randn(v, 16)) for v in (10, 20, 13)],
                               dynamic=True)
    assert len(records) == 1
    rec = records[0]
    assert backend_counts(rec["backend"]) == (1, 0, 0)
    assert re.search(r"gather f32 in1 size=s\d stride=s\d e0", rec["plan"]), rec["plan"]
    assert re.search(r"if \(e0 < 0 \|\| e0 >= p\d\) __trap\(\);", rec["cuda_source"])


def test_explain_shows_a_dynamic_graph_on_the_cuda_backend(rehearse):
    report = str(fastcomp.explain(fastcomp.compile(MLP(d=32, hidden=64).eval(), dynamic=True))(torch.randn(4, 32)))
    assert "runs on rehearsal: 1 kernels, 2 cuBLAS calls, 0 extern ops, dynamic shapes (s0)" in report


# --- GPU ------------------------------------------------------------------------------------------------------


def cache_lookups():
    s = _C._testing.kernel_cache_stats()
    return s["memory_hits"] + s["disk_hits"] + s["misses"]


def run_sizes(compiled, model, make, sizes, rtol, atol):
    with torch.no_grad():
        for n in sizes:
            x = make(n)
            torch.testing.assert_close(compiled(x), model(x), rtol=rtol, atol=atol, msg=f"size {n}")


def check_one_kernel_set(model, make, first, rtol, atol, dynamic, sizes=SIZES):
    """Calls `model` compiled at sizes `first` then `sizes`; returns the compile records. Checks that no NVRTC
    program is looked up (let alone compiled) after the compile that made the dynamic entry."""
    compiled = fastcomp.compile(model, dynamic=dynamic)
    with CompileCounter() as cc:
        run_sizes(compiled, model, make, first, rtol, atol)
        lookups = cache_lookups()
        run_sizes(compiled, model, make, sizes, rtol, atol)
        assert cache_lookups() == lookups, "a new size compiled kernels"
    return compiled, cc.records


def assert_dynamic_on_cuda(record, symbols="s0"):
    assert record["backend"].startswith("cuda:"), record["backend"]
    assert f"dynamic shapes ({symbols})" in record["backend"], record["backend"]
    assert "through torch" not in record["backend"], record["backend"]


@pytest.mark.gpu
@pytest.mark.parametrize("dynamic", [None, True])
def test_w5_over_many_batch_sizes_on_cuda(dynamic):
    torch.manual_seed(0)
    model = MLP().cuda().eval()  # W5: Linear(512, 1024), GELU, Linear(1024, 512), fp32 [B, 512]
    make = lambda b: torch.randn(b, 512, device="cuda")  # noqa: E731
    first = [8, 12] if dynamic is None else [8]
    _, records = check_one_kernel_set(model, make, first, 1e-5, 1e-4, dynamic)
    assert len(records) == (2 if dynamic is None else 1), [r["recompile_reasons"] for r in records]
    if dynamic is None:
        assert records[0]["backend"].startswith("cuda:") and "dynamic" not in records[0]["backend"]
    assert_dynamic_on_cuda(records[-1])


@pytest.mark.gpu
@pytest.mark.parametrize("dynamic", [None, True])
def test_w7_over_many_batch_sizes_on_cuda(dynamic):
    torch.manual_seed(0)
    layer = TransformerLayer().cuda().eval()  # W7: MultiheadAttention(512, 8), FF 2048, fp32 [B, 64, 512]
    make = lambda b: torch.randn(b, 64, 512, device="cuda")  # noqa: E731
    first = [8, 12] if dynamic is None else [8]  # dynamic=True makes the sequence (64 here) a symbol too
    _, records = check_one_kernel_set(layer, make, first, 1e-4, 1e-4, dynamic)
    assert len(records) == (2 if dynamic is None else 1), [r["recompile_reasons"] for r in records]
    assert_dynamic_on_cuda(records[-1], symbols="s0" if dynamic is None else "s0, s1")
    # A symbolic batch keeps the attention kernel; a symbolic sequence (dynamic=True) decomposes the heads.
    counts = (4, 4, 0) if dynamic is None else (5, 6, 0)
    assert [backend_counts(r["backend"]) for r in records] == [counts] * len(records)


@pytest.mark.gpu
@pytest.mark.parametrize("dynamic", [None, True])
def test_attention_block_over_many_sequence_lengths_on_cuda(dynamic):
    torch.manual_seed(0)
    layer = TransformerLayer().cuda().eval()
    make = lambda s: torch.randn(2, s, 512, device="cuda")  # noqa: E731
    first = [8, 12] if dynamic is None else [8]
    _, records = check_one_kernel_set(layer, make, first, 1e-4, 1e-4, dynamic)
    assert len(records) == (2 if dynamic is None else 1), [r["recompile_reasons"] for r in records]
    assert_dynamic_on_cuda(records[-1], symbols="s0" if dynamic is None else "s0, s1")
    assert "kernel k1 row_reduce shape=[" in records[-1]["plan"] and ",s" in records[-1]["plan"]


@pytest.mark.gpu
def test_cat_along_a_symbolic_dimension_over_many_sizes_on_cuda():
    def f(x, y):
        return torch.cat((x.sigmoid(), y * 2, x), -1) + 1

    compiled = fastcomp.compile(f, dynamic=True)
    with CompileCounter() as cc, torch.no_grad():
        for n in [8] + SIZES:
            x, y = torch.randn(3, n, device="cuda"), torch.randn(3, n + 5, device="cuda")
            torch.testing.assert_close(compiled(x, y), f(x, y), msg=f"size {n}")
    assert len(cc.records) == 1, [r["recompile_reasons"] for r in cc.records]
    backend = cc.records[0]["backend"]
    assert backend.startswith("cuda:") and "dynamic shapes (" in backend and "through torch" not in backend, backend
    assert backend_counts(backend) == (1, 0, 0)


class SdpaBlock(nn.Module):
    """Attention through F.scaled_dot_product_attention (an attention kernel, or torch's for a symbolic sequence)
    with reshapes of symbolic sizes."""

    def __init__(self, d=256, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return self.norm(x + self.out(o.transpose(1, 2).reshape(b, s, d)))


@pytest.mark.gpu
def test_sdpa_block_over_many_sequence_lengths_on_cuda():
    torch.manual_seed(0)
    block = SdpaBlock().cuda().eval()
    make = lambda s: torch.randn(3, s, 256, device="cuda")  # noqa: E731
    compiled, records = check_one_kernel_set(block, make, [8, 12], 1e-4, 1e-4, None, [s for s in SIZES if s != 1])
    assert len(records) == 2, [r["recompile_reasons"] for r in records]
    assert_dynamic_on_cuda(records[-1])
    assert "scaled_dot_product_attention" in records[-1]["plan"]
    # At one token the heads' transposes are contiguous and the reshape after attention is a view, not a copy:
    # the symbolic sequence starts at 2 (as torch.compile's do) and one token gets a static entry of its own.
    with CompileCounter() as cc:
        run_sizes(compiled, block, make, [1, 1], 1e-4, 1e-4)
    assert len(cc.records) == 1 and "outside the range [2, inf]" in cc.records[0]["recompile_reasons"][0], \
        [r["recompile_reasons"] for r in cc.records]
    assert "dynamic" not in cc.records[0]["backend"], cc.records[0]["backend"]


@pytest.mark.gpu
def test_sdpa_block_over_many_batch_sizes_keeps_its_attention_kernel_on_cuda():
    torch.manual_seed(0)
    block = SdpaBlock().cuda().eval()  # 4 heads of 64 over 32 tokens: keys and values fit in shared memory
    make = lambda b: torch.randn(b, 32, 256, device="cuda")  # noqa: E731
    _, records = check_one_kernel_set(block, make, [8, 12], 1e-4, 1e-4, None)
    assert len(records) == 2, [r["recompile_reasons"] for r in records]
    assert_dynamic_on_cuda(records[-1])
    assert "attention shape=[s0,4,32,64]" in records[-1]["plan"], records[-1]["plan"]
    assert "scaled_dot_product_attention" not in records[-1]["plan"]


@pytest.mark.gpu
def test_dynamic_graph_under_reduce_overhead_launches_directly():
    torch.manual_seed(0)
    model = MLP(d=64, hidden=128).cuda().eval()
    compiled = fastcomp.compile(model, dynamic=True, mode="reduce-overhead")
    with CompileCounter() as cc:
        run_sizes(compiled, model, lambda b: torch.randn(b, 64, device="cuda"), [8, 3, 8, 17, 1], 1e-5, 1e-5)
    assert len(cc.records) == 1
    backend = cc.records[0]["backend"]
    assert backend.startswith("cuda:") and "no CUDA graph: dynamic shapes" in backend, backend
