"""Reductions over dims that keep the last one (column reductions), over every dim (whole-tensor, split across
blocks when long), over the last dim (row reductions), and row reductions of gathered rows: µs per call and GB/s
(input read once + output written) for eager, torch.compile and fastcomp in the same process, each case's
compiled functions warmed up first. Run on a GPU machine:

    python scripts/reduction_bench.py [--modes eager tc fc] [--out results.md]

The memory-bound floor is the copy rate: a reduction that reads its input once cannot beat it.
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))


def cases():
    import torch

    def f32(*shape):
        return lambda: (torch.randn(*shape, device="cuda"),)

    def bf16(*shape):
        return lambda: (torch.randn(*shape, device="cuda", dtype=torch.bfloat16),)

    return [
        ("x.sum(0) [4096, 4096] f32", lambda x: x.sum(0), f32(4096, 4096)),
        ("x.sum(0) [65536, 64] f32", lambda x: x.sum(0), f32(65536, 64)),
        ("x.sum(0) [64, 65536] f32", lambda x: x.sum(0), f32(64, 65536)),
        ("x.mean((0, 1)) [32, 128, 1024] f32", lambda x: x.mean((0, 1)), f32(32, 128, 1024)),
        ("x.mean((0, 2, 3), keepdim) [32, 64, 56, 56] f32 (batch-norm statistics)",
         lambda x: x.mean((0, 2, 3), keepdim=True), f32(32, 64, 56, 56)),
        ("x.var(0) [8192, 1024] f32", lambda x: x.var(0), f32(8192, 1024)),
        ("x.var(0) [8192, 3] f32 (few long columns, in pieces)", lambda x: x.var(0), f32(8192, 3)),
        ("batch-norm mean and var of one x [32, 64, 56, 56] f32 (one read)",
         lambda x: (x.mean((0, 2, 3)), x.var((0, 2, 3))), f32(32, 64, 56, 56)),
        ("x.var((0, 2, 3)) [32, 64, 56, 56] f32 (batch-norm variance)", lambda x: x.var((0, 2, 3)),
         f32(32, 64, 56, 56)),
        ("x.var() [4096, 4096] f32 (whole tensor, in pieces)", lambda x: x.var(), f32(4096, 4096)),
        ("x.std(-1) [4, 1 << 20] f32 (few long rows, in pieces)", lambda x: x.std(-1), f32(4, 1 << 20)),
        ("(x * x).sum(1) * 2 [256, 1024, 256] f32", lambda x: (x * x).sum(1) * 2, f32(256, 1024, 256)),
        ("x.float().amax(0) [16384, 2048] bf16", lambda x: x.float().amax(0), bf16(16384, 2048)),
        ("x.sum(-1) [4096, 4096] f32 (row, reference)", lambda x: x.sum(-1), f32(4096, 4096)),
        ("x.sum() [4096, 4096] f32 (whole tensor)", lambda x: x.sum(), f32(4096, 4096)),
        ("x.var() [1024, 1000] f32 (whole tensor)", lambda x: x.var(), f32(1024, 1000)),
        ("((a - b) ** 2).mean() [4096, 4096] f32 (MSE)", lambda a, b: ((a - b) ** 2).mean(),
         lambda: (torch.randn(4096, 4096, device="cuda"), torch.randn(4096, 4096, device="cuda"))),
        ("x.amax() [1 << 20] bf16", lambda x: x.amax(), bf16(1 << 20)),
        ("x.abs().sum() [64, 64, 56, 56] f32", lambda x: x.abs().sum(), f32(64, 64, 56, 56)),
        ("layer_norm(emb(idx) + pos(p)) [64, 128] of 30522x768 f32 (gathers in the row reduction)",
         embedding_layer_norm, embedding_inputs),
        ("softmax(emb(idx) * 2) [8192] of 32000x1024 bf16", embedding_softmax,
         lambda: (torch.randint(0, 32000, (8192,), device="cuda"),
                  gathered(torch.randn(32000, 1024, device="cuda", dtype=torch.bfloat16)))),
        ("x[idx] [4096] of [65536, 512] f32 (integer indexing)", lambda x, i: x[i] * 2,
         lambda: (gathered(torch.randn(65536, 512, device="cuda")), torch.randint(-65536, 65536, (4096,), device="cuda"))),
    ]


def gathered(table):
    """Marks a table that the case reads only at gathered rows (for the GB/s column)."""
    table.gathered = True
    return table


def embedding_layer_norm(idx, pos, table, pos_table, weight, bias):
    import torch.nn.functional as F
    x = F.embedding(idx, table) + F.embedding(pos, pos_table)
    return F.layer_norm(x, (x.shape[-1],), weight, bias)


def embedding_inputs():
    import torch
    return (torch.randint(0, 30522, (64, 128), device="cuda"), torch.arange(128, device="cuda").expand(64, 128),
            gathered(torch.randn(30522, 768, device="cuda")), torch.randn(512, 768, device="cuda"),
            torch.randn(768, device="cuda"), torch.randn(768, device="cuda"))


def embedding_softmax(idx, table):
    import torch
    return torch.softmax(torch.nn.functional.embedding(idx, table) * 2, dim=-1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", nargs="+", default=["eager", "tc", "fc"])
    parser.add_argument("--out")
    parser.add_argument("--only", nargs="+", help="run the cases whose name contains one of these texts")
    args = parser.parse_args()
    import torch

    from benchmarks.modes import MODES
    from fastcomp.testing import CompileCounter
    from kernel_profile import per_call_us

    rows = [f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}", "",
            "| case | " + " | ".join(f"{m} µs | {m} GB/s" for m in args.modes) + " | fc plan |",
            "|---|" + "---|---|" * len(args.modes) + "---|"]
    for name, fn, make in cases():
        if args.only and not any(text in name for text in args.only):
            continue
        inputs = make()
        expected = fn(*inputs)
        outputs = expected if isinstance(expected, tuple) else (expected,)
        is_f32 = outputs[0].dtype == torch.float32
        # A gathered table is read only at the gathered rows, about one output's worth: count that, not the table.
        moved = sum(t.numel() * t.element_size() for t in inputs if getattr(t, "gathered", None) is None)
        moved += sum(o.numel() * o.element_size() for o in outputs) * (1 + any(hasattr(t, "gathered") for t in inputs))
        cells, plan = [], ""
        for mode_name in args.modes:
            mode = MODES[mode_name]
            with torch.no_grad(), CompileCounter() as cc:
                compiled = mode.compile(fn)
                torch.testing.assert_close(compiled(*inputs), expected, rtol=1e-4 if is_f32 else 1e-2,
                                           atol=1e-3 if is_f32 else 1e-2)
                mode.wait_ready()
                us = per_call_us(compiled, inputs)
            if mode_name.startswith("fc") and cc.records:
                plan = cc.records[0].get("backend", "")
            cells += [f"{us:.1f}", f"{moved / us / 1e3:.0f}"]
        rows.append(f"| {name} | " + " | ".join(cells) + f" | {plan} |")
        print(rows[-1], flush=True)
    text = "\n".join(rows) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
