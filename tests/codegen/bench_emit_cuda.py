"""Bandwidth of emitted kernels against a device-to-device copy on the same GPU (ANCHORS.md: fused
memory-bound kernels should reach >= 85% of the copy rate). Not a test; run on a GPU machine:
    PYTHONPATH=python:tests/codegen python3 tests/codegen/bench_emit_cuda.py"""
import os
import tempfile

import cupy
import torch

from fastcomp._C import _testing as T

import codegen_gpu as G
import codegen_specs as S
import nvrtc_ctypes


def time_ms(fn, reps=50):
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def kernel_runner(spec):
    nvrtc, why = nvrtc_ctypes.find()
    assert nvrtc, why
    _, grid, block, shared = T.emit_kernel(spec, torch.cuda.get_device_properties(0).multi_processor_count)
    ok, log, ptx = nvrtc.compile(T.emit_program([spec]))
    assert ok, log
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        kernel = cupy.RawModule(path=path).get_function(spec["name"])
    inputs = G.random_inputs(spec)
    outputs = [torch.empty(G.storage_elements(spec["shape"], o["strides"], o["offset"]), device="cuda",
                           dtype=G.TORCH_DTYPES[o["dtype"]]) for o in spec["outputs"]]
    args = tuple(cupy.uint64(t.data_ptr()) for t in inputs + outputs)
    moved = sum(t.numel() * t.element_size() for t in inputs + outputs)
    return (lambda: kernel((grid,), (block,), args, shared_mem=shared)), moved, (grid, block)


def main():
    src = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy_ms = time_ms(lambda: dst.copy_(src))
    copy_rate = 2 * src.numel() / copy_ms / 1e9
    print(f"{torch.cuda.get_device_name()}: copy {copy_rate:.2f} TB/s (256 MiB)")
    for spec in [S.w2_tiny_ops(), S.w3_softmax(), S.stable_softmax(), S.w8_rmsnorm(), S.layer_norm(),
                 S.layer_norm(rows=16384, n=4096, in_dtype="f32", out_dtype="f32", name="layer_norm_4096"),
                 S.w3_softmax(rows=512, n=32768, name="softmax_streamed"), S.bias_add(),
                 S.bias_add(dtype="f16", name="bias_add_f16"),
                 S.unary("exp", "bf16", shape=(1 << 26,), name="exp_bf16_64m")]:
        run, moved, launch = kernel_runner(spec)
        ms = time_ms(run)
        rate = moved / ms / 1e9
        print(f"{spec['name']:>16} grid,block={launch}: {ms * 1e3:8.1f} us  {rate:.2f} TB/s  "
              f"{100 * rate / copy_rate:5.1f}% of copy")


    x = torch.randn(4096, 4096, device="cuda")
    print(f"{'eager softmax':>16}: {time_ms(lambda: torch.softmax(x, -1)) * 1e3:8.1f} us")
    x, w = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16), torch.randn(4096, device="cuda")
    eager_rms = lambda: (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w).to(x.dtype)
    print(f"{'eager W8 rmsnorm':>16}: {time_ms(eager_rms) * 1e3:8.1f} us")


if __name__ == "__main__":
    main()
