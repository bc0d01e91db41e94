"""Measures one (case, mode, phase) inside the current process; `child.py` runs it in a fresh one.

Order of events, each step under `torch.no_grad()`:
1. import the compiler (Dynamo or fastcomp), timed;
2. build the model and its input sets (random, on the device) and a float64 twin for correctness;
3. one eager call, so the device context, math libraries and allocator start before the compile clock does;
4. compile = the import + the wrapper call (`torch.compile(fn)`) + the first call, synchronized: with an
   empty cache the cold compile time, in a warm-phase process the warm one (which stops here). `ready` adds
   the wait for work the compiler left running in the background (fastcomp compiles kernels on a thread and
   runs the first calls through torch meanwhile): the time until calls run the compiled code. Beside it,
   the compiler's own account of that first compile (`first_compile`: graphs, breaks and the "trace" time it
   reports, see modes.py) and the heavy modules the first call imported (a compiler that pulls in Dynamo or
   sympy on its first compile pays seconds for it);
5. the remaining input sets once (compiling further cache entries for the overhead cases), and the wait until
   their compiled code is ready too;
6. warm-up, then µs/call and single-call latency;
7. correctness on fresh inputs against float64 eager, the bytes a fused pass must move, and the graphs and
   graph breaks the compiler counted over the whole process;
8. in the `cpu` section only, a re-trace: the compiler's `reset()`, then compile and first call again in the
   same process, which separates the per-graph trace cost from one-time start-up costs.
Any exception is recorded with the step it happened in; the numbers gathered before it are kept.
"""
from __future__ import annotations

import importlib
import sys
import time
import traceback

import torch

from benchmarks import accuracy, timing
from benchmarks.modes import MODES, Mode
from benchmarks.overhead_cases import OVERHEAD_CASES
from benchmarks.workloads import WORKLOADS, minimal_bytes_moved

WORKLOAD_INPUT_SETS = 4  # 4 × 64 MiB for W2/W3/W8: more than any L2 cache, so no call finds its input there
# Modules that cost a compiler seconds to import; named in the result when its first call imports them.
HEAVY_MODULES = ("torch._dynamo", "torch._inductor", "torch.fx.experimental.symbolic_shapes", "sympy", "triton")


def build(spec: dict, mode: Mode, device: torch.device):
    """(model, make_input_sets, dynamic) for the spec's case."""
    if spec["section"] == "overhead" or spec["case"] in OVERHEAD_CASES:
        case = OVERHEAD_CASES[spec["case"]]
        model, make_input_sets = case.make(device, mode.disable)
        return model, make_input_sets, case.dynamic
    model, make_inputs = WORKLOADS[spec["case"]].make(device, spec["scale"])
    return model, lambda: [make_inputs() for _ in range(WORKLOAD_INPUT_SETS)], None


def imported_since(modules_before: set) -> dict:
    new = set(sys.modules) - modules_before
    return {"modules": len(new), "heavy": [m for m in HEAVY_MODULES if m in new]}


def measure(spec: dict) -> dict:
    result: dict = {"phase": spec["phase"], "status": "ok"}
    step = "import compiler"
    stats = None
    try:
        device, mode = torch.device(spec["device"]), MODES[spec["mode"]]
        start = time.perf_counter()
        if mode.compiler_module:
            importlib.import_module(mode.compiler_module)
        result["import_s"] = time.perf_counter() - start
        step = "start compile counters"
        stats = mode.start_stats()

        step = "build"
        torch.manual_seed(spec.get("seed", 0))
        effort = timing.Effort(**spec["effort"])
        sync = timing.synchronizer(device)
        with torch.no_grad():
            model, make_input_sets, dynamic = build(spec, mode, device)
            reference = accuracy.float64_model(model)
            input_sets = make_input_sets()

            step = "eager warm-up"
            timing.time_one_call(model, input_sets[0], sync)

            step = "compile"
            modules_before = set(sys.modules)
            start = time.perf_counter()
            compiled = mode.compile(model, dynamic=dynamic)
            result["wrap_s"] = time.perf_counter() - start
            step = "first call"
            result["first_call_s"] = timing.time_one_call(compiled, input_sets[0], sync)
            result["compile_s"] = result["import_s"] + result["wrap_s"] + result["first_call_s"]
            result["imported_by_first_call"] = imported_since(modules_before)
            result["first_compile"] = stats.snapshot()
            result["trace_s"] = (result["first_compile"] or {}).get("trace_s")
            step = "ready"
            start = time.perf_counter()
            mode.wait_ready()  # kernels compiling in the background: the first call ran without them
            result["ready_s"] = result["compile_s"] + time.perf_counter() - start
            if spec["phase"] == "warm":
                result["graph_counts"] = result["first_compile"]
                return result

            step = "other input sets"
            start = time.perf_counter()
            for args in input_sets[1:]:
                compiled(*args)
            sync()
            result["other_sets_first_pass_s"] = time.perf_counter() - start
            mode.wait_ready()  # the other sets' cache entries (overhead cases) compile kernels in the background too
            result["other_sets_ready_s"] = time.perf_counter() - start

            step = "warm-up"
            result["warmup_calls"] = timing.warm_up(compiled, input_sets, sync, effort)
            step = "µs/call"
            result["steady"] = timing.microseconds_per_call(compiled, input_sets, sync, effort)
            step = "latency"
            result["latency"] = timing.single_call_latency(compiled, input_sets, device, sync, effort)

            step = "correctness"
            fresh = make_input_sets()[0]
            out = compiled(*fresh)
            out = out.clone() if isinstance(out, torch.Tensor) else out  # CUDA-graph outputs get overwritten
            eager_out = model(*fresh)
            result["accuracy"] = accuracy.compare(out, eager_out, reference(*accuracy.to_float64(fresh)))
            result["bytes_moved"] = minimal_bytes_moved(model, fresh, eager_out)
            result["graph_counts"] = stats.snapshot()  # every compile of the process: a recompile shows here

            if spec["section"] == "cpu" and mode.compiler_module:
                step = "re-trace"
                result["retrace"] = retrace(mode, model, dynamic, input_sets[0], stats, sync)
    except Exception as error:  # a failing mode is data, not a crash
        result.update(status="failed", step=step, error=f"{type(error).__name__}: {error}",
                      traceback=traceback.format_exc()[-4000:])
    finally:
        if stats is not None:
            stats.close()
    return result


def retrace(mode: Mode, model, dynamic, args: tuple, stats, sync) -> dict:
    """Compile and first call again after the compiler's reset(), in this warmed-up process."""
    mode.reset()  # first: torch._dynamo.reset() also clears Dynamo's timers
    before = (stats.snapshot() or {}).get("trace_s") or 0.0
    start = time.perf_counter()
    compiled = mode.compile(model, dynamic=dynamic)
    wrap_s = time.perf_counter() - start
    first_call_s = timing.time_one_call(compiled, args, sync)
    after = (stats.snapshot() or {}).get("trace_s")
    return {"compile_s": wrap_s + first_call_s, "first_call_s": first_call_s,
            "trace_s": after - before if after is not None else None}
