"""Runs emitted kernels on the CPU (tests without a GPU): the program is compiled with the host's C++ compiler
against cuda_on_cpu.h, each kernel behind a C entry point that launches it over its grid, and called through
ctypes on torch CPU tensors. f32 kernels only (half conversions are inline PTX)."""
import ctypes
import os
import re
import shutil
import subprocess
import tempfile

HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cuda_on_cpu.h")


def compiler():
    """The host C++ compiler, or None."""
    return shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++") or shutil.which("clang++")


def _signature(program, name):
    m = re.search(r'extern "C" __global__ void __launch_bounds__\(\d+\) ' + re.escape(name) + r"\(([^)]*)\)", program)
    assert m, f"kernel {name} not found in the program"
    return [p.strip() for p in m.group(1).split(",") if p.strip()]


def _argument(i, param):
    """C++ text passing args[i] as `param` ("const float* __restrict__ in0", "const int64_t p0")."""
    if "*" in param:
        return f"fc_cpu::Pointer{{args[{i}]}}"
    return f"*(const long long*)args[{i}]"


class Program:
    """An emitted program built for the CPU; `launch(name, grid, block, pointers_and_sizes)`."""

    def __init__(self, program, names):
        source = [f'#include "{HEADER}"', "namespace fc_program {", program, "}  // namespace fc_program"]
        for name in names:
            args = ", ".join(_argument(i, p) for i, p in enumerate(_signature(program, name)))
            source.append(f'extern "C" void fc_launch_{name}(void** args, unsigned grid, unsigned block) {{\n'
                          f"  fc_cpu::launch(grid, block, [&] {{ fc_program::{name}({args}); }});\n}}")
        self._dir = tempfile.TemporaryDirectory(prefix="fastcomp-cpu-kernels-")
        src, lib = os.path.join(self._dir.name, "program.cpp"), os.path.join(self._dir.name, "program.so")
        with open(src, "w") as f:
            f.write("\n".join(source))
        out = subprocess.run([compiler(), "-std=c++17", "-O1", "-fno-strict-aliasing", "-fPIC", "-shared", "-pthread",
                              "-w", src, "-o", lib], capture_output=True, text=True)
        assert out.returncode == 0, f"the host compiler rejected the program:\n{out.stderr[-6000:]}"
        self._lib = ctypes.CDLL(lib)

    def launch(self, name, grid, block, values):
        """`values`: torch tensors (their data pointers) then ints (the size parameters), in parameter order."""
        import torch

        keep = []
        slots = (ctypes.c_void_p * len(values))()
        for i, v in enumerate(values):
            if isinstance(v, torch.Tensor):
                slots[i] = v.data_ptr()
            else:
                keep.append(ctypes.c_longlong(int(v)))
                slots[i] = ctypes.addressof(keep[-1])
        getattr(self._lib, f"fc_launch_{name}")(slots, ctypes.c_uint(grid), ctypes.c_uint(block))
