"""Where a cold compile's time goes, per seed workload: trace (fastcomp's own compile record), NVRTC, loading
and cuBLASLt planning (from the `compile` debug log), and the wall time until the kernels run. Each workload
runs in a fresh kernel-cache folder. Usage on a GPU machine: python scripts/compile_breakdown.py [W1 W4 ...]"""
import logging
import os
import re
import sys
import tempfile
import time

os.environ["FASTCOMP_CACHE_DIR"] = tempfile.mkdtemp()
import torch  # noqa: E402

import fastcomp  # noqa: E402
from benchmarks.workloads import WORKLOADS  # noqa: E402
from fastcomp.testing import CompileCounter  # noqa: E402

lines = []
handler = logging.Handler()
handler.emit = lambda record: lines.append(record.getMessage())
logging.getLogger("fastcomp").addHandler(handler)
fastcomp.set_logs(compile=logging.DEBUG)

for wid in sys.argv[1:] or sorted(WORKLOADS):
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
    nvrtc = sum(float(m) for line in lines for m in re.findall(r"nvrtc .* in ([\d.]+) ms", line))
    load = [line for line in lines if line.startswith("cuda executable")]
    print(f"{wid}: first call {first * 1e3:.1f} ms, ready {ready * 1e3:.1f} ms, trace "
          f"{cc.records[0]['compile_time_s'] * 1e3:.1f} ms, nvrtc {nvrtc:.1f} ms; {cc.records[0]['backend']}; "
          f"{load[0] if load else 'not loaded yet'}")
    fastcomp.reset()
