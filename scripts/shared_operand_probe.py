"""Two products that share their left operand (W9's x @ Wg and x @ Wu; q/k/v or gate/up projections of one
activation): as two cuBLASLt calls, or as one strided-batched call whose weight batch stride is the distance
between the two weight tensors (no copy; the activation's batch stride is 0), against one product with the
weights concatenated (the best one launch can do) and torch. Each timed as CUDA-graph replays, as
reduce-overhead runs them. Run on a GPU machine:

    python scripts/shared_operand_probe.py
"""
import torch

from fastcomp import _C
from gpu_timing import graph_us

WORKSPACE = 32 << 20
SHAPES = [  # (dtype, m, k, n): x [m, k] @ W [k, n], twice
    ("bf16", 2048, 1024, 2816),  # W9
    ("bf16", 512, 1024, 2816),
    ("f32", 1024, 512, 2048),
    ("f16", 4096, 4096, 4096),
]
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def plan(dtype, m, k, n, **extra):
    fields = dict(m=m, n=n, k=k, dtype=dtype, a_row_stride=k, a_col_stride=1, b_row_stride=n, b_col_stride=1,
                  d_row_stride=n)
    fields.update(extra)
    return _C._testing.MatmulPlan(0, WORKSPACE, **fields)


def main():
    workspace = torch.empty(WORKSPACE, dtype=torch.uint8, device="cuda")
    for name, m, k, n in SHAPES:
        t = DTYPES[name]
        x = torch.randn(m, k, dtype=t, device="cuda")
        w1, w2 = torch.randn(k, n, dtype=t, device="cuda"), torch.randn(k, n, dtype=t, device="cuda")
        lo, hi = (w1, w2) if w2.data_ptr() > w1.data_ptr() else (w2, w1)
        distance = (hi.data_ptr() - lo.data_ptr()) // lo.element_size()
        out = torch.empty(2, m, n, dtype=t, device="cuda")
        stream = lambda: torch.cuda.current_stream().cuda_stream
        single = plan(name, m, k, n)
        pair = plan(name, m, k, n, batch=2, a_batch_stride=0, b_batch_stride=distance, d_batch_stride=m * n)
        stacked_w = torch.stack([lo, hi])
        stacked = plan(name, m, k, n, batch=2, a_batch_stride=0, b_batch_stride=k * n, d_batch_stride=m * n)
        cat_w = torch.cat([lo, hi], 1)
        cat_out = torch.empty(m, 2 * n, dtype=t, device="cuda")
        wide = plan(name, m, k, 2 * n, b_row_stride=2 * n, d_row_stride=2 * n)

        def two():
            single.run(x.data_ptr(), lo.data_ptr(), 0, out[0].data_ptr(), 0, workspace.data_ptr(), stream())
            single.run(x.data_ptr(), hi.data_ptr(), 0, out[1].data_ptr(), 0, workspace.data_ptr(), stream())

        def batched():
            pair.run(x.data_ptr(), lo.data_ptr(), 0, out.data_ptr(), 0, workspace.data_ptr(), stream())

        def batched_stacked():
            stacked.run(x.data_ptr(), stacked_w.data_ptr(), 0, out.data_ptr(), 0, workspace.data_ptr(), stream())

        def concatenated():
            wide.run(x.data_ptr(), cat_w.data_ptr(), 0, cat_out.data_ptr(), 0, workspace.data_ptr(), stream())

        def torch_two():
            torch.mm(x, lo)
            torch.mm(x, hi)

        reference = torch.stack([x.double() @ lo.double(), x.double() @ hi.double()])
        rows = []
        for label, fn in [("two calls", two), ("one batched, weights apart", batched),
                          ("one batched, weights stacked", batched_stacked), ("one, weights concatenated", concatenated),
                          ("torch.mm twice", torch_two)]:
            fn()  # tunes the plans (outside capture)
            torch.cuda.synchronize()
            us = graph_us(fn)
            if fn in (two, batched):
                err = ((out.double() - reference).norm() / reference.norm()).item()
                rows.append(f"  {label:32s} {us:8.1f} us  rel err {err:.1e}")
            else:
                rows.append(f"  {label:32s} {us:8.1f} us")
        print(f"{name} x[{m},{k}] @ W[{k},{n}] twice (weights {distance} elements apart); tuning: "
              f"single {single.tuning}; pair {pair.tuning}")
        print("\n".join(rows), flush=True)


if __name__ == "__main__":
    main()
