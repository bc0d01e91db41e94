// Compiled kernel binaries, cached in memory and on disk so that a second run of a program skips NVRTC
// (~50 ms per program) and only loads the cubin (~0.1 ms); also the picks of cuBLASLt tuning (cublaslt.h).
//
// An entry is found by its key: a list of parts (source, NVRTC version, options, ...) that together cover every
// fact that can change the binary. On disk each entry is one file, <dir>/kernels/<16 hex digits>.bin, named by
// the key's 64-bit FNV-1a hash and holding the whole key besides the binary; a hit requires the stored key to
// equal the requested one, so a hash collision is a miss, never a wrong kernel. Files are written to a
// temporary name in the same folder and renamed into place, so readers in other processes see a whole file or
// none, and two processes writing the same entry both succeed (the last rename wins; both files are equal).
// A file that is truncated, corrupt or foreign (bad magic, format version, lengths or checksum) is ignored,
// counted, and replaced by the recompiled entry; the cache never fails a compile.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

namespace fastcomp::runtime {

struct KernelCacheStats {
  uint64_t memory_hits = 0;
  uint64_t disk_hits = 0;
  uint64_t misses = 0;          // compiles
  uint64_t rejected_files = 0;  // disk files ignored as corrupt, truncated, foreign or of another key
  uint64_t write_failures = 0;  // entries that could not be written (kept in memory only)
};

class KernelCache {
 public:
  // `directory` empty: memory only.
  explicit KernelCache(std::filesystem::path directory);

  // The binary for `key_parts`: from memory, else from disk, else `compile()`'s result, which is then stored
  // in both. Thread-safe; `compile` runs without any lock held, so compiles of different keys overlap. An
  // exception from `compile` propagates and caches nothing.
  std::shared_ptr<const std::string> get_or_compile(std::span<const std::string_view> key_parts,
                                                    const std::function<std::string()>& compile);

  // The binary for `key_parts` from memory or disk, or null: never compiles (counts hits, not misses).
  std::shared_ptr<const std::string> find(std::span<const std::string_view> key_parts);

  // Keeps `value` for `key_parts` in memory and on disk, replacing any entry: for results found by other means
  // than a compile (cuBLASLt's tuned algorithm picks). Counts nothing; a failed write keeps it in memory only.
  void store(std::span<const std::string_view> key_parts, std::string value);

  KernelCacheStats stats() const;
  std::filesystem::path directory() const;
  // Forgets every memory entry and counter and uses `directory` from now on: what a new process would see.
  void reset(std::filesystem::path directory);

 private:
  // Memory, then disk; sets *file to the entry's path when there is a cache folder.
  std::shared_ptr<const std::string> lookup(const std::string& key, std::filesystem::path* file);

  mutable std::mutex mutex_;
  std::filesystem::path directory_;
  std::unordered_map<std::string, std::shared_ptr<const std::string>> memory_;  // encoded key -> binary
  KernelCacheStats stats_;
};

// $FASTCOMP_CACHE_DIR, else $XDG_CACHE_HOME/fastcomp, else ~/.cache/fastcomp; empty if none can be formed.
std::filesystem::path default_kernel_cache_dir();

// The process's kernel cache, in default_kernel_cache_dir().
KernelCache& kernel_cache();

}  // namespace fastcomp::runtime
