// Finding and opening the CUDA shared libraries (driver, NVRTC, cuBLAS, cuBLASLt) at first use. Nothing CUDA
// is linked at build time, so a CPU-only machine imports fastcomp fine and only CUDA work needs them.
//
// Search order for each library, first hit wins (the same places CUDA builds of torch get theirs from):
//   1. $FASTCOMP_CUDA_HOME/lib64 and /lib     an explicit choice beats every guess
//   2. the copy already loaded in this process (by torch, usually), so there is one NVRTC/cuBLAS per process
//   3. $CUDA_HOME/lib64, $CUDA_PATH/lib64
//   4. <entry>/nvidia/cu13/lib, then <entry>/nvidia/*/lib, for every directory entry of Python's sys.path
//      (the layout of NVIDIA's pip wheels: nvidia-cuda-nvrtc, nvidia-cublas, ...)
//   5. /usr/local/cuda/lib64
//   6. the bare soname, i.e. the dynamic loader's own path (LD_LIBRARY_PATH, ldconfig cache)
// In each place the sonames are tried newest first (libnvrtc.so.13, then .so.12). The driver, libcuda.so.1,
// comes with the NVIDIA driver rather than a toolkit or wheel, so it is looked up only by 2 and 6: a toolkit's
// lib64/stubs/libcuda.so is a link-time stub that fails every call.
#pragma once
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace fastcomp::runtime::cuda {

// A CUDA library is missing or cannot be loaded. The message names every place searched and how to fix it.
struct CudaLibraryError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class Library { Driver, Nvrtc, CublasLt, Cublas };
inline constexpr Library kAllLibraries[] = {Library::Driver, Library::Nvrtc, Library::CublasLt, Library::Cublas};

struct LoadedLibrary {
  void* handle = nullptr;  // from dlopen; never closed (CUDA libraries do not support unloading)
  std::string path;        // the file the loader actually opened
};

const char* library_name(Library library);  // "CUDA driver", "NVRTC", ...

// Opens `library` on first use, once per process (thread-safe; takes the GIL briefly to read sys.path, so it
// may be called with or without the GIL). A failure is remembered: later calls throw the same error.
// Throws CudaLibraryError.
const LoadedLibrary& load_library(Library library);

// What load_library(library) gives, as a value: the library, or the error text. Loads it if not yet tried.
struct LibraryStatus {
  Library library;
  std::optional<LoadedLibrary> loaded;
  std::string error;  // empty when loaded
};
LibraryStatus library_status(Library library);

// Runs the search above, now, for arbitrary sonames, without remembering the outcome: lets tests check the
// error message of a library that cannot be found. Throws CudaLibraryError naming `what` and `fix`.
LoadedLibrary find_library(const std::string& what, const std::vector<std::string>& sonames, const std::string& fix);

// The CUDA include directory (the one holding cuda_fp16.h) that matches the loaded NVRTC best: the `include`
// next to NVRTC's `lib`, then the include directories of the places above. Empty if none has it; `searched`
// (if given) receives every directory tried, for error messages.
std::optional<std::filesystem::path> cuda_include_dir(std::vector<std::string>* searched = nullptr);

}  // namespace fastcomp::runtime::cuda
