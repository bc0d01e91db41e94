"""Runs emitted kernels on the CPU (tests without a GPU): the program is compiled with the host's C++ compiler
against cuda_on_cpu.h, each kernel behind a C entry point that launches it over its grid, and called through
ctypes on torch CPU tensors. The prelude's half conversions (inline PTX) become host functions."""
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


# The prelude's PTX conversions (emit_cuda.cpp, from sm_80 on) and the host functions that stand in for them.
PTX_CONVERSIONS = {
    'asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));': "f = fc_cpu::f16_to_f32(x.bits);",
    'asm("cvt.rn.f16.f32 %0, %1;" : "=h"(x.bits) : "f"(f));': "x.bits = fc_cpu::f32_to_f16(f);",
    'asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(x.bits) : "f"(f));': "x.bits = fc_cpu::f32_to_bf16(f);",
    'asm("cvt.f32.bf16 %0, %1;" : "=f"(f) : "h"(x.bits));': "f = fc_cpu::bf16_to_f32(x.bits);",
}


FLAGS = ["-std=c++17", "-O1", "-fno-strict-aliasing", "-fPIC", "-pthread", "-w"]
_HEADER_DIR = None  # a folder holding cuda_on_cpu.h and its precompiled form, made once per process
_PROGRAMS = 0  # programs built in this process (each gets its own namespace)


def _header_dir():
    """cuda_on_cpu.h precompiled (its <thread> and friends are most of a small program's compile time)."""
    global _HEADER_DIR
    if _HEADER_DIR is None:
        folder = tempfile.mkdtemp(prefix="fastcomp-cpu-header-")
        header = os.path.join(folder, "cuda_on_cpu.h")
        shutil.copyfile(HEADER, header)
        subprocess.run([compiler(), *FLAGS, "-x", "c++-header", header, "-o", header + ".gch"], capture_output=True)
        _HEADER_DIR = folder  # without the .gch (a compiler that cannot make one) the header is simply parsed
    return _HEADER_DIR


class Program:
    """An emitted program built for the CPU; `launch(name, grid, block, pointers_and_sizes)`."""

    def __init__(self, program, names):
        for ptx, host in PTX_CONVERSIONS.items():
            program = program.replace(ptx, host)
        assert "asm(" not in program, "inline PTX the CPU cannot run"
        # A namespace of its own per program: a kernel's __shared__ arrays are static locals of its (inline, template)
        # device function, which GCC makes process-wide unique symbols even across dlopen'ed libraries, so two
        # programs with a kernel of the same name and signature (k0 of two graphs) would share them.
        global _PROGRAMS
        _PROGRAMS += 1
        ns = f"fc_program_{_PROGRAMS}"
        source = ['#include "cuda_on_cpu.h"', f"namespace {ns} {{", program, f"}}  // namespace {ns}"]
        for name in names:
            args = ", ".join(_argument(i, p) for i, p in enumerate(_signature(program, name)))
            source.append(f'extern "C" void fc_launch_{name}(void** args, unsigned grid, unsigned block) {{\n'
                          f"  fc_cpu::launch(grid, block, [&] {{ {ns}::{name}({args}); }});\n}}")
        self._dir = tempfile.TemporaryDirectory(prefix="fastcomp-cpu-kernels-")
        src, lib = os.path.join(self._dir.name, "program.cpp"), os.path.join(self._dir.name, "program.so")
        with open(src, "w") as f:
            f.write("\n".join(source))
        out = subprocess.run([compiler(), *FLAGS, "-shared", "-I", _header_dir(), src, "-o", lib],
                             capture_output=True, text=True)
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
