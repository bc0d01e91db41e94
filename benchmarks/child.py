"""Entry point of one measurement subprocess: `python -m benchmarks.child SPEC_JSON RESULT_PATH`.

`kind: "measure"` measures one (case, mode, phase); `kind: "probe"` describes the device and measures the
copy ceiling. The result goes to RESULT_PATH as JSON, so whatever compilers print on stdout cannot corrupt it.
"""
from __future__ import annotations

import json
import os
import sys
import traceback


def probe(spec: dict) -> dict:
    """The environment, and the copy ceiling when the run measures bandwidth."""
    import torch

    from benchmarks import copy_ceiling, environment, timing
    device = torch.device(spec["device"])
    result = {"status": "ok", "environment": environment.describe(device)}
    if spec.get("copy_ceiling"):
        try:
            result["copy_ceiling"] = copy_ceiling.measure(device, timing.Effort(**spec["effort"]))
        except Exception as error:
            result["copy_ceiling"] = {"error": f"{type(error).__name__}: {error}"}
    return result


def run(spec: dict) -> dict:
    if spec["kind"] == "measure":
        from benchmarks.measure_case import measure
        return measure(spec)
    if spec["kind"] == "probe":
        return probe(spec)
    if spec["kind"] == "dynamic_batches":
        from benchmarks.dynamic_batches import measure as measure_dynamic
        return measure_dynamic(spec)
    raise ValueError(f"unknown child kind {spec['kind']!r}")


def main() -> int:
    spec_json, result_path = sys.argv[1], sys.argv[2]
    try:
        result = run(json.loads(spec_json))
    except Exception as error:
        result = {"status": "failed", "step": "setup", "error": f"{type(error).__name__}: {error}",
                  "traceback": traceback.format_exc()[-4000:]}
    partial_path = result_path + ".partial"
    with open(partial_path, "w") as f:
        json.dump(result, f)
    os.replace(partial_path, result_path)  # the parent never reads half a result
    return 0


if __name__ == "__main__":
    sys.exit(main())
