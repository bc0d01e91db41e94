"""What fastcomp makes of one zoo model: graphs, breaks and each graph's backend line (kernels, cuBLAS calls,
torch calls, or why autocast was kept), under a dtype as `benchmarks.models` runs it. Run on a GPU machine:

    python scripts/explain_model.py t5 llama --dtype amp-bf16 --batch 8"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import models  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--dtype", default="f32", choices=("f32", "bf16", "amp-bf16"))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--mode", default=None, help="reduce-overhead explains as that mode compiles")
    args = ap.parse_args()
    models.import_torchvision_beside_a_cpu_torch()
    import torch

    import fastcomp

    dtype, amp = models.precision(args.dtype, args.device)
    for name in args.models:
        model, kwargs = models.prepare(name, args.batch, dtype, args.device)
        with torch.no_grad(), amp:
            report = fastcomp.explain(model, mode=args.mode)(**kwargs)
        print(f"== {name} {args.dtype} b{args.batch}: {report.graph_count} graphs, {report.graph_break_count} breaks")
        for i, backend in enumerate(report.backends):
            print(f"  graph {i}: {backend}")
        for b in report.break_reasons:
            print(f"  break: {b}")


if __name__ == "__main__":
    main()
