"""The CUDA backend's lowering and code generation fuzzed on a CPU machine.

The differential fuzzer (`python -m tests.fuzz`) runs CPU programs through the torch runner, which never lowers a
graph. Here each fuzz program's graphs are rehearsed instead (lowered and emitted as for an H100, the CUDA C compiled
to PTX) and every plan without extern steps also runs on the CPU (tests/backend/plan_on_cpu.py: its kernels as
host code, its matrix products with torch); its outputs must equal the torch runner's. So fusion, views, in-place
rebinding, layouts and codegen meet programs nobody wrote a test for, with no GPU.

    python -m tests.fuzz.plans --seed 2 --time-budget 600
    python -m tests.fuzz.plans --seed 2 --only 1234 --verbose      # one program: its source, plans and values

A plan is compared when its outputs pair one to one with the torch runner's tensors (same dtype and shape);
outputs inside containers the observer does not pair are skipped and counted.
"""
import argparse
import dataclasses
import sys
import time
import warnings

import torch

import fastcomp
from fastcomp import _C
from tests.backend import plan_on_cpu
from tests.fuzz.generator import generate

TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-9, torch.float16: 2e-2, torch.bfloat16: 4e-2}
STEPS = 3  # the first calls of the program's first variant: first, the same inputs again, new values


class _Observer(plan_on_cpu.Observer):
    """Keeps each call's values as they were: the torch runner's outputs are the program's own objects, which its
    later code may write in place."""

    def __call__(self, plan_json, inputs, output):
        super().__call__(plan_json, inputs, output)
        plan, why, got, expected = self.runs[-1]
        self.runs[-1] = (plan, why, [g.clone() for g in got] if got else got, [e.clone() for e in expected])


@dataclasses.dataclass
class Report:
    programs: int = 0
    plans_run: int = 0
    unpaired: int = 0
    mismatches: list = dataclasses.field(default_factory=list)  # (index, step, message)
    errors: list = dataclasses.field(default_factory=list)      # (index, message): the harness could not run it


def _computed_in_float32(e):
    """Whether an f64 result holds f32 values cast up (x.var().to(torch.float64)): each value is exactly an f32 one,
    and not all of them are integers (which every dtype holds exactly, and a wrong op may give too)."""
    if e.dtype != torch.float64 or not e.numel():
        return False
    finite = e[e.isfinite()]
    return bool(torch.equal(finite, finite.float().double()) and not torch.equal(finite, finite.round()))


def _mismatch(got, expected):
    for g, e in zip(got, expected):
        # An f64 cast of an f32 value is as close as that f32 value: the plan may sum in another order.
        tol = TOLERANCE[torch.float32] if _computed_in_float32(e) else TOLERANCE.get(e.dtype, 0.0)
        finite = e.double().nan_to_num(0.0, 0.0, 0.0).abs()
        scale = max(1.0, float(finite.max())) if e.is_floating_point() and e.numel() else 1.0
        try:
            torch.testing.assert_close(g, e, rtol=tol, atol=tol * scale, equal_nan=True)
        except AssertionError as err:
            return str(err).strip().splitlines()[0] + " " + " ".join(str(err).split("\n")[1:4])
    return None


def run_program(seed, index, observer, report, verbose=False):
    program = generate(seed, index)
    namespace = {"__name__": "fuzz_plans"}
    exec(compile(program.source(), f"<fuzz seed {seed} program {index}>", "exec"), namespace)
    _, _, steps = program.variants()[0]
    fastcomp.reset()
    fn = fastcomp.compile(namespace["fn"])
    if verbose:
        print(program.source())
    for step in steps[:STEPS]:
        dtypes = {k: getattr(torch, v) for k, v in step.get("dtypes", {}).items()}
        args, _ = namespace["make_inputs"](step["sizes"], step["seed"], dtypes, False)
        observer.runs.clear()
        try:
            with torch.no_grad():
                fn(*args)
        except Exception:  # noqa: BLE001 - the program's own error; the plans that ran before it still count
            pass
        for plan, why, got, expected in observer.runs:
            if why:
                continue
            if len(got) != len(expected) or any(g.dtype != e.dtype or g.shape != e.shape for g, e in zip(got, expected)):
                report.unpaired += 1
                continue
            report.plans_run += 1
            message = _mismatch(got, expected)
            if verbose:
                print(f"step {step['name']!r}: {'MISMATCH ' + message if message else 'equal'}")
            if message:
                report.mismatches.append((index, step["name"], message))


def run(seed, start=0, count=None, time_budget=None, only=None, verbose=False, log=print):
    """Rehearses programs (seed, start...) until `count` or `time_budget` seconds, or those of `only`."""
    _C.set_rehearse_cuda_backend(True)
    observer = _Observer()
    _C.set_rehearsal_observer(observer)
    config = fastcomp.config.background_compile
    fastcomp.config.background_compile = False  # the first call runs the plan, not torch meanwhile
    report, began = Report(), time.perf_counter()
    indices = iter(only) if only is not None else iter(range(start, sys.maxsize))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for index in indices:
                if (count is not None and report.programs >= count) or \
                        (time_budget is not None and time.perf_counter() - began > time_budget):
                    break
                report.programs += 1
                try:
                    run_program(seed, index, observer, report, verbose)
                except Exception as err:  # noqa: BLE001 - the generator or the harness, not fastcomp's plans
                    report.errors.append((index, f"{type(err).__name__}: {str(err)[:200]}"))
                for mismatch in report.mismatches[-1:]:
                    if mismatch[0] == index:
                        log(f"seed {seed} program {index}, step {mismatch[1]!r}: {mismatch[2]}")
    finally:
        _C.set_rehearsal_observer(None)
        _C.set_rehearse_cuda_backend(False)
        fastcomp.config.background_compile = config
    return report


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz.plans", description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start", type=int, default=0, help="index of the first program")
    ap.add_argument("--count", type=int, default=None)
    ap.add_argument("--time-budget", type=float, default=None, help="seconds")
    ap.add_argument("--only", default=None, help="comma-separated program indices")
    ap.add_argument("--verbose", action="store_true", help="print each program and each plan's verdict")
    args = ap.parse_args(argv)
    if args.count is None and args.time_budget is None and args.only is None:
        ap.error("give --count, --time-budget or --only")
    only = [int(i) for i in args.only.split(",")] if args.only else None
    r = run(args.seed, args.start, args.count, args.time_budget, only, args.verbose)
    print(f"{r.programs} programs of seed {args.seed}: {r.plans_run} plans run on the CPU and compared, "
          f"{r.unpaired} not paired, {len(r.mismatches)} mismatches, {len(r.errors)} programs the harness could not run")
    return 1 if r.mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
