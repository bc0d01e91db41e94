"""GPU side of the emitter tests: random inputs for a spec, a launch of the emitted kernel (NVRTC through ctypes
to PTX, loaded and launched with CuPy on torch's memory), and the same spec evaluated with torch ops as the
reference. Until the project's own launcher exists (branch `cuda`), `launch` is the one place to rewire."""
import os
import tempfile

import torch
import torch.nn.functional as F

from fastcomp._C import _testing as T

import nvrtc_ctypes

TORCH_DTYPES = {"bool": torch.bool, "u8": torch.uint8, "i8": torch.int8, "i16": torch.int16, "i32": torch.int32,
                "i64": torch.int64, "f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32,
                "f64": torch.float64}


def readable(shape, operand):
    """(shape, offset) of the part of the space an operand covers: all of it, or its validity range's part."""
    shape, offset = list(shape), operand.get("offset", 0)
    if "valid" in operand:
        dim, begin, end = operand["valid"]
        shape[dim] = end - begin
        offset += begin * operand["strides"][dim]
    return shape, offset


def storage_elements(shape, strides, offset):
    if any(n == 0 for n in shape):
        return offset + 1
    return offset + sum((n - 1) * s for n, s in zip(shape, strides)) + 1


def random_storage(dtype, n, generator, low=None, device="cuda"):
    """Random values that are never zero (so a wrong broadcast or a missing load shows)."""
    t = TORCH_DTYPES[dtype]
    if dtype == "bool":
        return torch.randint(0, 2, (n,), generator=generator, device=device).bool()
    if t.is_floating_point:
        x = torch.randn(n, generator=generator, device=device, dtype=torch.float32) * 3
        x = torch.where(x.abs() < 1e-3, torch.full_like(x, 0.5), x)
        return (x.abs() + 0.5 if low == 0 else x).to(t)
    lo, hi = (1, 100) if dtype == "u8" or low == 0 else (-50, 50)
    x = torch.randint(lo, hi, (n,), generator=generator, device=device, dtype=torch.int64)
    return torch.where(x == 0, torch.ones_like(x), x).to(t)


def random_inputs(spec, seed=0, nonnegative=(), device="cuda"):
    """One storage tensor per input; inputs listed in `nonnegative` get values > 0."""
    g = torch.Generator(device=device).manual_seed(seed)
    storages = []
    for n, i in enumerate(spec["inputs"]):
        part, offset = readable(spec["shape"], i)
        storages.append(random_storage(i["dtype"], storage_elements(part, i["strides"], offset), g,
                                       0 if n in nonnegative else None, device))
    return storages


def alignment_for(spec, storages):
    """The program the executable would launch for these storages: 'vector' when every vector operand's first
    element is aligned for its accesses, else 'any' (CudaExecutable::run's check)."""
    for operand, first, nbytes in T.vector_operands(spec):
        t = storages[operand]
        if (t.data_ptr() + int(first) * t.element_size()) % nbytes:
            return "any"
    return "vector"


def launch(spec, inputs):
    """Runs the emitted kernel on `inputs` (storages); returns one storage per output."""
    import cupy  # installed on the GPU machines (KINDS.md); imported here so CPU runs never need it

    nvrtc, why = nvrtc_ctypes.find()
    assert nvrtc, why
    code, grid, block, shared = T.emit_kernel(spec)
    outputs = [torch.zeros(storage_elements(spec["shape"], o["strides"], o["offset"]), device="cuda",
                           dtype=TORCH_DTYPES[o["dtype"]]) for o in spec["outputs"]]
    ok, log, ptx = nvrtc.compile(T.emit_program([spec], alignment=alignment_for(spec, inputs + outputs)))
    assert ok, log
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "kernel.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        module = cupy.RawModule(path=path)
        kernel = module.get_function(spec["name"])
        if shared > 48 * 1024:  # beyond the default a block must opt in, as the executable does (module.cpp)
            kernel.max_dynamic_shared_size_bytes = shared
        torch.cuda.synchronize()
        args = tuple(cupy.uint64(t.data_ptr()) for t in inputs + outputs)
        kernel((grid,), (block,), args, shared_mem=shared)
        cupy.cuda.runtime.deviceSynchronize()
    return outputs


def _unary(op, x, t):
    fns = {"neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt,
           "rsqrt": torch.rsqrt, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "relu": torch.relu,
           "erf": torch.erf, "sin": torch.sin, "cos": torch.cos, "gelu_erf": F.gelu,
           "gelu_tanh": lambda v: F.gelu(v, approximate="tanh"), "silu": F.silu,
           "not": torch.logical_not if t == torch.bool else torch.bitwise_not}
    return fns[op](x)


def _binary(op, a, b, t):
    if op == "div":
        return torch.div(a, b) if t.is_floating_point else torch.floor_divide(a, b)
    fns = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "pow": torch.pow, "max": torch.maximum,
           "min": torch.minimum, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge, "eq": torch.eq,
           "ne": torch.ne, "and": torch.logical_and if t == torch.bool else torch.bitwise_and,
           "or": torch.logical_or if t == torch.bool else torch.bitwise_or}
    return fns[op](a, b)


def reference(spec, inputs):
    """The spec evaluated with eager torch ops in each expression's dtype (so f16 rounds after every op, as the
    kernel promises); returns one tensor of the iteration shape per output."""
    shape = spec["shape"]
    device = inputs[0].device if inputs else "cuda"  # CPU storages: the CPU run of tests/codegen/cpu_launch.py
    values, exprs = [], spec["exprs"]
    for e in exprs:
        t = TORCH_DTYPES[e["dtype"]]
        args = [values[a] for a in e.get("args", [])]
        op = e["op"]
        if op == "load":
            i = spec["inputs"][e["operand"]]
            part, offset = readable(shape, i)
            v = torch.zeros(shape, dtype=t, device=device)  # 0 outside a validity range, as the kernel reads it
            inside = v.narrow(i["valid"][0], i["valid"][1], part[i["valid"][0]]) if "valid" in i else v
            inside.copy_(torch.as_strided(inputs[e["operand"]], part, i["strides"], offset).to(t))
        elif op == "in_range":
            dim, begin, end = e["range"]
            coord = torch.arange(shape[dim], device=device).reshape([-1] + [1] * (len(shape) - dim - 1))
            v = ((coord >= begin) & (coord < end)).expand(shape)
        elif op == "constant":
            v = torch.tensor(e["value"], dtype=t, device=device)
        elif op == "row_index":
            n = shape[-1] if spec["kind"] == "row_reduce" else torch.Size(shape).numel()
            v = torch.arange(n, device=device).reshape(shape[-1:] if spec["kind"] == "row_reduce" else shape)
        elif op == "cast":
            v = args[0].to(t)
        elif op == "where":
            v = torch.where(args[0], args[1], args[2]).to(t)
        elif op.startswith("reduce_"):
            x = args[0].to(t).expand(shape)
            dims = tuple(spec["reduced"]) if spec["kind"] == "column_reduce" else (-1,)
            v = {"reduce_sum": lambda: torch.sum(x, dims, keepdim=True, dtype=t),
                 "reduce_max": lambda: torch.amax(x, dims, keepdim=True),
                 "reduce_min": lambda: torch.amin(x, dims, keepdim=True)}[op]()
        elif len(args) == 1:
            v = _unary(op, args[0], t)
        elif op == "pow" and exprs[e["args"][1]]["op"] == "constant":
            v = torch.pow(args[0], exprs[e["args"][1]]["value"])  # a Python exponent, as user code writes it
        else:
            v = _binary(op, args[0], args[1], t)
        values.append(v.to(t))
    outs = [None] * len(spec["outputs"])
    for expr, out in spec["stores"]:
        outs[out] = values[expr].to(TORCH_DTYPES[spec["outputs"][out]["dtype"]]).expand(shape)
    return outs


def view_outputs(spec, storages):
    """Each output storage seen through its strides over the iteration shape."""
    return [torch.as_strided(s, spec["shape"], o["strides"], o["offset"]) for s, o in zip(storages, spec["outputs"])]


TOLERANCE = {torch.float32: (1e-5, 1e-6), torch.float64: (1e-12, 1e-14), torch.float16: (1e-3, 1e-5),
             torch.bfloat16: (8e-3, 1e-5)}


def check(spec, inputs, tolerance=None):
    """Launches the kernel and compares every output with the torch reference (NaN where torch has NaN)."""
    got = view_outputs(spec, launch(spec, inputs))
    want = reference(spec, inputs)
    for n, (g, w) in enumerate(zip(got, want)):
        rtol, atol = tolerance or TOLERANCE.get(w.dtype, (0, 0))
        torch.testing.assert_close(g, w, rtol=rtol, atol=atol, equal_nan=True,
                                   msg=lambda m: f"{spec['name']} out{n}: {m}")
