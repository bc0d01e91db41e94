"""Where a cold compile's time goes, per seed workload: trace (fastcomp's own compile record), NVRTC, loading
and cuBLASLt planning (from the `compile` debug log), and the wall time until the kernels run. Each workload
runs in a fresh kernel-cache folder. Usage on a GPU machine: python scripts/compile_breakdown.py [W1 W4 ...]

With --cpu (no GPU needed) each workload runs in a fresh process with the CUDA backend in rehearsal (CPU tensors
lowered and emitted as for an H100/H200, full size, the workload's dtype) and the line splits what the GPU's
cold start does: trace (fastcomp's compile record less the rehearsal's own NVRTC work), loading NVRTC, and
compiling the graph's program to an sm_90 cubin, as the background thread does (timed as the second compile of
the process, which skips NVRTC's first-use setup of a few ms).

With --zoo MODEL:BATCH ... (GPU) each library model of benchmarks.models (f32) runs in a fresh process and
kernel-cache folder, and prints its trace time, the first call, when the kernels were ready, and each NVRTC
program's compile time as the `compile` log gives it (the graph's programs compile side by side: the last one
bounds the cold start).

With --warm (GPU) each workload runs in two fresh processes sharing one kernel-cache folder, as the benchmark's
cold and warm starts do, and each prints its import time, its first call (compile() + trace + the call, which
runs the kernels if they and cuBLASLt's plans were ready, else goes through torch), the time until the kernels
run, and the `compile` log's lines on loading and planning.
"""
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def nvrtc_ms(lines):
    return sum(float(m) for line in lines for m in re.findall(r"nvrtc .* in ([\d.]+) ms", line))


def log_lines():
    import fastcomp

    lines = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    logging.getLogger("fastcomp").addHandler(handler)
    fastcomp.set_logs(compile=logging.DEBUG)
    return lines


def gpu(wids):
    os.environ["FASTCOMP_CACHE_DIR"] = tempfile.mkdtemp()
    import torch

    import fastcomp
    from benchmarks.workloads import WORKLOADS
    from fastcomp.testing import CompileCounter

    lines = log_lines()
    for wid in wids:
        model, make_inputs = WORKLOADS[wid].make("cuda", 1.0)
        args = make_inputs()
        lines.clear()
        with torch.no_grad(), CompileCounter() as cc:
            model(*args)
            torch.cuda.synchronize()
            start = time.perf_counter()
            compiled = fastcomp.compile(model)
            compiled(*args)
            torch.cuda.synchronize()
            first = time.perf_counter() - start
            fastcomp.wait_for_compiles()
            compiled(*args)  # the call that loads the kernels and plans the cuBLASLt calls
            torch.cuda.synchronize()
            ready = time.perf_counter() - start
        load = [line for line in lines if line.startswith("cuda executable")]
        print(f"{wid}: first call {first * 1e3:.1f} ms, ready {ready * 1e3:.1f} ms, trace "
              f"{cc.records[0]['compile_time_s'] * 1e3:.1f} ms, nvrtc {nvrtc_ms(lines):.1f} ms; "
              f"{cc.records[0]['backend']}; {load[0] if load else 'not loaded yet'}")
        fastcomp.reset()


def warm_one(wid):
    """One start of `wid` in this process (the caller sets FASTCOMP_CACHE_DIR); prints what it cost."""
    start = time.perf_counter()
    import torch

    import fastcomp
    from benchmarks.workloads import WORKLOADS

    imported = time.perf_counter() - start
    lines = log_lines()
    model, make_inputs = WORKLOADS[wid].make("cuda", 1.0)
    args = make_inputs()
    with torch.no_grad():
        model(*args)  # torch's own first-use costs (cuBLAS handles, allocator) are not fastcomp's
        torch.cuda.synchronize()
        start = time.perf_counter()
        compiled = fastcomp.compile(model)
        compiled(*args)
        torch.cuda.synchronize()
        first = time.perf_counter() - start
        loaded_at_first_call = any(line.startswith("cuda executable") for line in lines)
        fastcomp.wait_for_compiles()
        compiled(*args)  # the kernels and cuBLASLt plans, if the first call ran through torch meanwhile
        torch.cuda.synchronize()
        ready = time.perf_counter() - start
    load = [line for line in lines if line.startswith("cuda executable")]
    print(f"  import {imported * 1e3:.0f} ms, first call {first * 1e3:.1f} ms "
          f"({'kernels' if loaded_at_first_call else 'through torch'}), ready {ready * 1e3:.1f} ms; "
          f"{load[0] if load else 'not loaded'}")
    for line in lines:
        if line.startswith(("cuBLASLt", "nvrtc", "planned")):
            print("    " + line)


def warm(wids):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]),
               FASTCOMP_CACHE_DIR=tempfile.mkdtemp())
    for wid in wids:
        for start in ("cold", "warm"):
            run = subprocess.run([sys.executable, __file__, "--warm-one", wid], capture_output=True, text=True,
                                 env=env)
            print(f"{wid} {start}:" + (run.stdout.rstrip() if not run.returncode else f" failed\n{run.stderr}"))


def zoo_one(spec):
    """One library model `name:batch` in this (fresh) process; prints where its cold start went."""
    name, batch = spec.split(":")
    import torch

    import fastcomp
    from benchmarks import models
    from fastcomp.testing import CompileCounter

    stamped = []
    handler = logging.Handler()
    handler.emit = lambda record: stamped.append((time.perf_counter(), record.getMessage()))
    logging.getLogger("fastcomp").addHandler(handler)
    fastcomp.set_logs(compile=logging.DEBUG)
    model, kwargs = models.prepare(name, int(batch), torch.float32, "cuda")
    with torch.no_grad():
        model(**kwargs)  # torch's own first-use costs are not fastcomp's
        torch.cuda.synchronize()
        start = time.perf_counter()
        with CompileCounter() as cc:
            compiled = fastcomp.compile(model)
            compiled(**kwargs)
            torch.cuda.synchronize()
            first = time.perf_counter() - start
            fastcomp.wait_for_compiles()
            torch.cuda.synchronize()
            ready = time.perf_counter() - start
    trace = sum(r["compile_time_s"] for r in cc.records) * 1e3
    print(f"{spec}: trace {trace:.0f} ms, first call {first * 1e3:.0f} ms, kernels ready {ready * 1e3:.0f} ms")
    for at, line in stamped:
        if line.startswith(("nvrtc", "planned", "cuda executable")):
            print(f"  +{(at - start) * 1e3:5.0f} ms  {line[:160]}")


def zoo(specs):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    for spec in specs:
        env["FASTCOMP_CACHE_DIR"] = tempfile.mkdtemp()
        run = subprocess.run([sys.executable, __file__, "--zoo-one", spec], capture_output=True, text=True, env=env)
        print(run.stdout.rstrip() if not run.returncode else f"{spec}: failed\n{run.stderr[-2000:]}", flush=True)


def cpu_one(wid):
    """One workload in this (fresh) process; prints a JSON line."""
    import torch

    import fastcomp
    from benchmarks.workloads import WORKLOADS
    from fastcomp import _C
    from fastcomp.testing import CompileCounter

    lines = log_lines()
    model, make_inputs = WORKLOADS[wid].make("cpu", 1.0)
    args = make_inputs()
    start = time.perf_counter()
    _C._testing.nvrtc_version()  # loads NVRTC, which the first call would otherwise do inside the trace
    load = time.perf_counter() - start
    _C.set_rehearse_cuda_backend(True)
    with torch.no_grad(), CompileCounter() as cc:
        fastcomp.compile(model)(*args)
    records = [r for r in cc.records if r.get("cuda_source")]
    out = {"wid": wid, "load_ms": load * 1e3, "graphs": len(records)}
    if records:
        source = records[0]["cuda_source"]
        out["trace_ms"] = sum(r["compile_time_s"] for r in cc.records) * 1e3 - nvrtc_ms(lines)
        start = time.perf_counter()
        _C._testing.nvrtc_compile(source, "fastcomp_graph", 9, 0, "cubin")
        out["cubin_ms"] = (time.perf_counter() - start) * 1e3
        out["plan"] = records[0]["backend"]
    print(json.dumps(out))


def cpu(wids):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    for wid in wids:
        run = subprocess.run([sys.executable, __file__, "--cpu-one", wid], capture_output=True, text=True, env=env)
        if run.returncode:
            print(f"{wid}: failed\n{run.stderr}")
            continue
        r = json.loads(run.stdout.strip().splitlines()[-1])
        if not r["graphs"]:
            print(f"{wid}: no graph with kernels")
            continue
        total = r["trace_ms"] + r["load_ms"] + r["cubin_ms"]
        print(f"{wid}: trace {r['trace_ms']:.1f} ms, NVRTC load {r['load_ms']:.1f} ms, sm_90 cubin "
              f"{r['cubin_ms']:.1f} ms; sum {total:.0f} ms; {r['plan']}")


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    if sys.argv[1:2] in (["--cpu-one"], ["--warm-one"], ["--zoo-one"]):
        {"--cpu-one": cpu_one, "--warm-one": warm_one, "--zoo-one": zoo_one}[sys.argv[1]](sys.argv[2])
    elif sys.argv[1:2] == ["--zoo"]:
        zoo(sys.argv[2:])
    else:
        from benchmarks.workloads import WORKLOADS

        mode = sys.argv[1] if sys.argv[1:2] in (["--cpu"], ["--warm"]) else ""
        wids = sys.argv[1 + bool(mode):] or sorted(WORKLOADS)
        {"--cpu": cpu, "--warm": warm, "": gpu}[mode](wids)
