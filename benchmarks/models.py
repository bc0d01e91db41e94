"""Library models on the GPU, side by side: eager, torch.compile (default, reduce-overhead) and fastcomp (default,
reduce-overhead). `python -m benchmarks.models --out DIR` writes models.json and models.md.

Each (model, batch, dtype, mode) runs in a fresh process, so that a mode's first call ("cold ready": compile() to
the first result, synchronised, and for fastcomp to its kernels ready: its first call runs through torch while they
compile in the background) pays every start-up cost it has, as a user's program would: fastcomp with an empty
FASTCOMP_CACHE_DIR, torch.compile with an empty TORCHINDUCTOR_CACHE_DIR. fastcomp's "warm ready" is a second fresh
process on the first one's cache directory (kernels on disk), for its default mode (reduce-overhead loads the same
kernels). Steady state: median µs per call over repeats of
back-to-back calls after a warm-up (for fastcomp after its kernels are ready, so the warm-up's first calls are its
one-time matrix-product tuning and CUDA-graph capture), synchronised at the end of each repeat. Every mode's output is compared with an
eager run of the same weights on the same inputs in the same process.
"""
import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

MODES = ("eager", "torch.compile", "torch.compile reduce-overhead", "fastcomp", "fastcomp reduce-overhead")
TOLERANCE = {"f32": 2e-3, "bf16": 6e-2, "amp-bf16": 6e-2}  # relative to each output's largest magnitude (after reductions and GEMMs)


# --- the models: random weights, built from configs ---------------------------------------------------------------

def _hf(name):
    import transformers as T

    gpt2 = dict(n_layer=4, n_embd=768, n_head=12, vocab_size=50257, attn_implementation="sdpa")
    llama = dict(num_hidden_layers=4, hidden_size=512, num_attention_heads=8, num_key_value_heads=4,
                 intermediate_size=1376, vocab_size=32000, use_cache=False)
    return {
        "gpt2": lambda: T.GPT2Model(T.GPT2Config(**gpt2)),
        "bert": lambda: T.BertModel(T.BertConfig(num_hidden_layers=4)),
        "llama": lambda: T.LlamaModel(T.LlamaConfig(**llama)),
        "t5": lambda: T.T5Model(T.T5Config(d_model=512, d_ff=2048, num_layers=4, num_decoder_layers=4, num_heads=8)),
        "vit": lambda: T.ViTModel(T.ViTConfig(num_hidden_layers=4)),
    }[name]()


def import_torchvision_beside_a_cpu_torch():
    """PyPI's torchvision (which timm and transformers import) is a CUDA build: beside a CPU build of torch its ops
    library cannot load and its import fails registering fake kernels for two ops; their schemas defined first let
    the Python parts import. Does nothing where torchvision imports (the GPU machine)."""
    try:
        import torchvision  # noqa: F401
        return
    except Exception:  # noqa: BLE001
        pass
    import torch

    for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
        del sys.modules[name]
    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _KEEP.append(lib)  # a Library takes its definitions back when it is collected
    import torchvision  # noqa: F401, F811


_KEEP = []


def build(name):
    import_torchvision_beside_a_cpu_torch()
    if name.startswith("timm-"):
        import timm

        return timm.create_model(name[5:], pretrained=False)
    return _hf(name)


def inputs(name, batch, device):
    import torch

    g = torch.Generator().manual_seed(1)
    if name in ("vit",) or name.startswith("timm-"):
        return {("pixel_values" if name == "vit" else "x"): torch.randn(batch, 3, 224, 224, generator=g).to(device)}
    ids = lambda n: torch.randint(0, 30000, (batch, n), generator=g).to(device)  # noqa: E731
    if name == "t5":
        return {"input_ids": ids(128), "decoder_input_ids": ids(64)}
    return {"input_ids": ids(128)}


MODELS = ("gpt2", "bert", "llama", "t5", "vit", "timm-resnet18", "timm-vit_tiny_patch16_224", "timm-convnext_atto")


# --- one process: one mode of one model ---------------------------------------------------------------------------

def _tensors(out):
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        return [t for v in out.values() for t in _tensors(v)]
    if isinstance(out, (list, tuple)):
        return [t for v in out for t in _tensors(v)]
    return []


def _error(got, want):
    """Largest difference of any output tensor, relative to that output's largest magnitude."""
    worst = 0.0
    a, b = _tensors(got), _tensors(want)
    if len(a) != len(b):
        return float("inf")
    for x, y in zip(a, b):
        if x.shape != y.shape:
            return float("inf")
        x, y = x.float(), y.float()
        worst = max(worst, ((x - y).abs().max() / y.abs().max().clamp_min(1e-6)).item())
    return worst


def prepare(name, batch, dtype, device):
    """The model (random weights, seed 0) in eval mode on `device` in `dtype`, and its keyword inputs."""
    import torch

    torch.manual_seed(0)
    model = build(name).eval().to(device=device, dtype=dtype)
    kwargs = inputs(name, batch, device)
    return model, {k: v.to(dtype) if v.is_floating_point() else v for k, v in kwargs.items()}


def precision(dtype_name, device):
    """(the dtype of the model and its float inputs, the context every call runs in) for a --dtypes entry: "f32",
    "bf16" (model.to(bf16)), or "amp-bf16" (a float32 model and inputs, every call under torch.autocast to bf16)."""
    import torch

    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "amp-bf16": torch.float32}[dtype_name]
    amp = torch.autocast(device, dtype=torch.bfloat16) if dtype_name == "amp-bf16" else contextlib.nullcontext()
    return dtype, amp


def compiled(model, mode):
    """`model` as one of MODES runs it."""
    reduce_overhead = "reduce-overhead" if "reduce" in mode else None
    if mode == "eager":
        return model
    if mode.startswith("torch.compile"):
        import torch

        return torch.compile(model, mode=reduce_overhead)
    import fastcomp

    return fastcomp.compile(model, mode=reduce_overhead)


def child(cfg):
    import torch

    device, mode = cfg["device"], cfg["mode"]
    dtype, amp = precision(cfg["dtype"], device)  # under amp, the reference's calls too
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    model, kwargs = prepare(cfg["model"], cfg["batch"], dtype, device)
    result = {}
    with torch.no_grad(), amp:
        reference = model(**kwargs)
        sync()
        counter = None
        start = time.perf_counter()
        run = compiled(model, mode)
        if mode.startswith("fastcomp"):
            from fastcomp.testing import CompileCounter

            counter = CompileCounter().__enter__()
        out = run(**kwargs)
        sync()
        result["first_call_s"] = time.perf_counter() - start
        if counter:  # ready = kernels ready: fastcomp's first call ran through torch while they compiled
            import fastcomp

            fastcomp.wait_for_compiles()
            sync()
        result["ready_s"] = time.perf_counter() - start
        if counter:
            counter.__exit__(None, None, None)
            result.update(graphs=counter.graph_count, breaks=counter.break_count,
                          backend=sorted({r["backend"] for r in counter.records if r.get("backend")}))
        if cfg.get("ready_only"):
            return result
        for _ in range(cfg["warmup"]):
            out = run(**kwargs)
        sync()
        result["error"] = _error(out, reference)
        times = []
        for _ in range(cfg["repeats"]):
            sync()
            start = time.perf_counter()
            for _ in range(cfg["calls"]):
                run(**kwargs)
            sync()
            times.append((time.perf_counter() - start) / cfg["calls"] * 1e6)
        result["us"] = statistics.median(times)
    return result


def spawn(cfg, env, timeout):
    start = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-m", "benchmarks.models", "--child", json.dumps(cfg)], env=env,
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"failed": f"timed out after {timeout} s"}
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode or not lines:
        tail = (p.stderr.strip().splitlines() or ["?"])[-1]
        return {"failed": tail[:200], "wall_s": time.perf_counter() - start}
    return json.loads(lines[-1])


# --- the run and its table ----------------------------------------------------------------------------------------

def environment():
    import platform

    import torch

    import_torchvision_beside_a_cpu_torch()
    info = {"python": platform.python_version(), "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "none"}
    for lib in ("transformers", "timm"):
        try:
            info[lib] = __import__(lib).__version__
        except Exception:  # noqa: BLE001 - a missing library is reported as such
            info[lib] = "missing"
    return info


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--child")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--batches", default="8")
    ap.add_argument("--dtypes", default="f32", help="f32, bf16 (model.to(bf16)), amp-bf16 (f32 under autocast)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--time-budget", type=float, default=480, help="no new process after this many seconds")
    ap.add_argument("--timeout", type=float, default=180)
    ap.add_argument("--out", default="benchmarks/results/models")
    ap.add_argument("--merge", nargs="+", metavar="JSON", help="one report from the models.json of several runs "
                    "(the parts of a run split into commands of at most 10 minutes), written to --out")
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    if args.merge:
        return write_report(merge([json.load(open(p)) for p in args.merge]), args.out)
    began = time.perf_counter()
    rows = []
    for model in args.models.split(","):
        for batch in map(int, args.batches.split(",")):
            for dtype in args.dtypes.split(","):
                row = {"model": model, "batch": batch, "dtype": dtype, "modes": {}}
                rows.append(row)
                for mode in args.modes.split(","):
                    if time.perf_counter() - began > args.time_budget:
                        row["modes"][mode] = {"failed": "not run: time budget"}
                        continue
                    cache = tempfile.mkdtemp(prefix="models-bench-")
                    env = dict(os.environ, FASTCOMP_CACHE_DIR=cache, TORCHINDUCTOR_CACHE_DIR=cache)
                    cfg = dict(model=model, batch=batch, dtype=dtype, mode=mode, device=args.device,
                               calls=args.calls, repeats=args.repeats, warmup=args.warmup)
                    r = spawn(cfg, env, args.timeout)
                    # Kernels on disk, a new process: fastcomp's default mode only (reduce-overhead loads the same
                    # kernels; its CUDA graph is captured in the process, after ready).
                    if mode == "fastcomp" and "failed" not in r:
                        warm = spawn(dict(cfg, ready_only=True), env, args.timeout)
                        r["warm_ready_s"] = warm.get("ready_s")
                    row["modes"][mode] = r
                    print(model, batch, dtype, mode, {k: v for k, v in r.items() if k != "backend"}, flush=True)
    report = {"environment": environment(), "args": vars(args), "command": " ".join(sys.argv[1:]), "rows": rows}
    return write_report(report, args.out)


def write_report(report, out):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "models.json"), "w") as f:
        json.dump(report, f, indent=1)
    with open(os.path.join(out, "models.md"), "w") as f:
        f.write(markdown(report))
    why_not = chart(report, os.path.join(out, "models.png"))
    print(markdown(report) + (f"\n(no chart: {why_not})" if why_not else ""))
    return 0


def merge(reports):
    """One report from parts run on one machine: their rows in order; the parts must agree on the environment. A
    row (model, batch, dtype) in several parts (a re-run of rows that ran out of time) is taken whole from the part
    that ran the most of its modes, the earlier on a tie: each row's numbers come from one run side by side."""
    envs = {json.dumps(r["environment"], sort_keys=True) for r in reports}
    if len(envs) != 1:
        raise SystemExit(f"the parts ran in different environments: {sorted(envs)}")
    ran = lambda row: sum("failed" not in r for r in row["modes"].values())  # noqa: E731
    rows, index = [], {}
    for report in reports:
        for row in report["rows"]:
            key = (row["model"], row["batch"], row["dtype"])
            if key not in index:
                index[key] = len(rows)
                rows.append(row)
            elif ran(row) > ran(rows[index[key]]):
                rows[index[key]] = row
    merged = dict(reports[0], rows=rows)
    merged["command"] = " + ".join(r.get("command", "") for r in reports)
    return merged


def chart(report, path):
    """µs per call of each compiled mode relative to torch.compile default (below 1: faster), per model, batch and
    dtype, on a log axis; returns why not when there is no chart."""
    try:
        import matplotlib
        import matplotlib.ticker

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed"
    rows = [r for r in report["rows"] if "us" in r["modes"].get("torch.compile", {})]
    if not rows:
        return "no row has a torch.compile time"
    modes = [m for m in MODES if m != "torch.compile"]
    labels = [f"{r['model'].removeprefix('timm-').split('_patch')[0]}\n{r['batch']} {r['dtype']}" for r in rows]
    width = 0.8 / len(modes)
    figure, axis = plt.subplots(figsize=(max(8, 1.1 * len(rows)), 5))
    for i, mode in enumerate(modes):
        xs = [k + (i - (len(modes) - 1) / 2) * width for k in range(len(rows))]
        ratios = [r["modes"].get(mode, {}).get("us", float("nan")) / r["modes"]["torch.compile"]["us"] for r in rows]
        axis.bar(xs, [v - 1 for v in ratios], width, bottom=1, label=mode, color=f"C{i}")
    axis.axhline(1.0, color="gray", linewidth=0.8)
    axis.set_yscale("log")
    for ticks in (axis.yaxis.set_major_formatter, axis.yaxis.set_minor_formatter):
        ticks(matplotlib.ticker.FormatStrFormatter("%.2g"))
    axis.set_ylabel("µs/call ÷ torch.compile default's (log; below 1 is faster)")
    axis.set_xticks(range(len(rows)), labels, fontsize="small")
    axis.legend(fontsize="small", ncol=len(modes))
    axis.grid(axis="y", which="both", alpha=0.3)
    e = report["environment"]
    axis.set_title(f"{e['gpu']}, torch {e['torch']}, transformers {e['transformers']}, timm {e['timm']}")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return None


def markdown(report):
    e = report["environment"]
    out = [f"# Library models: eager, torch.compile and fastcomp\n",
           f"{e['gpu']}, Python {e['python']}, torch {e['torch']}, transformers {e['transformers']}, timm {e['timm']}; "
           f"`python -m benchmarks.models {report.get('command', ' '.join(sys.argv[1:]))}`; µs per call (median of {report['args']['repeats']} "
           f"× {report['args']['calls']} calls), ready = compile() to the first result and (fastcomp) its kernels ready, s.\n",
           "| model | batch | dtype | eager | torch.compile | tc reduce-overhead | fastcomp | fc reduce-overhead "
           "| fc / tc | fc-ro / tc-ro | ready tc / tc-ro | ready fc cold / warm | graphs / breaks | max rel err | backend |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in report["rows"]:
        m = row["modes"]
        us = lambda k: (f"{m[k]['us']:.0f}" if "us" in m.get(k, {})  # noqa: E731
                        else "fail" if k in m and not m[k].get("failed", "").startswith("not run") else "—")
        ratio = lambda a, b: (f"{m[a]['us'] / m[b]['us']:.2f}" if "us" in m.get(a, {}) and "us" in m.get(b, {})  # noqa: E731
                              else "—")
        ready = lambda k, f="ready_s": (f"{m[k][f]:.2f}" if m.get(k, {}).get(f) is not None else "—")  # noqa: E731
        fc = m.get("fastcomp", {})
        errs = [v.get("error") for v in m.values() if v.get("error") is not None]
        tol = TOLERANCE.get(row["dtype"], 1e-3)
        err = (f"{max(errs):.1e}" + ("" if max(errs) <= tol else " **over**")) if errs else "—"
        out.append(f"| {row['model']} | {row['batch']} | {row['dtype']} | {us('eager')} | {us('torch.compile')} | "
                   f"{us('torch.compile reduce-overhead')} | {us('fastcomp')} | {us('fastcomp reduce-overhead')} | "
                   f"{ratio('fastcomp', 'torch.compile')} | "
                   f"{ratio('fastcomp reduce-overhead', 'torch.compile reduce-overhead')} | "
                   f"{ready('torch.compile')} / {ready('torch.compile reduce-overhead')} | "
                   f"{ready('fastcomp')} / {ready('fastcomp', 'warm_ready_s')} | "
                   f"{fc.get('graphs', '—')} / {fc.get('breaks', '—')} | {err} | {'; '.join(fc.get('backend', []))} |")
    failures = [(r["model"], r["batch"], k, v["failed"]) for r in report["rows"] for k, v in r["modes"].items()
                if "failed" in v]
    if failures:
        out.append("\nFailed or not run:\n")
        out += [f"- {m} batch {b}, {k}: {why}" for m, b, k, why in failures]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
