"""CUDA runtime: finding the CUDA libraries, NVRTC compiles (to PTX and cubin, on the CPU: no driver needed), the
kernel cache (memory, disk, other processes, corrupt files, concurrent writers) and, on a GPU, loading a module and
launching a kernel on torch's current stream."""
import concurrent.futures
import glob
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap

import pytest

import fastcomp
from fastcomp._C import _testing as T

try:
    NVRTC_VERSION, NVRTC_ERROR = T.nvrtc_version(), ""
except T.CudaLibraryError as e:
    NVRTC_VERSION, NVRTC_ERROR = None, str(e)

needs_nvrtc = pytest.mark.skipif(
    NVRTC_VERSION is None, reason=f"NVRTC not found (pip install nvidia-cuda-nvrtc): {NVRTC_ERROR}")

SCALE_ADD = textwrap.dedent("""\
    extern "C" __global__ void scale_add(const float* a, float* out, int n) {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) out[i] = a[i] * 2.0f + 1.0f;
    }
    """)

HALF_AND_BF16 = textwrap.dedent("""\
    #include <cuda_fp16.h>
    #include <cuda_bf16.h>
    extern "C" __global__ void scale_add_half(const __half* a, __half* out, int n) {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) out[i] = __float2half(__half2float(a[i]) * 2.0f + 1.0f);
    }
    extern "C" __global__ void scale_add_bf16(const __nv_bfloat16* a, __nv_bfloat16* out, int n) {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) out[i] = __float2bfloat16(__bfloat162float(a[i]) * 2.0f + 1.0f);
    }
    """)

PACKAGE_ROOT = os.path.dirname(os.path.dirname(fastcomp.__file__))  # so subprocesses import this fastcomp


def entries(ptx):
    return re.findall(r"\.entry\s+(\w+)\s*\(", ptx.decode())


def run_python(code, **env):
    """Runs `code` in a fresh interpreter (environment plus `env`; a None value unsets) and returns its stdout."""
    full_env = dict(os.environ, PYTHONPATH=os.pathsep.join([PACKAGE_ROOT, os.environ.get("PYTHONPATH", "")]))
    for key, value in env.items():
        if value is None:
            full_env.pop(key, None)
        else:
            full_env[key] = value
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


# ---------------------------------------------------------------------------------------------------------
# Finding the libraries


def test_nvrtc_is_found_when_its_wheel_is_installed():
    try:
        dist = importlib.metadata.distribution("nvidia-cuda-nvrtc")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("the nvidia-cuda-nvrtc wheel is not installed in this Python")
    assert NVRTC_VERSION is not None, NVRTC_ERROR
    nvrtc = next(s for s in T.cuda_libraries_status() if s["name"] == "NVRTC")
    wheel_files = [str(dist.locate_file(f)) for f in dist.files if "libnvrtc.so" in str(f)]
    assert nvrtc["path"] is not None and nvrtc["error"] == ""
    # The wheel's copy, unless one was loaded earlier (e.g. by a CUDA build of torch) or chosen explicitly.
    if not os.environ.get("FASTCOMP_CUDA_HOME") and "/usr/local/cuda" not in nvrtc["path"]:
        assert os.path.realpath(nvrtc["path"]) in {os.path.realpath(f) for f in wheel_files}


def test_missing_library_error_names_every_place_searched(tmp_path, monkeypatch):
    empty_home = tmp_path / "empty_toolkit"
    empty_home.mkdir()
    monkeypatch.setenv("FASTCOMP_CUDA_HOME", str(empty_home))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "no_such_toolkit"))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    with pytest.raises(T.CudaLibraryError) as info:
        T.cuda_find_library("Foo", ["libfastcomp_missing.so.2", "libfastcomp_missing.so.1"], fix="install foo")
    message = str(info.value)
    assert message.startswith("fastcomp could not load Foo (libfastcomp_missing.so.2 or libfastcomp_missing.so.1)")
    assert f"{empty_home} (FASTCOMP_CUDA_HOME): no lib64/ or lib/ folder" in message
    assert f"{tmp_path / 'no_such_toolkit'} (CUDA_HOME): no such directory" in message
    assert "CUDA_PATH: not set" in message
    assert "already loaded in this process: no" in message
    assert "/usr/local/cuda" in message
    assert "dynamic loader path (LD_LIBRARY_PATH, ldconfig cache): libfastcomp_missing.so.2" in message
    for entry in filter(None, sys.path):
        assert entry in message, f"sys.path entry {entry} is not in the message"
    assert message.endswith("to fix: install foo")
    assert isinstance(info.value, RuntimeError)


def test_library_in_fastcomp_cuda_home_comes_before_cuda_home(tmp_path, monkeypatch):
    """Any loadable shared library serves to check the order: the smallest of Python's extension modules, copied
    (a symlink would resolve to a library that may already be loaded, under its own path)."""
    extension = min(glob.glob(os.path.join(sysconfig.get_config_var("DESTSHARED"), "*.so")), key=os.path.getsize)
    for home in ["explicit", "toolkit"]:
        (tmp_path / home / "lib64").mkdir(parents=True)
        shutil.copy(extension, tmp_path / home / "lib64" / "libfastcomp_test.so.1")
    monkeypatch.setenv("FASTCOMP_CUDA_HOME", str(tmp_path / "explicit"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "toolkit"))
    found = T.cuda_find_library("test", ["libfastcomp_test.so.1"])
    assert found == str(tmp_path / "explicit" / "lib64" / "libfastcomp_test.so.1")


@needs_nvrtc
def test_missing_nvrtc_says_how_to_install_it(tmp_path):
    """A fresh process whose sys.path hides the wheel folders and whose FASTCOMP_CUDA_HOME is empty."""
    out = run_python("""
        import os, sys
        from fastcomp._C import _testing as T
        sys.path[:] = [p for p in sys.path if not os.path.isdir(os.path.join(p, "nvidia"))]
        try:
            print("FOUND", T.nvrtc_version())
        except T.CudaLibraryError as e:
            print(e)
        try:
            T.nvrtc_compile("__global__ void k() {}", "k.cu", 9, 0)
        except RuntimeError as e:
            print("COMPILE:", type(e).__name__)
        """, FASTCOMP_CUDA_HOME=str(tmp_path), CUDA_HOME=None, CUDA_PATH=None)
    if out.startswith("FOUND"):
        pytest.skip("NVRTC is also installed outside the pip wheel folders (a toolkit or the loader path)")
    assert out.startswith("fastcomp could not load NVRTC (libnvrtc.so.13 or libnvrtc.so.12); searched:")
    assert f"{tmp_path} (FASTCOMP_CUDA_HOME): no lib64/ or lib/ folder" in out
    assert "to fix: pip install nvidia-cuda-nvrtc" in out and "FASTCOMP_CUDA_HOME" in out
    assert "COMPILE: CudaLibraryError" in out


# ---------------------------------------------------------------------------------------------------------
# NVRTC


@needs_nvrtc
def test_compile_elementwise_kernel_to_ptx():
    ptx = T.nvrtc_compile(SCALE_ADD, "scale_add.cu", 9, 0)
    assert entries(ptx) == ["scale_add"]
    assert b".target sm_90" in ptx
    assert not ptx.endswith(b"\0")


@needs_nvrtc
def test_compile_one_program_with_many_kernels():
    second = SCALE_ADD.replace("scale_add", "scale_add_again")
    ptx = T.nvrtc_compile(SCALE_ADD + second, "two.cu", 8, 0)
    assert sorted(entries(ptx)) == ["scale_add", "scale_add_again"]
    assert b".target sm_80" in ptx


@needs_nvrtc
def test_compile_half_and_bfloat16_kernels_finds_the_cuda_headers():
    options = T.nvrtc_options(HALF_AND_BF16, 9, 0)
    include = [o[2:] for o in options if o.startswith("-I")]
    assert len(include) == 1 and os.path.isfile(os.path.join(include[0], "cuda_fp16.h"))
    ptx = T.nvrtc_compile(HALF_AND_BF16, "half.cu", 9, 0)
    assert sorted(entries(ptx)) == ["scale_add_bf16", "scale_add_half"]


# What fastcomp.config.nvrtc_threads = 0 (the default) gives: the cores this process may run on but one, 1 to 8.
USABLE_THREADS = max(1, min(len(os.sched_getaffinity(0)) - 1, 8))


def split_compile(threads):
    return [f"--split-compile={threads}"] if threads > 1 else []


@needs_nvrtc
def test_options_are_ieee_by_default_and_take_no_include_path_without_includes():
    fast = ((["--minimal"] if NVRTC_VERSION >= (12, 4) else []) + (["--no-cache"] if NVRTC_VERSION >= (12, 9) else [])
            + split_compile(USABLE_THREADS))
    assert T.nvrtc_options(SCALE_ADD, 9, 0) == ["-arch=compute_90", "-std=c++17", "-default-device", *fast]
    assert T.nvrtc_options(SCALE_ADD, 9, 0, kind="cubin", options=["-lineinfo"]) == [
        "-arch=sm_90", "-std=c++17", "-default-device", *fast, "-lineinfo"]


def test_a_program_compiled_beside_others_takes_its_share_of_the_threads():
    base = T.nvrtc_options(SCALE_ADD, 9, 0, threads=1)
    assert not any(o.startswith("--split-compile") for o in base)
    assert T.nvrtc_options(SCALE_ADD, 9, 0, threads=3) == [*base, "--split-compile=3"]


def test_nvrtc_threads_leave_one_core_to_the_program_and_take_at_most_8():
    assert [T.nvrtc_threads(0, cores) for cores in (1, 2, 3, 4, 16, 128)] == [1, 1, 2, 3, 8, 8]
    assert T.nvrtc_threads(3, 2) == 3 and T.nvrtc_threads(1, 64) == 1  # the config wins


def test_usable_cores_are_the_affinity_mask_not_the_machine():
    assert T.usable_cores() == len(os.sched_getaffinity(0))
    out = run_python("""
        import os
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        from fastcomp._C import _testing as T
        print(T.usable_cores())
        """)
    assert out.strip() == "1"


@needs_nvrtc
def test_split_compile_option_follows_fastcomp_config_and_its_environment_variable():
    def split_options(out):
        return re.findall(r"--split-compile=\d+", str(out))

    assert split_options(T.nvrtc_options(SCALE_ADD, 9, 0)) == split_compile(USABLE_THREADS)
    with fastcomp.config.patch(nvrtc_threads=3):
        assert split_options(T.nvrtc_options(SCALE_ADD, 9, 0)) == ["--split-compile=3"]
    with fastcomp.config.patch(nvrtc_threads=1):  # one thread: no option, the serial compile's cache key
        assert split_options(T.nvrtc_options(SCALE_ADD, 9, 0)) == []
    out = run_python("""
        from fastcomp._C import _testing as T
        print(T.nvrtc_options("", 9, 0))
        """, FASTCOMP_NVRTC_THREADS="5")
    assert split_options(out) == ["--split-compile=5"]


@needs_nvrtc
def test_fast_compile_level_follows_fastcomp_config_and_a_bad_level_is_refused():
    def levels(options):
        return [o for o in options if "fast-compile" in o]

    nvrtc_at_least_12_8 = tuple(T.nvrtc_version()) >= (12, 8)
    assert levels(T.nvrtc_options(SCALE_ADD, 9, 0)) == []
    with fastcomp.config.patch(nvrtc_fast_compile="min"):
        assert levels(T.nvrtc_options(SCALE_ADD, 9, 0)) == (["--Ofast-compile=min"] if nvrtc_at_least_12_8 else [])
        assert T.nvrtc_compile(SCALE_ADD, "scale_add.cu", 9, 0, kind="cubin").startswith(b"\x7fELF")
    with pytest.raises(ValueError, match="nvrtc_fast_compile='fast' is not one of '', 'min', 'mid', 'max'"):
        fastcomp.config.nvrtc_fast_compile = "fast"
    assert fastcomp.config.nvrtc_fast_compile == ""  # the refused value did not stick
    assert levels(T.nvrtc_options(SCALE_ADD, 9, 0)) == []


@needs_nvrtc
def test_compile_to_cubin_needs_no_gpu():
    cubin = T.nvrtc_compile(SCALE_ADD, "scale_add.cu", 9, 0, kind="cubin")
    assert cubin.startswith(b"\x7fELF")
    assert b"scale_add" in cubin


@needs_nvrtc
def test_syntax_error_raises_with_nvrtc_log():
    source = SCALE_ADD.replace("a[i] * 2.0f", "a[i] * undefined_thing")
    with pytest.raises(T.NvrtcError) as info:
        T.nvrtc_compile(source, "broken_kernel.cu", 9, 0)
    message = str(info.value)
    assert message.startswith("fastcomp::runtime::cuda::compile_cuda(): NVRTC ")
    assert "failed to compile program 'broken_kernel.cu' for sm_90 (NVRTC_ERROR_COMPILATION)" in message
    assert "options: -arch=compute_90 -std=c++17 -default-device" in message
    assert 'broken_kernel.cu(3): error: identifier "undefined_thing" is undefined' in message


@needs_nvrtc
def test_arch_nvrtc_cannot_target_is_rejected_with_the_supported_range():
    with pytest.raises(T.NvrtcError, match=r"cannot compile for sm_20 \(it supports sm_\d+ to sm_\d+\); to fix"):
        T.nvrtc_compile(SCALE_ADD, "scale_add.cu", 2, 0)


def test_unknown_output_kind_is_a_value_error():
    with pytest.raises(ValueError, match="kind must be 'ptx' or 'cubin', not 'sass'"):
        T.nvrtc_compile(SCALE_ADD, "scale_add.cu", 9, 0, kind="sass")


@needs_nvrtc
def test_compiles_run_in_parallel_threads_without_the_gil():
    sources = [SCALE_ADD.replace("2.0f", f"{k}.0f") for k in range(4)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        ptxs = list(pool.map(lambda s: T.nvrtc_compile(s, "scale_add.cu", 9, 0), sources))
    for k, ptx in enumerate(ptxs):
        assert entries(ptx) == ["scale_add"]
        assert (b"0f40400000" in ptx) == (k == 3)  # 3.0f, as PTX spells the constant


# ---------------------------------------------------------------------------------------------------------
# Kernel cache


@pytest.fixture
def cache_dir(tmp_path):
    """The process's kernel cache, emptied and pointed at a fresh folder for the test."""
    T.kernel_cache_reset(str(tmp_path))
    yield tmp_path
    T.kernel_cache_reset()


def cache_files(directory):
    return sorted(glob.glob(str(directory / "kernels" / "*.bin")))


def assert_stats(**expected):
    got = T.kernel_cache_stats()
    assert {k: got[k] for k in expected} == expected


def compile_cached(source=SCALE_ADD, name="scale_add.cu", arch=(9, 0), **kw):
    return T.kernel_cache_get_or_compile(source, name, *arch, **kw)


@needs_nvrtc
def test_cache_miss_then_memory_hit(cache_dir):
    assert T.kernel_cache_dir() == str(cache_dir)
    first = compile_cached()
    assert_stats(misses=1, memory_hits=0, disk_hits=0)
    assert compile_cached() == first
    assert_stats(misses=1, memory_hits=1, disk_hits=0)
    assert first == T.nvrtc_compile(SCALE_ADD, "scale_add.cu", 9, 0)
    assert len(cache_files(cache_dir)) == 1


@needs_nvrtc
def test_cache_key_covers_arch_kind_options_threads_name_and_source(cache_dir):
    compile_cached()
    compile_cached(arch=(8, 0))
    compile_cached(kind="cubin")
    compile_cached(options=["-lineinfo"])
    compile_cached(name="other.cu")
    compile_cached(source=SCALE_ADD.replace("1.0f", "3.0f"))
    with fastcomp.config.patch(nvrtc_threads=1 if USABLE_THREADS > 1 else 2):
        compile_cached()
    assert_stats(misses=7, memory_hits=0)
    assert len(cache_files(cache_dir)) == 7


@needs_nvrtc
def test_cache_disk_hit_in_a_new_process(cache_dir):
    first = compile_cached()
    out = run_python(f"""
        from fastcomp._C import _testing as T
        binary = T.kernel_cache_get_or_compile({SCALE_ADD!r}, "scale_add.cu", 9, 0)
        print(T.kernel_cache_stats(), binary.hex())
        """, FASTCOMP_CACHE_DIR=str(cache_dir))
    stats_text, binary_hex = out.rsplit(" ", 1)
    assert "'disk_hits': 1" in stats_text and "'misses': 0" in stats_text
    assert bytes.fromhex(binary_hex) == first


def test_cache_dir_follows_xdg_cache_home(tmp_path):
    out = run_python("""
        from fastcomp._C import _testing as T
        print(T.kernel_cache_dir())
        """, FASTCOMP_CACHE_DIR=None, XDG_CACHE_HOME=str(tmp_path))
    assert out.strip() == str(tmp_path / "fastcomp")


CORRUPTIONS = {
    "empty": lambda data: b"",
    "truncated": lambda data: data[: len(data) // 2],
    "header only": lambda data: data[:40],
    "flipped binary byte": lambda data: data[:-10] + bytes([data[-10] ^ 0xFF]) + data[-9:],
    "foreign file": lambda data: b"\x7fELF" + os.urandom(200),
    "other format version": lambda data: data[:8] + (99).to_bytes(8, "little") + data[16:],
    "sizes too large": lambda data: data[:16] + (2**62).to_bytes(8, "little") + data[24:],
}


@needs_nvrtc
@pytest.mark.parametrize("corruption", CORRUPTIONS)
def test_corrupt_cache_file_is_ignored_recompiled_and_replaced(cache_dir, corruption):
    first = compile_cached()
    [path] = cache_files(cache_dir)
    with open(path, "rb") as f:
        good = f.read()
    with open(path, "wb") as f:
        f.write(CORRUPTIONS[corruption](good))
    T.kernel_cache_reset(str(cache_dir))  # what a new process would see
    assert compile_cached() == first
    assert_stats(misses=1, rejected_files=1, disk_hits=0)
    with open(path, "rb") as f:
        assert f.read() == good
    T.kernel_cache_reset(str(cache_dir))
    compile_cached()
    assert_stats(misses=0, disk_hits=1)


@needs_nvrtc
def test_cache_file_of_another_key_is_a_miss(cache_dir):
    """A file name collision (two keys with one hash) must not return the other key's kernel."""
    compile_cached()
    [path] = cache_files(cache_dir)
    other = SCALE_ADD.replace("1.0f", "5.0f")
    compile_cached(source=other)
    [other_path] = [p for p in cache_files(cache_dir) if p != path]
    os.replace(other_path, path)
    T.kernel_cache_reset(str(cache_dir))
    assert compile_cached() == T.nvrtc_compile(SCALE_ADD, "scale_add.cu", 9, 0)
    assert_stats(misses=1, rejected_files=1)


@needs_nvrtc
def test_concurrent_processes_writing_one_cache_both_succeed(cache_dir):
    sources = [SCALE_ADD.replace("1.0f", f"{k}.5f") for k in range(3)]
    code = textwrap.dedent(f"""
        from fastcomp._C import _testing as T
        print(",".join(T.kernel_cache_get_or_compile(s, "scale_add.cu", 9, 0).hex() for s in {sources!r}))
        """)
    env = dict(os.environ, FASTCOMP_CACHE_DIR=str(cache_dir),
               PYTHONPATH=os.pathsep.join([PACKAGE_ROOT, os.environ.get("PYTHONPATH", "")]))
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outputs):
        assert p.returncode == 0, err
    assert outputs[0][0] == outputs[1][0]
    assert len(cache_files(cache_dir)) == 3
    assert not glob.glob(str(cache_dir / "kernels" / ".*"))  # no temporary files left behind
    T.kernel_cache_reset(str(cache_dir))
    for source in sources:
        compile_cached(source=source)
    assert_stats(disk_hits=3, misses=0, rejected_files=0)


@needs_nvrtc
def test_unwritable_cache_dir_keeps_kernels_in_memory(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    T.kernel_cache_reset(str(blocker / "cache"))
    try:
        first = compile_cached()
        assert_stats(misses=1, write_failures=1)
        assert compile_cached() == first
        assert_stats(memory_hits=1)
    finally:
        T.kernel_cache_reset()


@needs_nvrtc
def test_memory_only_cache_writes_no_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    T.kernel_cache_reset("")
    try:
        compile_cached()
        compile_cached()
        assert_stats(misses=1, memory_hits=1, write_failures=0)
        assert os.listdir(tmp_path) == []
    finally:
        T.kernel_cache_reset()


# ---------------------------------------------------------------------------------------------------------
# The driver path on the CPU: a stand-in libcuda.so.1 that runs `scale_add` on host memory, so that CI checks the
# function table, the context handling, argument passing and the CUDA error messages without a GPU.

FAKE_DRIVER = r"""
#include <stddef.h>
#include <string.h>
typedef int CUresult;
static int initialized, primary;
static __thread void* current;
static const char* known(CUresult e, int text) {
  switch (e) {
    case 0: return text ? "no error" : "CUDA_SUCCESS";
    case 101: return text ? "invalid device ordinal" : "CUDA_ERROR_INVALID_DEVICE";
    case 200: return text ? "device kernel image is invalid" : "CUDA_ERROR_INVALID_IMAGE";
    case 201: return text ? "invalid device context" : "CUDA_ERROR_INVALID_CONTEXT";
    case 500: return text ? "named symbol not found" : "CUDA_ERROR_NOT_FOUND";
  }
  return NULL;
}
CUresult cuGetErrorName(CUresult e, const char** s) { *s = known(e, 0); return *s ? 0 : 1; }
CUresult cuGetErrorString(CUresult e, const char** s) { *s = known(e, 1); return *s ? 0 : 1; }
CUresult cuInit(unsigned flags) { initialized = 1; return 0; }
CUresult cuGetExportTable(const void** table, const void* id) { return 801; }  /* NVRTC asks; "not supported" */
CUresult cuDeviceGet(int* d, int ordinal) { *d = ordinal; return initialized ? (ordinal == 0 ? 0 : 101) : 3; }
CUresult cuDeviceGetAttribute(int* v, int attribute, int d) { *v = attribute == 75 ? 9 : 0; return 0; }
CUresult cuDevicePrimaryCtxRetain(void** c, int d) { *c = &primary; return 0; }
CUresult cuCtxGetCurrent(void** c) { *c = current; return 0; }
CUresult cuCtxSetCurrent(void* c) { current = c; return 0; }
void* fake_current_context(void) { return current; }
CUresult cuModuleLoadData(void** m, const void* image) {
  if (current != &primary) return 201;
  if (memcmp(image, "\x7f" "ELF", 4) != 0) return 200;
  *m = (void*)image;
  return 0;
}
CUresult cuModuleUnload(void* m) { return 0; }
CUresult cuModuleGetFunction(void** f, void* m, const char* name) {
  *f = (void*)1;
  return strcmp(name, "scale_add") == 0 ? 0 : 500;
}
CUresult cuFuncSetAttribute(void* f, int attribute, int value) { return 0; }
CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void* stream, void** params, void** extra) {
  if (current != &primary) return 201;
  const float* a = *(const float**)params[0];
  float* out = *(float**)params[1];
  int n = *(const int*)params[2];
  for (unsigned i = 0; i < gx * bx; ++i)
    if ((int)i < n) out[i] = a[i] * 2.0f + 1.0f;
  return 0;
}
CUresult cuStreamSynchronize(void* stream) { return 0; }
CUresult cuMemcpyAsync(unsigned long long dst, unsigned long long src, size_t n, void* s) { return 0; }
CUresult cuGraphLaunch(void* exec, void* stream) { return 0; }
CUresult cuEventCreate(void** e, unsigned flags) { return 0; }
CUresult cuEventRecord(void* e, void* stream) { return 0; }
CUresult cuEventSynchronize(void* e) { return 0; }
CUresult cuEventElapsedTime(float* ms, void* start, void* end) { *ms = 0; return 0; }
CUresult cuEventDestroy_v2(void* e) { return 0; }
CUresult cuStreamIsCapturing(void* stream, int* status) { *status = 0; return 0; }
CUresult cuStreamCreate(void** stream, unsigned flags) { return 0; }
CUresult cuStreamDestroy_v2(void* stream) { return 0; }
CUresult cuStreamWaitEvent(void* stream, void* event, unsigned flags) { return 0; }
CUresult cuStreamBeginCapture_v2(void* stream, int mode) { return 0; }
CUresult cuStreamEndCapture(void* stream, void** graph) { return 0; }
CUresult cuGraphInstantiateWithFlags(void** exec, void* graph, unsigned long long flags) { return 0; }
CUresult cuGraphExecDestroy(void* exec) { return 0; }
CUresult cuGraphDestroy(void* graph) { return 0; }
"""


@needs_nvrtc
def test_driver_table_context_arguments_and_errors_with_a_stand_in_driver(tmp_path):
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the stand-in driver")
    (tmp_path / "fake_cuda.c").write_text(FAKE_DRIVER)
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(tmp_path / "libcuda.so.1"), str(tmp_path / "fake_cuda.c")],
                   check=True)
    out = run_python(f"""
        import ctypes
        import torch
        from fastcomp._C import _testing as T
        driver = next(s for s in T.cuda_libraries_status() if s["name"] == "CUDA driver")
        print("driver:", driver["path"])
        print("arch:", T.cuda_device_arch(0))
        cubin = T.nvrtc_compile({SCALE_ADD!r}, "scale_add.cu", 9, 0, kind="cubin")
        a = torch.randn(1000)
        out = torch.zeros(1000)
        T.load_and_launch(cubin, "scale_add", (4, 1, 1), (256, 1, 1), [a.data_ptr(), out.data_ptr(), 1000], 0)
        print("equal:", torch.equal(out, a * 2 + 1))
        fake_current_context = ctypes.CDLL("libcuda.so.1").fake_current_context
        fake_current_context.restype = ctypes.c_void_p
        print("context restored:", fake_current_context() is None)
        for call in [lambda: T.cuda_device_arch(3),
                     lambda: T.load_and_launch(b"not a cubin", "scale_add", (1, 1, 1), (1, 1, 1), [], 0),
                     lambda: T.load_and_launch(cubin, "scale_ad", (1, 1, 1), (1, 1, 1), [], 0),
                     lambda: T.load_and_launch(cubin, "scale_add", (1, 1, 1), (1, 1, 1), ["x"], 0)]:
            try:
                call()
            except (T.CudaError, TypeError) as e:
                print(type(e).__name__ + ":", e)
        """, LD_LIBRARY_PATH=str(tmp_path))
    lines = out.splitlines()
    if lines[0] != f"driver: {tmp_path / 'libcuda.so.1'}":
        pytest.skip(f"the real CUDA driver was loaded before the stand-in ({lines[0]})")
    assert lines[1:4] == ["arch: (9, 0)", "equal: True", "context restored: True"]
    assert lines[4] == ("CudaError: fastcomp::runtime::cuda::CudaArch::of_device(): cuDeviceGet(&handle, device) "
                        "failed: CUDA_ERROR_INVALID_DEVICE (invalid device ordinal)")
    assert lines[5] == ("CudaError: fastcomp::runtime::cuda::LoadedModule::LoadedModule(): cuModuleLoadData(&module_, "
                        "image.c_str()) failed: CUDA_ERROR_INVALID_IMAGE (device kernel image is invalid)")
    assert lines[6].startswith("CudaError: fastcomp::runtime::cuda::LoadedModule::get_function(): the module has no "
                               "kernel named 'scale_ad'")
    assert lines[7] == "TypeError: kernel arguments must be int or float, not <class 'str'>"


def test_missing_driver_says_to_install_it():
    driver = next(s for s in T.cuda_libraries_status() if s["name"] == "CUDA driver")
    if driver["path"] is not None:
        pytest.skip(f"a CUDA driver is installed ({driver['path']})")
    with pytest.raises(T.CudaLibraryError) as info:
        T.cuda_device_arch(0)
    message = str(info.value)
    assert message.startswith("fastcomp could not load CUDA driver (libcuda.so.1); searched:")
    assert "to fix: install the NVIDIA driver" in message
    assert "FASTCOMP_CUDA_HOME" not in message  # the driver never comes from a toolkit or wheel


# ---------------------------------------------------------------------------------------------------------
# GPU: load and launch on torch's stream


def device_arch():
    import torch

    return T.cuda_device_arch(torch.cuda.current_device())


def launch_scale_add(image, function, a, out, stream):
    n = a.numel()
    T.load_and_launch(image, function, ((n + 255) // 256, 1, 1), (256, 1, 1), [a.data_ptr(), out.data_ptr(), n],
                      stream.cuda_stream, device=a.device.index)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["cubin", "ptx"])
def test_kernel_runs_on_torch_current_stream(kind, cache_dir):
    import torch

    a = torch.randn(10_000, device="cuda")
    out = torch.full_like(a, float("nan"))
    image = T.kernel_cache_get_or_compile(SCALE_ADD, "scale_add.cu", *device_arch(), kind=kind)
    device_before = torch.cuda.current_device()
    launch_scale_add(image, "scale_add", a, out, torch.cuda.current_stream())
    assert torch.cuda.current_device() == device_before
    assert torch.equal(out, a * 2 + 1)  # 2a is exact, so a fused multiply-add rounds as torch does


@pytest.mark.gpu
def test_kernel_runs_on_a_side_stream():
    import torch

    stream = torch.cuda.Stream()
    a = torch.randn(4097, device="cuda")
    out = torch.empty_like(a)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        launch_scale_add(T.nvrtc_compile(SCALE_ADD, "scale_add.cu", *device_arch(), kind="cubin"), "scale_add", a,
                         out, stream)
    torch.cuda.current_stream().wait_stream(stream)
    assert torch.equal(out, a * 2 + 1)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_and_bfloat16_kernels_match_torch(dtype):
    import torch

    dtype = getattr(torch, dtype)
    a = torch.randn(3000, device="cuda").to(dtype)
    out = torch.empty_like(a)
    cubin = T.nvrtc_compile(HALF_AND_BF16, "half.cu", *device_arch(), kind="cubin")
    function = "scale_add_half" if dtype == torch.float16 else "scale_add_bf16"
    launch_scale_add(cubin, function, a, out, torch.cuda.current_stream())
    assert torch.equal(out, (a.float() * 2 + 1).to(dtype))


@pytest.mark.gpu
def test_unknown_kernel_name_says_kernels_are_found_by_extern_c_name():
    import torch

    cubin = T.nvrtc_compile(SCALE_ADD, "scale_add.cu", *device_arch(), kind="cubin")
    with pytest.raises(T.CudaError, match=r"the module has no kernel named 'scale_ad'.*extern \"C\""):
        T.load_and_launch(cubin, "scale_ad", (1, 1, 1), (1, 1, 1), [], torch.cuda.current_stream().cuda_stream)


@pytest.mark.gpu
def test_cubin_for_another_arch_fails_with_the_cuda_error_name():
    import torch

    major, _ = device_arch()
    other = (8, 0) if major == 9 else (9, 0)  # cubins run only on GPUs of their own major arch
    cubin = T.nvrtc_compile(SCALE_ADD, "scale_add.cu", *other, kind="cubin")
    with pytest.raises(T.CudaError, match=r"cuModuleLoadData\(.*\) failed: CUDA_ERROR_\w+"):
        T.load_and_launch(cubin, "scale_add", (1, 1, 1), (1, 1, 1), [0, 0, 0],
                          torch.cuda.current_stream().cuda_stream)
