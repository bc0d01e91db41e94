"""Runs a rehearsed plan (csrc/rehearsal_plan.h's JSON) on the CPU: its buffers as torch CPU tensors, its kernels
through tests/codegen/cuda_on_cpu.h (the plan's own CUDA C, built with the host compiler), its matrix products
with torch. The outputs are compared with what the torch runner returned for the same call, so CI checks the
numbers a lowering computes (strides, offsets, views, fusion, epilogues) without a GPU. f32 plans without extern
steps or symbolic sizes only; `runnable(plan)` says why not otherwise."""
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "codegen"))
import cpu_launch  # noqa: E402

DTYPES = {"f32": torch.float32, "i64": torch.int64, "i32": torch.int32, "bool": torch.bool, "u8": torch.uint8}
_PROGRAMS = {}  # CUDA C -> built program (a plan runs on every call)


def runnable(plan):
    """None when run() can run the plan, else why not."""
    if plan["dynamic"]:
        return "symbolic sizes"
    if any(s["kind"] == "extern" for s in plan["steps"]):
        return "extern steps"
    if any(b["dtype"] not in DTYPES for b in plan["buffers"]):
        return "half types (their conversions are inline PTX)"
    return None


def _program(plan, key):
    """plan[key] ("program": vector accesses, "program_any_alignment": scalar ones) built for the CPU."""
    names = sorted({s["name"] for s in plan["steps"] if s["kind"] == "kernel"})
    source = plan[key]
    if source not in _PROGRAMS:
        _PROGRAMS[source] = cpu_launch.Program(source, names) if names else None
    return _PROGRAMS[source]


def _aligned(step, pointers):
    """The launcher's choice (CudaExecutable::run): the vector program when every vector operand's first element
    is aligned for its accesses."""
    return all((pointers[operand].data_ptr() + first * element) % nbytes == 0
               for operand, first, element, nbytes in step["vector_operands"])


def _view(root, buffer):
    return torch.as_strided(root, buffer["sizes"], buffer["strides"], root.storage_offset() + buffer["offset"])


def run(plan, inputs):
    """The plan's outputs for `inputs` (the graph's inputs, as the executable gets them)."""
    buffers = plan["buffers"]
    roots = [None] * len(buffers)  # per root buffer: the tensor whose data pointer kernels get
    for i, b in enumerate(buffers):
        if b["kind"] == "input":
            roots[i] = inputs[b["input"]]
        elif b["kind"] == "alloc":
            # NaN-filled (floats), so an element no step writes shows in the comparison.
            t = torch.empty_strided(b["sizes"], b["strides"], dtype=DTYPES[b["dtype"]])
            roots[i] = t.fill_(float("nan")) if t.is_floating_point() else t.fill_(0)

    def view(i):
        return _view(roots[buffers[i]["root"]], buffers[i])

    for s in plan["steps"]:
        if s["kind"] == "kernel":
            pointers = [roots[buffers[a]["root"]] for a in s["args"]]
            program = _program(plan, "program" if _aligned(s, pointers) else "program_any_alignment")
            program.launch(s["name"], s["grid"], s["block"], pointers)
        else:
            a, b, d = (roots[buffers[s[x]]["root"]] for x in ("a", "b", "d"))
            offset = lambda t, x: t.storage_offset() + buffers[s[x]]["offset"]  # noqa: E731
            (ab, ar, ac), (bb, br, bc), (db, dr) = s["a_strides"], s["b_strides"], s["d_strides"]
            A = torch.as_strided(a, (s["batch"], s["m"], s["k"]), (ab, ar, ac), offset(a, "a"))
            B = torch.as_strided(b, (s["batch"], s["k"], s["n"]), (bb, br, bc), offset(b, "b"))
            D = torch.as_strided(d, (s["batch"], s["m"], s["n"]), (db, dr, 1), offset(d, "d"))
            r = torch.matmul(A.double(), B.double())
            if s["bias"] >= 0:
                r = r + view(s["bias"]).double()
            if s["epilogue"].startswith("relu"):
                r = torch.relu(r)
            if s["epilogue"].startswith("gelu_tanh"):
                r = F.gelu(r, approximate="tanh")
            D.copy_(r)
    return [view(o) for o in plan["outputs"]]


class Observer:
    """Installed with _C._testing.set_rehearsal_observer: runs every call's plan on the CPU and keeps
    (plan, outputs from the plan, outputs from the torch runner)."""

    def __init__(self):
        self.runs = []

    def __call__(self, plan_json, inputs, output):
        plan = json.loads(plan_json)
        expected = list(output) if isinstance(output, (tuple, list)) else [output]
        why = runnable(plan)
        got = None if why else run(plan, list(inputs))
        self.runs.append((plan, why, got, [t for t in expected if isinstance(t, torch.Tensor)]))
