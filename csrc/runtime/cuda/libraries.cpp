#include "runtime/cuda/libraries.h"

#include <Python.h>
#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <set>
#include <system_error>

namespace fastcomp::runtime::cuda {
namespace fs = std::filesystem;
namespace {

struct LibrarySpec {
  const char* name;
  std::vector<std::string> sonames;  // newest first
  bool toolkit_library;              // false for the driver: it is never part of a toolkit or wheel
  const char* fix;
};

const LibrarySpec& spec(Library library) {
  static const std::array<LibrarySpec, 4> specs = {{
      {"CUDA driver", {"libcuda.so.1"}, false,
       "install the NVIDIA driver (libcuda.so.1 comes with the driver, not with the CUDA toolkit or a pip wheel); "
       "in a container, start it with GPU access (e.g. docker run --gpus all)"},
      {"NVRTC", {"libnvrtc.so.13", "libnvrtc.so.12"}, true,
       "pip install nvidia-cuda-nvrtc (into the Python environment that runs fastcomp), or set FASTCOMP_CUDA_HOME "
       "to a CUDA toolkit whose lib64/ holds libnvrtc.so.13"},
      {"cuBLASLt", {"libcublasLt.so.13", "libcublasLt.so.12"}, true,
       "pip install nvidia-cublas (into the Python environment that runs fastcomp), or set FASTCOMP_CUDA_HOME to a "
       "CUDA toolkit whose lib64/ holds libcublasLt.so.13"},
      {"cuBLAS", {"libcublas.so.13", "libcublas.so.12"}, true,
       "pip install nvidia-cublas (into the Python environment that runs fastcomp), or set FASTCOMP_CUDA_HOME to a "
       "CUDA toolkit whose lib64/ holds libcublas.so.13"},
  }};
  return specs[static_cast<size_t>(library)];
}

// A directory that may hold a CUDA installation: a toolkit (lib64/, include/) or a wheel folder such as
// site-packages/nvidia/cu13 (lib/, include/). A root with an empty path is a place that could not be searched,
// kept so that the error message can say why ("CUDA_HOME: not set").
struct Root {
  fs::path path;
  std::string origin;  // why it is searched, for error messages: "FASTCOMP_CUDA_HOME", "sys.path", ...
  std::string not_searched = {};
};

// Every place to search, read from the environment and sys.path at the time of the call.
struct SearchRoots {
  std::vector<Root> explicit_roots;  // searched before the already-loaded copy
  std::vector<Root> roots;           // searched after it
};

bool is_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}
bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);  // follows symlinks, as dlopen does
}

// The entries of sys.path, copied. Takes the GIL for the copy only; callers must not hold a lock that a thread
// holding the GIL could be waiting for.
std::vector<std::string> python_path_entries() {
  std::vector<std::string> entries;
  if (!Py_IsInitialized()) return entries;
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject* path = PySys_GetObject("path");  // borrowed
  if (path && PyList_Check(path)) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(path); ++i) {
      PyObject* item = PyList_GET_ITEM(path, i);  // borrowed
      const char* text = PyUnicode_Check(item) ? PyUnicode_AsUTF8(item) : nullptr;
      if (!text) {
        PyErr_Clear();
        continue;
      }
      if (*text) entries.emplace_back(text);
    }
  }
  PyGILState_Release(gil);
  return entries;
}

void add_env_root(std::vector<Root>& into, const char* variable) {
  const char* value = std::getenv(variable);
  if (!value || !*value)
    into.push_back({{}, variable, "not set"});
  else
    into.push_back({value, variable});
}

SearchRoots search_roots() {
  SearchRoots out;
  add_env_root(out.explicit_roots, "FASTCOMP_CUDA_HOME");
  add_env_root(out.roots, "CUDA_HOME");
  add_env_root(out.roots, "CUDA_PATH");
  std::vector<std::string> without_wheels;
  for (const std::string& entry : python_path_entries()) {
    fs::path nvidia = fs::path(entry) / "nvidia";
    if (!is_dir(nvidia)) {
      without_wheels.push_back(entry);
      continue;
    }
    // CUDA 13 wheels share nvidia/cu13; CUDA 12 wheels have one folder per library (nvidia/cuda_nvrtc, ...).
    if (is_dir(nvidia / "cu13")) out.roots.push_back({nvidia / "cu13", "sys.path"});
    std::vector<fs::path> others;
    std::error_code ec;
    for (const auto& child : fs::directory_iterator(nvidia, ec))
      if (child.path().filename() != "cu13" && is_dir(child.path())) others.push_back(child.path());
    std::sort(others.begin(), others.end());
    for (auto& other : others) out.roots.push_back({std::move(other), "sys.path"});
  }
  if (!without_wheels.empty()) {
    std::string entries;
    for (const auto& e : without_wheels) entries += (entries.empty() ? "" : ", ") + e;
    out.roots.push_back({{}, "sys.path", "no nvidia/ folder in " + entries});
  }
  out.roots.push_back({"/usr/local/cuda", "default toolkit location"});
  return out;
}

std::string loaded_path(void* handle, const std::string& fallback) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name) return map->l_name;
  return fallback;
}

std::string last_dlerror() {
  const char* e = dlerror();
  return e ? e : "unknown dlopen error";
}

// One search, recording a line per place for the error message.
class Search {
 public:
  explicit Search(const std::vector<std::string>& sonames) : sonames_(sonames) {}

  std::optional<LoadedLibrary> in_roots(const std::vector<Root>& roots) {
    for (const Root& root : roots) {
      if (root.path.empty()) {
        lines_.push_back(root.origin + ": " + root.not_searched);
        continue;
      }
      if (!is_dir(root.path)) {
        lines_.push_back(root.path.string() + " (" + root.origin + "): no such directory");
        continue;
      }
      // A toolkit keeps its libraries in lib64/, a wheel folder or conda environment in lib/.
      bool any = false;
      for (const char* sub : {"lib64", "lib"}) {
        fs::path dir = root.path / sub;
        if (!is_dir(dir)) continue;
        any = true;
        std::error_code ec;
        fs::path real = fs::canonical(dir, ec);
        if (!seen_.insert(ec ? dir.string() : real.string()).second) continue;
        if (auto lib = in_dir(dir, root.origin)) return lib;
      }
      if (!any) lines_.push_back(root.path.string() + " (" + root.origin + "): no lib64/ or lib/ folder");
    }
    return std::nullopt;
  }

  std::optional<LoadedLibrary> already_loaded() {
    for (const std::string& soname : sonames_)
      if (void* handle = dlopen(soname.c_str(), RTLD_NOW | RTLD_NOLOAD))
        return LoadedLibrary{handle, loaded_path(handle, soname)};
    lines_.push_back("already loaded in this process: no");
    return std::nullopt;
  }

  std::optional<LoadedLibrary> loader_path() {
    std::string errors;
    for (const std::string& soname : sonames_) {
      if (void* handle = dlopen(soname.c_str(), RTLD_NOW)) return LoadedLibrary{handle, loaded_path(handle, soname)};
      errors += (errors.empty() ? "" : "; ") + last_dlerror();
    }
    lines_.push_back("dynamic loader path (LD_LIBRARY_PATH, ldconfig cache): " + errors);
    return std::nullopt;
  }

  std::string failure(const std::string& what, const std::string& fix) const {
    std::string names;
    for (const auto& s : sonames_) names += (names.empty() ? "" : " or ") + s;
    std::string message = "fastcomp could not load " + what + " (" + names + "); searched:";
    for (const auto& line : lines_) message += "\n  " + line;
    return message + "\nto fix: " + fix;
  }

 private:
  std::optional<LoadedLibrary> in_dir(const fs::path& dir, const std::string& origin) {
    for (const std::string& soname : sonames_) {
      fs::path file = dir / soname;
      if (!is_file(file)) continue;
      if (void* handle = dlopen(file.c_str(), RTLD_NOW)) return LoadedLibrary{handle, loaded_path(handle, file)};
      // Found but unusable (wrong architecture, missing dependency): say so, and keep looking.
      lines_.push_back(file.string() + " (" + origin + "): " + last_dlerror());
      return std::nullopt;
    }
    lines_.push_back(dir.string() + " (" + origin + "): not there");
    return std::nullopt;
  }

  const std::vector<std::string>& sonames_;
  std::vector<std::string> lines_;
  std::set<std::string> seen_;  // a directory named twice (CUDA_HOME=/usr/local/cuda) is searched once
};

LoadedLibrary search(const std::string& what, const std::vector<std::string>& sonames, const SearchRoots& roots,
                     const std::string& fix) {
  Search s(sonames);
  if (auto lib = s.in_roots(roots.explicit_roots)) return *lib;
  if (auto lib = s.already_loaded()) return *lib;
  if (auto lib = s.in_roots(roots.roots)) return *lib;
  if (auto lib = s.loader_path()) return *lib;
  throw CudaLibraryError(s.failure(what, fix));
}

// The outcome of each library's one search. `done` is set last (release), so a reader that sees it set sees
// the rest without taking the lock.
struct Slot {
  std::atomic<bool> done{false};
  std::optional<LoadedLibrary> loaded;
  std::string error;
};
std::mutex load_mutex;
std::array<Slot, 4> slots;

const Slot& loaded_slot(Library library) {
  Slot& slot = slots[static_cast<size_t>(library)];
  if (slot.done.load(std::memory_order_acquire)) return slot;
  const LibrarySpec& s = spec(library);
  // Read before locking: search_roots() takes the GIL, and a thread holding the GIL may be waiting for the lock.
  SearchRoots roots = s.toolkit_library ? search_roots() : SearchRoots{};
  std::lock_guard lock(load_mutex);
  if (slot.done.load(std::memory_order_relaxed)) return slot;
  try {
    slot.loaded = search(s.name, s.sonames, roots, s.fix);
  } catch (const CudaLibraryError& e) {
    slot.error = e.what();
  }
  slot.done.store(true, std::memory_order_release);
  return slot;
}

}  // namespace

const char* library_name(Library library) { return spec(library).name; }

const LoadedLibrary& load_library(Library library) {
  const Slot& slot = loaded_slot(library);
  if (!slot.loaded) throw CudaLibraryError(slot.error);
  return *slot.loaded;
}

LibraryStatus library_status(Library library) {
  const Slot& slot = loaded_slot(library);
  return {library, slot.loaded, slot.error};
}

LoadedLibrary find_library(const std::string& what, const std::vector<std::string>& sonames, const std::string& fix) {
  return search(what, sonames, search_roots(), fix);
}

std::optional<fs::path> cuda_include_dir(std::vector<std::string>* searched) {
  std::vector<fs::path> candidates;
  // NVRTC's own include/ first: its headers match the compiler (a wheel of nvidia-cuda-runtime installs them
  // there, a toolkit always has them).
  if (auto nvrtc = library_status(Library::Nvrtc); nvrtc.loaded)
    candidates.push_back(fs::path(nvrtc.loaded->path).parent_path().parent_path() / "include");
  SearchRoots roots = search_roots();
  for (const auto* list : {&roots.explicit_roots, &roots.roots})
    for (const Root& root : *list)
      if (!root.path.empty()) candidates.push_back(root.path / "include");
  for (const fs::path& dir : candidates) {
    if (searched) searched->push_back(dir.string());
    if (is_file(dir / "cuda_fp16.h")) return dir;
  }
  return std::nullopt;
}

}  // namespace fastcomp::runtime::cuda
