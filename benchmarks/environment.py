"""What the numbers were measured on: device, driver, library versions and the fastcomp build."""
from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import subprocess
from pathlib import Path

import torch


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _command_output(argv: list[str], cwd: Path | None = None) -> str | None:
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> list[float] | None:
    """1, 5 and 15 minute load averages: how busy a shared host was when the run started."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def fastcomp_build() -> dict:
    """Version and location of the fastcomp this process imports, or why it cannot."""
    try:
        import fastcomp
    except Exception as error:
        return {"fastcomp": None, "fastcomp_error": f"{type(error).__name__}: {error}"}
    return {"fastcomp": getattr(fastcomp, "__version__", None) or _package_version("fastcomp"),
            "fastcomp_file": getattr(fastcomp, "__file__", None),
            "fastcomp_has_compile": hasattr(fastcomp, "compile")}


def describe(device: torch.device) -> dict:
    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": _package_version("triton"),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average": load_average(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
    }
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        info.update(device_name=properties.name, capability=f"{properties.major}.{properties.minor}",
                    device_memory_gib=round(properties.total_memory / 2**30, 1),
                    driver=_command_output(["nvidia-smi", f"--id={device.index or 0}",
                                            "--query-gpu=driver_version", "--format=csv,noheader"]))
    else:
        info.update(device_name=info["cpu"], driver=None)
    info.update(fastcomp_build())
    return info


def git_commit(repo: Path) -> dict:
    """The checkout's commit and whether it has uncommitted changes; None where there is no git.

    `BENCHMARK_COMMIT` names the commit instead, for a copy of a working tree whose .git is not the source's
    (the lent GPU machine gets the files of the checkout, with a .git of its own that lags behind).
    """
    if os.environ.get("BENCHMARK_COMMIT"):
        return {"commit": os.environ["BENCHMARK_COMMIT"], "dirty": None, "from": "BENCHMARK_COMMIT"}
    commit = _command_output(["git", "rev-parse", "HEAD"], cwd=repo)
    status = _command_output(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo)
    return {"commit": commit, "dirty": bool(status) if commit and status is not None else None}


def device_slug(device_name: str) -> str:
    """'NVIDIA H200' -> 'nvidia-h200'; '(R)' and '(TM)' marks are dropped."""
    name = re.sub(r"\((r|tm)\)", "", device_name.lower())
    return re.sub(r"[^a-z0-9]+", "-", name).strip("-") or "unknown-device"
