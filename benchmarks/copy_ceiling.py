"""The bandwidth ceiling memory-bound workloads are judged against: a device-to-device copy.

Counts bytes read plus bytes written, like ANCHORS.md's 4.2 TB/s on an H200. The buffer is far larger than
any cache, holds random data, and is timed with the same µs/call loop as the workloads.
"""
from __future__ import annotations

import torch

from benchmarks import timing

COPY_BYTES = {"cuda": 256 * 2**20, "cpu": 64 * 2**20}


def measure(device: torch.device, effort: timing.Effort) -> dict:
    n_bytes = COPY_BYTES.get(device.type, COPY_BYTES["cpu"])
    src = torch.randn(n_bytes // 4, device=device)
    dst = torch.empty_like(src)
    sync = timing.synchronizer(device)
    copy = lambda out, inp: out.copy_(inp)  # noqa: E731
    timing.warm_up(copy, [(dst, src)], sync, effort)
    steady = timing.microseconds_per_call(copy, [(dst, src)], sync, effort)
    moved = 2 * n_bytes
    return {"bytes_per_copy": moved, "us_per_copy": steady["us_per_call"],
            "gb_per_s": moved / steady["us_per_call"] / 1e3, "samples_us": steady["samples_us"]}
