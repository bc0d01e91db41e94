"""NVRTC cold-compile time of the seed workloads' programs, measured on the CPU (no GPU or driver needed).

Each workload W1-W9 (benchmarks/workloads.py, full size, its own dtype) is traced on CPU tensors with the CUDA
backend in rehearsal: lowered and emitted as for an H100/H200, so its program is the CUDA C a GPU run compiles.
That program is compiled to an sm_90 cubin with fastcomp's own NVRTC options, each compile in a fresh process
(a cold start pays the first compile of a process), in rounds that visit every workload and variant in turn so
that changing machine load hits them alike. Printed per workload: median and min over the rounds of the wall
time of nvrtcCompileProgram, and the median CPU time it took, of all threads (--split-compile adds threads).

    PYTHONPATH=python python scripts/nvrtc_compile_time.py                 # this build, W1-W9, 7 rounds
    PYTHONPATH=python python scripts/nvrtc_compile_time.py --save DIR      # ... and keep programs + options
    PYTHONPATH=python python scripts/nvrtc_compile_time.py --compare DIR   # ... against a kept set (older build)
    PYTHONPATH=python python scripts/nvrtc_compile_time.py --variant="-Ofc=min" W7   # note the =
    PYTHONPATH=python python scripts/nvrtc_compile_time.py --without=--split-compile  # this build less an option
    PYTHONPATH=python python scripts/nvrtc_compile_time.py --phases 5      # front end / NVVM / ptxas split
    PYTHONPATH=python python scripts/nvrtc_compile_time.py --code --rounds 0 --without=--split-compile

--variant OPTIONS times this build's programs again with OPTIONS added, --without PREFIX with the options that
start with PREFIX removed (both repeatable). --phases N compiles each program N more times with NVRTC's
--fdevice-time-trace and prints the median time of each phase. --code compares every other set's cubins with
this build's: the same bytes, the same machine code (.text sections) with other notes, or which kernels differ."""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child(nvrtc_path, source_path, options, trace, cubin_path):
    """Runs in a fresh process: one compile, prints {wall_ms, cpu_ms, bytes} or {error}; writes the cubin to
    `cubin_path` when it is not empty."""
    folder = os.path.dirname(nvrtc_path)
    for name in sorted(os.listdir(folder)):  # NVRTC opens its builtins by soname; load them from its folder
        if name.startswith("libnvrtc-builtins.so.") and ".alt." not in name:
            ctypes.CDLL(os.path.join(folder, name), mode=ctypes.RTLD_GLOBAL)
    nvrtc = ctypes.CDLL(nvrtc_path)
    if trace:
        options = options + ["--fdevice-time-trace=" + trace]
    program = ctypes.c_void_p()
    with open(source_path, "rb") as f:
        source = f.read()
    assert nvrtc.nvrtcCreateProgram(ctypes.byref(program), source, b"fastcomp_graph", 0, None, None) == 0
    argv = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
    wall, cpu = time.perf_counter(), time.process_time()
    result = nvrtc.nvrtcCompileProgram(program, len(options), argv)
    wall, cpu = (time.perf_counter() - wall) * 1e3, (time.process_time() - cpu) * 1e3
    size = ctypes.c_size_t()
    if result != 0:
        nvrtc.nvrtcGetProgramLogSize(program, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        nvrtc.nvrtcGetProgramLog(program, log)
        print(json.dumps({"error": log.value.decode(errors="replace")}))
        return
    nvrtc.nvrtcGetCUBINSize(program, ctypes.byref(size))
    if cubin_path:
        cubin = ctypes.create_string_buffer(size.value)
        nvrtc.nvrtcGetCUBIN(program, cubin)
        with open(cubin_path, "wb") as f:
            f.write(cubin.raw)
    print(json.dumps({"wall_ms": wall, "cpu_ms": cpu, "bytes": size.value}))


def emit_programs(wids, folder):
    """Writes <W>.cu and <W>.options (fastcomp's NVRTC options for an sm_90 cubin, one a line) for each
    workload; returns the ones that have a program."""
    import torch

    import fastcomp
    from fastcomp import _C
    from fastcomp.testing import CompileCounter

    sys.path.insert(0, ROOT)
    from benchmarks.workloads import WORKLOADS

    _C.set_rehearse_cuda_backend(True)
    done = []
    for wid in wids:
        model, make_inputs = WORKLOADS[wid].make("cpu", 1.0)
        with CompileCounter() as cc, torch.no_grad():
            fastcomp.compile(model)(*make_inputs())
        fastcomp.reset()
        programs = [r["cuda_source"] for r in cc.records if r.get("cuda_source")]
        if len(programs) != 1:
            print(f"{wid}: {len(programs)} programs (expected one graph with kernels); skipped", file=sys.stderr)
            continue
        options = _C._testing.nvrtc_options(programs[0], 9, 0, "cubin")
        with open(os.path.join(folder, wid + ".cu"), "w") as f:
            f.write(programs[0])
        with open(os.path.join(folder, wid + ".options"), "w") as f:
            f.write("\n".join(options) + "\n")
        done.append(wid)
    _C.set_rehearse_cuda_backend(False)
    return done


def nvrtc_library():
    from fastcomp import _C

    for status in _C._testing.cuda_libraries_status():
        if status["name"] == "NVRTC":
            if not status["path"]:
                sys.exit("NVRTC not found: " + status["error"])
            return status["path"]


def compile_once(nvrtc_path, source, options, trace="", cubin_path=""):
    out = subprocess.run([sys.executable, __file__, "--child", nvrtc_path, source, json.dumps(options), trace,
                          cubin_path], capture_output=True, text=True)
    lines = out.stdout.strip().splitlines()
    if not lines:
        sys.exit(f"compile of {source} crashed:\n{out.stderr}")
    result = json.loads(lines[-1])
    if "error" in result:
        sys.exit(f"NVRTC rejected {source} with {' '.join(options)}:\n{result['error']}")
    return result


def read_options(folder, wid):
    with open(os.path.join(folder, wid + ".options")) as f:
        return [line for line in f.read().splitlines() if line]


def options_of(folder, wid, change):
    """The kept options of `wid`, less those starting with a prefix in change["drop"], plus change["add"]."""
    kept = [o for o in read_options(folder, wid) if not any(o.startswith(p) for p in change["drop"])]
    return kept + change["add"]


def compare_code(reference, other):
    """How cubin `other` differs from `reference`, in words."""
    if reference == other:
        return "identical"
    from fastcomp.testing import elf_sections

    a, b = elf_sections(reference), elf_sections(other)
    differ = sorted(name[len(".text."):] for name in set(a) | set(b)
                    if name.startswith(".text.") and a.get(name) != b.get(name))
    if differ:
        return "code differs: " + ", ".join(differ)
    return "same code (differs in " + ", ".join(sorted(n for n in set(a) | set(b) if a.get(n) != b.get(n))) + ")"


def phases(trace_file):
    """(front end, of it headers, NVVM, ptxas) ms from an NVRTC time trace."""
    with open(trace_file) as f:
        data = json.load(f)
    events = [e for e in (data["traceEvents"] if isinstance(data, dict) else data) if e.get("ph") == "X"]

    def total(name):
        return sum(e["dur"] for e in events if e["name"] == name) / 1e3

    # Header events nest (cuda_bf16.h opens cuda_fp16.h): count only the outermost.
    headers = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["name"] == "Processing Header File")
    outer, end = 0.0, -1
    for start, stop in headers:
        if start >= end:
            outer += stop - start
            end = stop
    return total("CUDA C++ Front-End"), outer / 1e3, total("LibNVVM"), total("Total PTXAS Time")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), sys.argv[5], sys.argv[6])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="*", default=[f"W{i}" for i in range(1, 10)])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--save", help="keep this build's programs and options in this folder")
    parser.add_argument("--compare", action="append", default=[], help="a folder written by --save")
    parser.add_argument("--variant", action="append", default=[], help="extra NVRTC options to time as well")
    parser.add_argument("--without", action="append", default=[], metavar="PREFIX",
                        help="time this build's options less those starting with PREFIX as well")
    parser.add_argument("--code", action="store_true", help="compare the other sets' cubins with this build's")
    parser.add_argument("--phases", type=int, default=0, metavar="N",
                        help="also print front end / NVVM / ptxas per program, median of N traced compiles")
    args = parser.parse_args()

    nvrtc_path = nvrtc_library()
    folder = args.save or tempfile.mkdtemp(prefix="fastcomp-nvrtc-")
    os.makedirs(folder, exist_ok=True)
    wids = emit_programs(args.workloads, folder)
    if args.save:
        print(f"programs and options kept in {folder}")
    # (label, folder, option change); the first is the reference the others are compared with.
    def option_change(add=(), drop=()):
        return {"add": list(add), "drop": list(drop)}

    sets = [(os.path.basename(os.path.normpath(d)), d, option_change()) for d in args.compare]
    sets.append(("this build", folder, option_change()))
    sets += [(v, folder, option_change(add=v.split())) for v in args.variant]
    sets += [("without " + p, folder, option_change(drop=[p])) for p in args.without]

    if args.code:
        print("machine code against this build's (sm_90 cubins):")
        for wid in wids:
            cubins = {}
            for label, d, change in sets:
                path = os.path.join(tempfile.mkdtemp(), "out.cubin")
                compile_once(nvrtc_path, os.path.join(d, wid + ".cu"), options_of(d, wid, change), cubin_path=path)
                with open(path, "rb") as f:
                    cubins[label] = f.read()
            for label, _, _ in sets:
                if label != "this build":
                    print(f"  {wid} {label}: {compare_code(cubins['this build'], cubins[label])}")

    if args.phases:
        print(f"phases, median of {args.phases} traced compiles, ms: front end (of it headers) / NVVM / ptxas")
        for label, d, change in sets:
            for wid in wids:
                runs = []
                for _ in range(args.phases):
                    trace = os.path.join(tempfile.mkdtemp(), "trace")
                    compile_once(nvrtc_path, os.path.join(d, wid + ".cu"), options_of(d, wid, change), trace)
                    runs.append(phases(trace + ".json"))
                fe, headers, nvvm, ptxas = (statistics.median(r[i] for r in runs) for i in range(4))
                print(f"  {label:>16s} {wid}: {fe:6.1f} ({headers:5.1f}) / {nvvm:6.1f} / {ptxas:6.1f}")

    times = {}
    for _ in range(args.rounds):
        for wid in wids:
            for label, d, change in sets:
                if not os.path.exists(os.path.join(d, wid + ".cu")):
                    continue
                r = compile_once(nvrtc_path, os.path.join(d, wid + ".cu"), options_of(d, wid, change))
                times.setdefault((label, wid), []).append(r)

    if not times:
        return
    print(f"NVRTC, sm_90 cubin, first compile of a fresh process; {args.rounds} rounds; ms as "
          "median wall (min wall) / median cpu of all threads")
    print("| workload | " + " | ".join(label for label, _, _ in sets) + " |")
    print("|---" * (len(sets) + 1) + "|")
    for wid in wids:
        cells = []
        for label, _, _ in sets:
            runs = times.get((label, wid))
            if not runs:
                cells.append("")
                continue
            wall = [r["wall_ms"] for r in runs]
            cpu = statistics.median(r["cpu_ms"] for r in runs)
            cells.append(f"{statistics.median(wall):.0f} ({min(wall):.0f}) / {cpu:.0f}")
        print(f"| {wid} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
