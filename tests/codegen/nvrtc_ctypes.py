"""NVRTC through ctypes, for tests only (the project's own loader lives in csrc/runtime): compiles a program to
PTX for compute_90 without a driver or a GPU. `find()` says why it cannot when NVRTC is missing."""
import ctypes
import glob
import os
import site
import sys

FALLBACK_PREFIX = "/root/.pyenv/versions/3.12.1/lib/python3.12/site-packages"


def _candidate_dirs():
    """(library dir, include dir) pairs: pip's nvidia/cu13 on sys.path, the pyenv 3.12 one, then a toolkit."""
    dirs = list(sys.path)
    try:
        dirs += site.getsitepackages()
    except AttributeError:
        pass
    dirs.append(FALLBACK_PREFIX)
    out = []
    for d in dirs:
        root = os.path.join(d, "nvidia", "cu13")
        pair = (os.path.join(root, "lib"), os.path.join(root, "include"))
        if pair not in out and os.path.exists(os.path.join(pair[0], "libnvrtc.so.13")):
            out.append(pair)
    for toolkit in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"):
        pair = (os.path.join(toolkit, "lib64"), os.path.join(toolkit, "include"))
        if toolkit and os.path.exists(os.path.join(pair[0], "libnvrtc.so.13")):
            out.append(pair)
    return out


class Nvrtc:
    def __init__(self, lib, include):
        # libnvrtc opens its builtins library by soname; loading it first, globally, makes that work without
        # LD_LIBRARY_PATH.
        for builtins in sorted(glob.glob(os.path.join(lib, "libnvrtc-builtins.so.*"))):
            if ".alt." not in builtins:
                ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
        self.lib = ctypes.CDLL(os.path.join(lib, "libnvrtc.so.13"))
        self.include = include
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
        self.version = (major.value, minor.value)

    def compile(self, source, arch="compute_90", extra=()):
        """Returns (ok, log, ptx); with arch="sm_XX", (ok, log, cubin bytes)."""
        lib = self.lib
        prog = ctypes.c_void_p()
        if lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"fastcomp.cu", 0, None, None) != 0:
            return False, "nvrtcCreateProgram failed", None
        try:
            opts = [f"--gpu-architecture={arch}".encode(), f"-I{self.include}".encode(), b"-std=c++17",
                    *[o.encode() for o in extra]]
            rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetProgramLog(prog, log)
            if rc != 0:
                return False, log.value.decode(errors="replace"), None
            if arch.startswith("sm_"):
                lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
                cubin = ctypes.create_string_buffer(size.value)
                lib.nvrtcGetCUBIN(prog, cubin)
                return True, log.value.decode(errors="replace"), cubin.raw
            lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
            ptx = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetPTX(prog, ptx)
            return True, log.value.decode(errors="replace"), ptx.value.decode()
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))


_found = None


def find():
    """(Nvrtc, None) or (None, reason)."""
    global _found
    if _found is None:
        dirs = _candidate_dirs()
        if not dirs:
            _found = (None, f"no libnvrtc.so.13 in nvidia/cu13/lib on sys.path, under {FALLBACK_PREFIX} or in a "
                            "CUDA toolkit")
        else:
            try:
                _found = (Nvrtc(*dirs[0]), None)
            except OSError as e:
                _found = (None, f"cannot load NVRTC from {dirs[0][0]}: {e}")
    return _found
