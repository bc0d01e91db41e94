"""Which (section, case, mode) rows a run measures.

Sections:
- `workloads`: W1–W9 on the run's device at full size (quick size on a CPU), every mode, cold and warm.
- `overhead`: guard/dispatch and graph-break cases (overhead_cases.py) on the run's device, cold only.
- `cpu`: W1–W9 on the CPU at quick size against Dynamo's capture alone (`tc-eager`): trace time and per-call
  overhead, with no GPU needed.
"""
from __future__ import annotations

from dataclasses import dataclass

from benchmarks.modes import MODES
from benchmarks.overhead_cases import OVERHEAD_CASES
from benchmarks.workloads import WORKLOADS

SECTIONS = ("workloads", "overhead", "cpu")
GPU_MODES = ("eager", "tc", "tc-ro", "fc", "fc-ro")
CPU_MODES = ("eager", "tc-eager", "fc")

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
    return ("workloads", "overhead") if device.startswith("cuda") else ("cpu", "overhead")


def default_modes(section: str, device: str) -> tuple[str, ...]:
    return GPU_MODES if device.startswith("cuda") and section != "cpu" else CPU_MODES


def make_plan(sections, workloads, overhead_cases, modes, device: str, scale: float | None) -> list[Job]:
    """Rows in the order they run; `modes` or `scale` None means each section's default."""
    jobs = []
    for section in sections:
        section_device = "cpu" if section == "cpu" else device
        for case in (overhead_cases if section == "overhead" else workloads):
            if section == "overhead":
                case_scale = None
            elif scale is not None:
                case_scale = scale
            else:
                case_scale = 1.0 if section_device.startswith("cuda") else WORKLOADS[case].quick_scale
            for mode in modes or default_modes(section, section_device):
                warm = MODES[mode].has_disk_cache and section != "overhead"
                jobs.append(Job(section, case, mode, section_device, case_scale, warm))
    return jobs


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
