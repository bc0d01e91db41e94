"""Which (section, case, mode) rows a run measures.

Sections:
- `workloads`: W1–W9 on the run's device at full size (quick size on a CPU), every mode, cold and warm.
- `overhead`: guard/dispatch and graph-break cases (overhead_cases.py) on the run's device, cold only.
- `cpu`: the tracker issue's CPU measurements, with no GPU needed: W1 (per-call overhead), W5 and W7 (cold
  compile and trace time) at full size on the CPU against Dynamo's capture alone (`tc-eager`); any W id with
  `--workloads`. Also the `graph_break` overhead case (one break, two graphs) on the CPU, unless
  `--overhead-cases` leaves it out.

`--part K/N` runs the K-th of N slices of the plan, cut between cases (a case's modes stay together, so each
part's report has eager beside its compilers) so that the longest part's estimated time is as short as it
can be.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from benchmarks.modes import MODES
from benchmarks.overhead_cases import OVERHEAD_CASES
from benchmarks.workloads import WORKLOADS

SECTIONS = ("workloads", "overhead", "cpu")
GPU_MODES = ("eager", "tc", "tc-ro", "fc", "fc-ro")
# The guard/dispatch cases time the compilers' per-call checks, which CUDA-graph replay does not change; the
# reduce-overhead modes would only add two torch.compile processes per case (about 40 s each on the H200).
GPU_OVERHEAD_MODES = ("eager", "tc", "fc")
CPU_MODES = ("eager", "tc-eager", "fc")
CPU_WORKLOADS = ("W1", "W5", "W7")  # the tracker issue's CPU section
CPU_OVERHEAD_CASES = ("graph_break",)  # per-call cost of a function with one graph break, on the CPU

# --quick: a CPU smoke run for CI, small enough to finish in well under a minute on two cores.
QUICK_SECTIONS = ("cpu", "overhead")
QUICK_WORKLOADS = ("W1", "W5")
QUICK_OVERHEAD_CASES = ("inputs8_entries8", "graph_break")


@dataclass(frozen=True)
class Job:
    section: str
    case: str
    mode: str
    device: str
    scale: float | None  # None for overhead cases, whose sizes are fixed
    warm: bool  # also measure a warm start from the cold run's caches

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.section, self.case, self.mode)


def default_sections(device: str) -> tuple[str, ...]:
    return ("workloads", "overhead", "cpu") if device.startswith("cuda") else ("cpu", "overhead")


def default_modes(section: str, device: str) -> tuple[str, ...]:
    if not device.startswith("cuda") or section == "cpu":
        return CPU_MODES
    return GPU_OVERHEAD_MODES if section == "overhead" else GPU_MODES


def make_plan(sections, workloads, overhead_cases, modes, device: str, scale: float | None,
              quick: bool = False, warm_modes=None) -> list[Job]:
    """Rows in the order they run; `workloads`, `modes` or `scale` None means each section's default.

    A warm start is measured for every mode with a disk cache, or only for those in `warm_modes` when given
    (torch.compile's take 10-15 s each on a GPU host, so a run under a time limit may leave them out).

    Default sizes: full size on a GPU and in the `cpu` section, each workload's quick scale for the
    `workloads` section on a CPU and everywhere with `quick`.
    """
    jobs = []
    for section in sections:
        section_device = "cpu" if section == "cpu" else device
        if section == "overhead":
            cases = overhead_cases
        else:
            cases = workloads or (CPU_WORKLOADS if section == "cpu" else tuple(WORKLOADS))
        if section == "cpu":
            cases = (*cases, *(c for c in CPU_OVERHEAD_CASES if c in (overhead_cases or ())))
        for case in cases:
            if section == "overhead" or case in OVERHEAD_CASES:
                case_scale = None
            elif scale is not None:
                case_scale = scale
            elif quick or (section == "workloads" and not section_device.startswith("cuda")):
                case_scale = WORKLOADS[case].quick_scale
            else:
                case_scale = 1.0
            for mode in modes or default_modes(section, section_device):
                warm = (MODES[mode].has_disk_cache and section != "overhead"
                        and (warm_modes is None or mode in warm_modes))
                jobs.append(Job(section, case, mode, section_device, case_scale, warm))
    return jobs


# Rough seconds per measurement process, for balancing parts and for the budget before a mode has run:
# starting Python and torch, building the case, timing it; plus the compiler's cold and warm starts (on the
# H200 host in November 2026, torch.compile's warm start cost nearly what its cold one did).
PROCESS_S = {"cpu": 3.0, "cuda": 5.0}
# Every fastcomp mode (fc, fc-ro and their A/B variants) starts alike.
COLD_COMPILE_S = {"eager": 0.0, "tc": 14.0, "tc-ro": 16.0, "tc-eager": 2.5, "fastcomp": 0.5}
WARM_COMPILE_S = {"tc": 12.0, "tc-ro": 14.0, "fastcomp": 0.2}


def _compiler_key(mode: str) -> str:
    return "fastcomp" if MODES[mode].compiler_module == "fastcomp" else mode


def estimated_seconds(job: Job) -> float:
    per_process = PROCESS_S["cuda" if job.device.startswith("cuda") else "cpu"]
    compile_s = COLD_COMPILE_S.get(_compiler_key(job.mode), 5.0)
    if job.section == "overhead":  # one compile per cache entry; later ones skip the compiler's start-up
        compile_s *= 1 + 0.3 * (OVERHEAD_CASES[job.case].cache_entries - 1)
    seconds = per_process + compile_s
    if job.warm:
        seconds += per_process + WARM_COMPILE_S.get(_compiler_key(job.mode), 1.0)
    return seconds


def parse_part(text: str) -> tuple[int, int]:
    """'2/3' -> (2, 3); raises ValueError otherwise."""
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"--part wants K/N, e.g. 1/3, not {text!r}") from None
    if not 1 <= k <= n:
        raise ValueError(f"--part {text}: K must be between 1 and N")
    return k, n


def select_part(jobs: list[Job], k: int, n: int) -> list[Job]:
    """The k-th (1-based) of n contiguous slices of the plan, cut only between (section, case) groups.

    The cuts make the longest slice's estimated time as short as possible (a linear partition), so a
    command per slice fits the least time; every group lands in exactly one slice, and with fewer groups
    than slices some slices are empty.
    """
    groups: dict[tuple[str, str], list[Job]] = {}
    for job in jobs:
        groups.setdefault((job.section, job.case), []).append(job)
    group_list = list(groups.values())
    costs = [sum(estimated_seconds(j) for j in group) for group in group_list]
    return [job for group in group_list[slice(*_partition(costs, n)[k - 1])] for job in group]


def _partition(costs: list[float], n: int) -> list[tuple[int, int]]:
    """(start, stop) of n contiguous ranges of `costs` whose largest sum is the smallest possible."""
    m = len(costs)
    prefix = [0.0]
    for cost in costs:
        prefix.append(prefix[-1] + cost)
    # best[p][i]: the smallest largest-sum of splitting the first i costs into p ranges; cut[p][i]: its last cut
    best = [[math.inf] * (m + 1) for _ in range(n + 1)]
    cut = [[0] * (m + 1) for _ in range(n + 1)]
    best[0][0] = 0.0
    for p in range(1, n + 1):
        for i in range(m + 1):
            for j in range(i + 1):  # the p-th range is costs[j:i], possibly empty
                value = max(best[p - 1][j], prefix[i] - prefix[j])
                if value < best[p][i]:
                    best[p][i], cut[p][i] = value, j
    ranges, stop = [], m
    for p in range(n, 0, -1):
        ranges.append((cut[p][stop], stop))
        stop = cut[p][stop]
    return ranges[::-1]


def check_names(kind: str, names, known) -> None:
    """Raises ValueError naming the unknown names and the choices."""
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown {kind}: {', '.join(unknown)} (choose from {', '.join(known)})")


def check_selection(sections, workloads, overhead_cases, modes) -> None:
    check_names("section", sections, SECTIONS)
    check_names("workload", workloads, WORKLOADS)
    check_names("overhead case", overhead_cases, OVERHEAD_CASES)
    check_names("mode", modes or (), MODES)
