"""Runs a rehearsed plan (csrc/rehearsal_plan.h's JSON) on the CPU: its buffers as torch CPU tensors, its kernels
through tests/codegen/cuda_on_cpu.h (the plan's own CUDA C, built with the host compiler), its matrix products
with torch. The outputs are compared with what the torch runner returned for the same call, so CI checks the
numbers a lowering computes (strides, offsets, views, fusion, epilogues, symbolic sizes) without a GPU. Plans
without extern steps only; `runnable(plan)` says why not otherwise."""
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "codegen"))
import cpu_launch  # noqa: E402
from codegen_gpu import TORCH_DTYPES as DTYPES  # noqa: E402

_PROGRAMS = {}  # CUDA C -> built program (a plan runs on every call)


def runnable(plan):
    """None when run() can run the plan, else why not."""
    if any(s["kind"] == "extern" for s in plan["steps"]):
        return "extern steps"
    if any(b["dtype"] not in DTYPES for b in plan["buffers"]):
        return "a dtype torch has no CPU tensors of"
    return None


def _program(plan, key):
    """plan[key] ("program": vector accesses, "program_any_alignment": scalar ones) built for the CPU."""
    names = sorted({s["name"] for s in plan["steps"] if s["kind"] == "kernel"})
    source = plan[key]
    if source not in _PROGRAMS:
        _PROGRAMS[source] = cpu_launch.Program(source, names) if names else None
    return _PROGRAMS[source]


def _aligned(vector_operands, pointers):
    """The launcher's choice (CudaExecutable::run): the vector program when every vector operand's first element
    is aligned for its accesses."""
    return all((pointers[operand].data_ptr() + first * element) % nbytes == 0
               for operand, first, element, nbytes in vector_operands)


def _evaluator(plan, inputs):
    """value(x): x itself for a number, else its expression ("33*s0") at this call's symbols."""
    symbols = {f"s{i}": inputs[input].size(dim) for i, (input, dim) in enumerate(plan["symbols"])}

    def value(x):
        return x if isinstance(x, int) else eval(x, {"__builtins__": {}}, symbols)  # noqa: S307 (our own text)
    return value


def run(plan, inputs):
    """The plan's outputs for `inputs` (the graph's inputs, as the executable gets them)."""
    value = _evaluator(plan, inputs)
    buffers = [dict(b, sizes=[value(x) for x in b["sizes"]], strides=[value(x) for x in b["strides"]],
                    offset=value(b["offset"])) for b in plan["buffers"]]
    roots = [None] * len(buffers)  # per root buffer: the tensor whose data pointer kernels get
    for i, b in enumerate(buffers):
        if b["kind"] == "input":
            roots[i] = inputs[b["input"]]
        elif b["kind"] == "alloc":
            # NaN-filled (floats), so an element no step writes shows in the comparison.
            t = torch.empty_strided(b["sizes"], b["strides"], dtype=DTYPES[b["dtype"]])
            roots[i] = t.fill_(float("nan")) if t.is_floating_point() else t.fill_(0)

    def view(i):
        root, b = roots[buffers[i]["root"]], buffers[i]
        return torch.as_strided(root, b["sizes"], b["strides"], root.storage_offset() + b["offset"])

    for s in plan["steps"]:
        if s["kind"] == "kernel":
            pointers = [roots[buffers[a]["root"]] for a in s["args"]]
            vector = [(o, value(first), element, nbytes) for o, first, element, nbytes in s["vector_operands"]]
            program = _program(plan, "program" if _aligned(vector, pointers) else "program_any_alignment")
            grid = s["grid"]
            if s["grid_items"] is not None:  # the executable's per-call grid
                grid = min(max(-(-value(s["grid_items"]) // s["items_per_block"]), 1), grid)
            program.launch(s["name"], grid, s["block"], pointers + [value(p) for p in s["size_params"]])
        else:
            a, b, d = (roots[buffers[s[x]]["root"]] for x in ("a", "b", "d"))
            offset = lambda t, x: t.storage_offset() + buffers[s[x]]["offset"]  # noqa: E731
            m, n, k, batch = (value(s[x]) for x in ("m", "n", "k", "batch"))
            (ab, ar, ac), (bb, br, bc), (db, dr) = ([value(x) for x in s[f"{o}_strides"]] for o in "abd")
            A = torch.as_strided(a, (batch, m, k), (ab, ar, ac), offset(a, "a"))
            if s["b_next"]:  # a group (group_products.h): its weights lie anywhere, in any order
                weights = [torch.as_strided(b, (k, n), (br, bc), offset(b, "b"))]
                for i in s["b_next"]:
                    w = roots[buffers[i]["root"]]
                    weights.append(torch.as_strided(w, (k, n), (br, bc), w.storage_offset() + buffers[i]["offset"]))
                B = torch.stack(weights)
            else:
                B = torch.as_strided(b, (batch, k, n), (bb, br, bc), offset(b, "b"))
            D = torch.as_strided(d, (batch, m, n), (db, dr, 1), offset(d, "d"))
            r = torch.matmul(A.double(), B.double())
            if s["bias"] >= 0:  # a group's biases, one a batch (bias_next), or one for all
                r = r + torch.stack([view(i).double() for i in [s["bias"]] + s["bias_next"]])[:, None, :]
            if s["epilogue"].startswith("relu"):
                r = torch.relu(r)
            if s["epilogue"].startswith("gelu_tanh"):
                r = F.gelu(r, approximate="tanh")
            D.copy_(r)
    return [view(o) for o in plan["outputs"] if o >= 0]  # -1: an output that is no tensor (an object the graph got)


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
