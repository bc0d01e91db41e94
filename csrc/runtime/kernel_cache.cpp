#include "runtime/kernel_cache.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "support/file_io.h"
#include "support/log.h"

namespace fastcomp::runtime {
namespace fs = std::filesystem;
namespace {

// FNV-1a, 64-bit (http://www.isthe.com/chongo/tech/comp/fnv/): stable across runs, platforms and compilers,
// unlike std::hash. It names files and checks their contents; it is not what makes a hit correct (the
// stored key is compared in full).
constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;
uint64_t fnv1a(std::string_view bytes, uint64_t hash = kFnvOffset) {
  for (unsigned char c : bytes) hash = (hash ^ c) * kFnvPrime;
  return hash;
}

// File layout: a 40-byte header of the magic and four little-endian u64s (format version, key size, binary
// size, FNV-1a of key then binary), then the key, then the binary. Bump kFormatVersion whenever the layout or
// the key encoding changes.
constexpr char kMagic[8] = {'F', 'C', 'K', 'E', 'R', 'N', 'E', 'L'};
constexpr uint64_t kFormatVersion = 1;
constexpr size_t kHeaderSize = 40;

void put_u64(char* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(v >> (8 * i));
}
uint64_t get_u64(const char* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(static_cast<unsigned char>(in[i])) << (8 * i);
  return v;
}

// Length-prefixed, so no two part lists encode alike ({"ab", "c"} vs {"a", "bc"}).
std::string encode_key(std::span<const std::string_view> parts) {
  std::string key = "fastcomp kernel key\n";
  for (std::string_view part : parts) key.append(std::to_string(part.size())).append(":").append(part).append("\n");
  return key;
}

std::string hex(uint64_t v) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) out[i] = digits[v & 15];
  return out;
}

struct DiskEntry {
  enum { Missing, Rejected, Hit } outcome = Missing;
  std::string binary;
  const char* why = "";  // for Rejected
};

DiskEntry read_entry(const fs::path& file, const std::string& key) {
  bool missing = false;
  std::string bytes = read_file(file, &missing);
  if (missing) return {};
  auto reject = [](const char* why) { return DiskEntry{DiskEntry::Rejected, "", why}; };
  if (bytes.size() < kHeaderSize) return reject("shorter than its header");
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) return reject("not a fastcomp kernel file");
  if (get_u64(bytes.data() + 8) != kFormatVersion) return reject("another format version");
  uint64_t key_size = get_u64(bytes.data() + 16), binary_size = get_u64(bytes.data() + 24);
  uint64_t body = bytes.size() - kHeaderSize;
  if (key_size > body || binary_size != body - key_size) return reject("sizes do not match the file (truncated?)");
  std::string_view stored_key(bytes.data() + kHeaderSize, key_size);
  std::string_view binary(bytes.data() + kHeaderSize + key_size, binary_size);
  if (fnv1a(binary, fnv1a(stored_key)) != get_u64(bytes.data() + 32)) return reject("checksum mismatch");
  if (stored_key != key) return reject("holds another key (hash collision)");
  return {DiskEntry::Hit, std::string(binary), ""};
}

// The entry's bytes, written atomically (support/file_io.h). Returns the error text, empty on success.
std::string write_entry(const fs::path& file, const std::string& key, std::string_view binary) {
  std::string bytes(kHeaderSize, '\0');
  std::memcpy(bytes.data(), kMagic, sizeof kMagic);
  put_u64(bytes.data() + 8, kFormatVersion);
  put_u64(bytes.data() + 16, key.size());
  put_u64(bytes.data() + 24, binary.size());
  put_u64(bytes.data() + 32, fnv1a(binary, fnv1a(key)));
  bytes.append(key).append(binary);
  return write_file_atomically(file, bytes);
}

}  // namespace

KernelCache::KernelCache(fs::path directory) : directory_(std::move(directory)) {}

std::shared_ptr<const std::string> KernelCache::lookup(const std::string& key, fs::path* file) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = memory_.find(key); it != memory_.end()) {
      ++stats_.memory_hits;
      return it->second;
    }
    if (!directory_.empty()) *file = directory_ / "kernels" / (hex(fnv1a(key)) + ".bin");
  }
  // File I/O and logging (which may take the GIL) happen without the lock.
  if (!file->empty()) {
    DiskEntry entry = read_entry(*file, key);
    if (entry.outcome == DiskEntry::Hit) {
      auto binary = std::make_shared<const std::string>(std::move(entry.binary));
      std::lock_guard lock(mutex_);
      ++stats_.disk_hits;
      return memory_.try_emplace(key, std::move(binary)).first->second;
    }
    if (entry.outcome == DiskEntry::Rejected) {
      {
        std::lock_guard lock(mutex_);
        ++stats_.rejected_files;
      }
      FC_LOG(compile, debug, "kernel cache: ignoring {} ({}); recompiling", file->string(), entry.why);
    }
  }
  return nullptr;
}

std::shared_ptr<const std::string> KernelCache::find(std::span<const std::string_view> key_parts) {
  fs::path file;
  return lookup(encode_key(key_parts), &file);
}

void KernelCache::store(std::span<const std::string_view> key_parts, std::string value) {
  const std::string key = encode_key(key_parts);
  fs::path file;
  {
    std::lock_guard lock(mutex_);
    if (!directory_.empty()) file = directory_ / "kernels" / (hex(fnv1a(key)) + ".bin");
  }
  if (!file.empty()) {
    const std::string error = write_entry(file, key, value);
    if (!error.empty()) FC_LOG(compile, debug, "kernel cache: {}; kept in memory only", error);
  }
  std::lock_guard lock(mutex_);
  memory_.insert_or_assign(key, std::make_shared<const std::string>(std::move(value)));
}

std::shared_ptr<const std::string> KernelCache::get_or_compile(std::span<const std::string_view> key_parts,
                                                               const std::function<std::string()>& compile) {
  std::string key = encode_key(key_parts);
  fs::path file;
  if (auto hit = lookup(key, &file)) return hit;
  auto binary = std::make_shared<const std::string>(compile());
  std::string error = file.empty() ? "" : write_entry(file, key, *binary);
  if (!error.empty()) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      FC_LOG(compile, warning,
             "kernel cache: {}; compiled kernels are kept in memory only (set FASTCOMP_CACHE_DIR to a writable "
             "folder to cache them across runs)",
             error);
  }
  std::lock_guard lock(mutex_);
  ++stats_.misses;
  if (!error.empty()) ++stats_.write_failures;
  return memory_.try_emplace(key, std::move(binary)).first->second;
}

KernelCacheStats KernelCache::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

fs::path KernelCache::directory() const {
  std::lock_guard lock(mutex_);
  return directory_;
}

void KernelCache::reset(fs::path directory) {
  std::lock_guard lock(mutex_);
  directory_ = std::move(directory);
  memory_.clear();
  stats_ = {};
}

fs::path default_kernel_cache_dir() {
  if (const char* dir = std::getenv("FASTCOMP_CACHE_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return fs::path(xdg) / "fastcomp";
  if (const char* home = std::getenv("HOME"); home && *home) return fs::path(home) / ".cache" / "fastcomp";
  return {};
}

KernelCache& kernel_cache() {
  static KernelCache cache(default_kernel_cache_dir());
  return cache;
}

}  // namespace fastcomp::runtime
