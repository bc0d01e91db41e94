"""Repro files and the run's summary (failures grouped by class and by a normalized signature)."""
import hashlib
import inspect
import json
import os
import pprint
import re
import subprocess
import sys
import time

from tests.fuzz import harness
from tests.helpers import pythonpath_with_this_fastcomp

REPRO = '''\
"""fastcomp differential-fuzz repro: {cls}: {detail}

Found by `python -m tests.fuzz --seed {seed}` (program {index}){minimized}.
Runs fn eagerly and compiled (fastcomp.compile(fn, dynamic={dynamic})) on each step of STEPS, from a fresh
FASTCOMP_CACHE_DIR, and compares outputs, input mutations, module state, exceptions and gradients. Prints both;
exits 1 while the bug is there (for a crash or a hang, the crash or the hang is the bug).
Seen: step {step!r}: {detail} ({where})
  eager:    {eager}
  compiled: {compiled}
"""
import os
import sys
import tempfile

os.environ["FASTCOMP_CACHE_DIR"] = tempfile.mkdtemp(prefix="fastcomp-repro-")  # earlier runs' decisions hide bugs

PROGRAM = r\'\'\'
{source}\'\'\'

# fastcomp.compile(fn, dynamic=...) and the calls it gets: each step calls fn on make_inputs(sizes, seed, ...).
VARIANTS = {variants}


# ---- a copy of tests/fuzz/harness.py ----------------------------------------------------------------------------
{harness}

if __name__ == "__main__":
    sys.exit(main(PROGRAM, VARIANTS))
'''


def normalize(text):
    """A message with its numbers, names and places taken out, so one cause gives one signature."""
    text = re.sub(r"\(?[\w<>./-]+\.py:\d+\)?", "<file>", text)
    text = re.sub(r"\(<string>:\d+\)", "<file>", text)
    text = re.sub(r"__resume_at_\d+", "__resume_at_N", text)
    text = re.sub(r"0x[0-9a-f]+", "0x..", text)
    text = re.sub(r"\d+(\.\d+)?", "N", text)
    text = re.sub(r"'[^']*'", "'..'", text)
    return re.sub(r"\s+", " ", text).strip()[:240]


def phase(failure):
    """Which kind of call first showed the failure."""
    variant, step = failure.get("variant") or "", failure.get("step") or ""
    if variant == "exit":
        return "exit"
    if variant == "grad":
        return "grad"
    if variant == "dynamic":
        return "dynamic=True"
    if step.startswith("new size"):
        return "automatic dynamic"
    if step == "new dtype":
        return "new dtype"
    return "static"


def signature(failure):
    detail = failure["detail"]
    if failure["cls"] in ("missing exception", "spurious exception", "wrong exception"):
        detail = normalize(detail)
    elif failure["cls"] == "internal-error warning":
        # Which kind of frame (fn, a resume function, a lambda of torch's or the standard library's) stays.
        detail = normalize(re.sub(r"(helper|g)\d+", r"\1", detail))
    return f"{failure['cls']} | {phase(failure)} | {detail}"


def repro_text(program, failure, minimized):
    variants = [{"dynamic": d, "steps": s} for n, d, s in program.variants() if n == failure.get("variant")]
    variants = variants or [{"dynamic": d, "steps": s} for _, d, s in program.variants()]  # a crash at exit: all
    source = program.source()
    assert "'''" not in source
    return REPRO.format(cls=failure["cls"], detail=_one_line(failure["detail"]), seed=program.seed, index=program.index,
                        minimized=", minimized" if minimized else "", step=failure.get("step"),
                        dynamic=" / ".join(str(v["dynamic"]) for v in variants),
                        where=failure.get("where"), eager=_one_line(failure.get("eager", ""))[:300],
                        compiled=_one_line(failure.get("compiled", ""))[:300], source=source,
                        variants=pprint.pformat(variants, width=116, sort_dicts=False), harness=_harness_source())


def _cause_kind(kind):
    """Kinds that fail for one reason count as one: every random op under a seed draws through the same RNG."""
    family = kind.split(".")[0]
    return family if family in ("random", "random_unseeded") else kind


def _warning_text(w):
    """A fastcomp warning's headline and why its break cannot be resumed, without places or hints."""
    lines = w.splitlines()
    why = [l.strip() for l in lines[1:] if "cannot be resumed" in l]
    return normalize(" ".join(lines[:1] + why))


def _one_line(text):
    return re.sub(r"\s+", " ", str(text)).strip()


def _harness_source():
    src = inspect.getsource(harness)
    return src[src.index('"""', 3) + 3:].lstrip("\n")  # without its module docstring


def verify_repro(path, timeout=120):
    """Runs a repro file in a fresh process: True if it fails (non-zero exit, or a hang past `timeout`)."""
    env = dict(os.environ, PYTHONPATH=pythonpath_with_this_fastcomp(), OMP_NUM_THREADS="1")
    try:
        r = subprocess.run([sys.executable, path], env=env, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return True
    return r.returncode != 0


class Report:
    """Everything a run found, written to `out` as summary.md and summary.json (again after each failure)."""

    def __init__(self, out, seed, device, argv=None):
        self.out, self.seed, self.device = out, seed, device
        self.argv = argv or []
        os.makedirs(os.path.join(out, "repros"), exist_ok=True)
        self.started = time.time()
        self.programs = 0
        self.calls = 0
        self.totals = {"frames": 0, "graphs": 0, "breaks": 0, "eager_exceptions": 0, "programs_with_graph": 0,
                       "programs_running_eagerly": 0, "worker_restarts": 0, "harness_errors": 0}
        self.failures = []  # {"signature", "cls", "program", "repro", "kinds", "verified", "minimized"}
        self.harness_errors = []
        self.warnings = {}  # normalized fastcomp warning -> programs that gave it

    def add_outcome(self, program, outcome):
        self.programs += 1
        graphs = 0
        eagerly = False
        for r in outcome.get("stats", []):
            s = r["stats"]
            self.calls += s["steps"]
            for k in ("frames", "graphs", "breaks", "eager_exceptions"):
                self.totals[k] += s[k]
            graphs += s["graphs"]
            eagerly = eagerly or any("eagerly" in w for w in s["warnings"])
            for w in {_warning_text(w) for w in s["warnings"]}:
                self.warnings[w] = self.warnings.get(w, 0) + 1
        self.totals["programs_with_graph"] += graphs > 0
        self.totals["programs_running_eagerly"] += eagerly
        if outcome.get("error"):
            self.totals["harness_errors"] += 1
            self.harness_errors.append((program.index, outcome["error"][-2000:]))

    def worth_minimizing(self, sig, program, limit):
        """Whether to minimize a failure: fewer than `limit` of its signature are, and none of those is made of
        kinds this program also has (then it most likely fails for the same reason)."""
        done = [f for f in self.failures if f["signature"] == sig and f["minimized"]]
        kinds = {_cause_kind(k) for k in program.kinds()}
        return len(done) < limit and not any({_cause_kind(k) for k in f["kinds"]} <= kinds for f in done)

    def add_failure(self, program, failure, minimized, runs=0):
        """Records a failure; writes its repro when `minimized` is a (program, failure) pair."""
        sig = signature(failure)
        entry = {"signature": sig, "cls": failure["cls"], "program": program.index, "failure": failure,
                 "minimized": minimized is not None, "repro": None, "kinds": None, "verified": None, "runs": runs}
        if minimized is not None:
            small, small_failure = minimized
            entry["kinds"] = small.kinds()
            text = repro_text(small, small_failure, minimized=True)
            digest = hashlib.sha1(text.encode()).hexdigest()[:8]
            slug = re.sub(r"[^a-z]+", "_", failure["cls"]).strip("_")
            path = os.path.join(self.out, "repros", f"repro_{slug}_{program.index}_{digest}.py")
            with open(path, "w") as f:
                f.write(text)
            entry["repro"] = path
            entry["small_fn"] = small.fn_text()
            entry["small_failure"] = small_failure
        self.failures.append(entry)
        self.write()
        return entry

    def by_class(self):
        out = {}
        for f in self.failures:
            out[f["cls"]] = out.get(f["cls"], 0) + 1
        return out

    def groups(self):
        """{signature: [entries]} in class order, most frequent first."""
        groups = {}
        for f in self.failures:
            groups.setdefault(f["signature"], []).append(f)
        order = {c: i for i, c in enumerate(harness.CLASSES)}
        return dict(sorted(groups.items(), key=lambda kv: (order.get(kv[1][0]["cls"], 99), -len(kv[1]), kv[0])))

    def write(self):
        elapsed = time.time() - self.started
        with open(os.path.join(self.out, "summary.json"), "w") as f:
            json.dump({"seed": self.seed, "device": self.device, "programs": self.programs, "calls": self.calls,
                       "seconds": elapsed, "totals": self.totals, "by_class": self.by_class(),
                       "failures": [{k: v for k, v in e.items()} for e in self.failures],
                       "harness_errors": self.harness_errors, "warnings": self.warnings}, f, indent=1, default=str)
        with open(os.path.join(self.out, "summary.md"), "w") as f:
            f.write(self.markdown(elapsed))

    def markdown(self, elapsed):
        t = self.totals
        lines = [f"# fastcomp fuzz run: seed {self.seed}, device {self.device}", "",
                 f"`{' '.join(self.argv)}`" if self.argv else "", "",
                 f"{self.programs} programs ({self.calls} compared calls) in {elapsed:.0f} s; "
                 f"{t['programs_with_graph']} compiled at least one graph, {t['programs_running_eagerly']} warned "
                 f"of running a frame eagerly; {t['graphs']} graphs, {t['breaks']} graph breaks; "
                 f"{t['eager_exceptions']} calls raised in eager; {t['worker_restarts']} worker restarts; "
                 f"{t['harness_errors']} harness errors.", "",
                 f"**{len(self.failures)} failing programs**: " +
                 (", ".join(f"{c} {n}" for c, n in self.by_class().items()) or "none"), ""]
        for sig, entries in self.groups().items():
            lines += [f"## {sig}", "", f"{len(entries)} programs: {', '.join(str(e['program']) for e in entries[:30])}"
                      + (" ..." if len(entries) > 30 else ""), ""]
            for e in entries:
                if e["repro"]:
                    lines += [f"- `{os.path.relpath(e['repro'], self.out)}` (kinds: {', '.join(e['kinds']) or '-'}; "
                              f"{e['runs']} minimizing runs)", "", "```python", e["small_fn"].rstrip(), "```", ""]
        lines += ["## fastcomp warnings (program variants that gave each)", ""]
        lines += [f"- {n}: {w}" for w, n in sorted(self.warnings.items(), key=lambda kv: -kv[1])[:25]]
        return "\n".join(lines) + "\n"
