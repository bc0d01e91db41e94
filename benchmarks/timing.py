"""Clocks: a synchronized first call, steady-state µs/call, and single-call latency.

µs/call follows ANCHORS.md: a loop of back-to-back calls followed by one synchronize, so host and device
overlap and the slower of the two sets the rate. Calls rotate through several input sets so that no cache
keeps a result warm, warm-up calls are excluded, and the median over repeats is reported. Garbage collection
is off inside timed regions (as in `timeit`).
"""
from __future__ import annotations

import gc
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Sequence

import torch


@dataclass(frozen=True)
class Effort:
    """How long to measure; `--quick` and `--repeats` choose one."""
    repeats: int  # timed loops for µs/call; the median is reported
    seconds_per_repeat: float  # each loop runs about this long
    warmup_seconds: float
    min_warmup_calls: int
    latency_samples: int


MAX_CALLS_PER_REPEAT = 100_000
FULL = Effort(repeats=10, seconds_per_repeat=0.05, warmup_seconds=0.2, min_warmup_calls=20, latency_samples=100)
QUICK = Effort(repeats=3, seconds_per_repeat=0.005, warmup_seconds=0.01, min_warmup_calls=3, latency_samples=10)


def synchronizer(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None  # CPU ops return when done


@contextmanager
def gc_paused():
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def time_one_call(fn: Callable, args: tuple, sync: Callable[[], None]) -> float:
    """Seconds from the call until its work is done on the device.

    The result is dropped at once: a CUDA-graph runner (reduce-overhead) treats outputs still alive at the next
    call differently, and no timed loop here keeps one.
    """
    sync()
    start = time.perf_counter()
    fn(*args)
    sync()
    return time.perf_counter() - start


def warm_up(fn: Callable, input_sets: Sequence[tuple], sync: Callable[[], None], effort: Effort) -> int:
    """Calls fn until both the minimum count and the minimum time are reached; returns the number of calls."""
    calls, deadline = 0, time.perf_counter() + effort.warmup_seconds
    while calls < effort.min_warmup_calls or time.perf_counter() < deadline:
        fn(*input_sets[calls % len(input_sets)])
        calls += 1
    sync()
    return calls


def _timed_loop(fn: Callable, schedule: Sequence[tuple], sync: Callable[[], None]) -> float:
    sync()
    start = time.perf_counter()
    for args in schedule:
        fn(*args)
    sync()
    return time.perf_counter() - start


def microseconds_per_call(fn: Callable, input_sets: Sequence[tuple], sync: Callable[[], None],
                          effort: Effort) -> dict:
    """Back-to-back calls, one synchronize at the end; median over repeats. fn must already be warm.

    The loop length is found as timeit's autorange does: double the calls until a loop takes a quarter of
    `seconds_per_repeat`, then scale, so one slow call cannot shrink the loop to a few calls.
    """
    k = len(input_sets)
    schedule = lambda n: [input_sets[i % k] for i in range(n)]  # noqa: E731
    n = k
    with gc_paused():
        elapsed = _timed_loop(fn, schedule(n), sync)
        while elapsed < effort.seconds_per_repeat / 4 and n < MAX_CALLS_PER_REPEAT:
            n *= 2
            elapsed = _timed_loop(fn, schedule(n), sync)
        n = max(k, min(MAX_CALLS_PER_REPEAT, round(n * effort.seconds_per_repeat / max(elapsed, 1e-9))))
        n -= n % k
        calls = schedule(n)
        samples = [_timed_loop(fn, calls, sync) / n * 1e6 for _ in range(effort.repeats)]
    return {"us_per_call": statistics.median(samples), "samples_us": samples, "calls_per_repeat": n,
            "input_sets": k}


def single_call_latency(fn: Callable, input_sets: Sequence[tuple], device: torch.device,
                        sync: Callable[[], None], effort: Effort) -> dict:
    """One call on an idle device, timed with CUDA events on a GPU and perf_counter on the CPU."""
    samples = []
    with gc_paused():
        for i in range(effort.latency_samples):
            args = input_sets[i % len(input_sets)]
            sync()
            if device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn(*args)
                end.record()
                end.synchronize()
                samples.append(start.elapsed_time(end) * 1e3)
            else:
                start_s = time.perf_counter()
                fn(*args)
                samples.append((time.perf_counter() - start_s) * 1e6)
    return {"median_us": statistics.median(samples), "min_us": min(samples), "samples": len(samples),
            "clock": "cuda_event" if device.type == "cuda" else "perf_counter"}
