#include "support/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

namespace fastcomp {
namespace fs = std::filesystem;
namespace {

bool write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Opens `file` with `flags`, writes `bytes` and closes it. Returns the error, "" on success.
std::string write_to(const fs::path& file, int flags, std::string_view bytes) {
  int fd = ::open(file.c_str(), flags | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) return "cannot create " + file.string() + ": " + std::strerror(errno);
  std::string error = write_all(fd, bytes) ? "" : "cannot write " + file.string() + ": " + std::strerror(errno);
  if (::close(fd) != 0 && error.empty()) error = "cannot write " + file.string() + ": " + std::strerror(errno);
  return error;
}

// A temporary name no other writer uses, even one in another process or on another host sharing the folder.
fs::path temp_path(const fs::path& file) {
  static const uint32_t process_salt = std::random_device{}();
  static std::atomic<uint64_t> counter{0};
  return file.parent_path() / ("." + file.filename().string() + "." + std::to_string(::getpid()) + "." +
                               std::to_string(process_salt) + "." + std::to_string(counter++) + ".tmp");
}

}  // namespace

std::string read_file(const fs::path& file, bool* missing) {
  std::string bytes;
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (missing) *missing = fd < 0 && errno == ENOENT;
  if (fd < 0) return bytes;
  struct stat st;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    bytes.resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    bytes.resize(done);
  }
  ::close(fd);
  return bytes;
}

std::string write_file_atomically(const fs::path& file, std::string_view bytes) {
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  if (ec) return "cannot create " + file.parent_path().string() + ": " + ec.message();
  fs::path temp = temp_path(file);
  std::string error = write_to(temp, O_CREAT | O_EXCL, bytes);
  if (error.empty() && ::rename(temp.c_str(), file.c_str()) != 0)
    error = "cannot rename " + temp.string() + " to " + file.string() + ": " + std::strerror(errno);
  if (!error.empty()) ::unlink(temp.c_str());
  return error;
}

std::string write_file(const fs::path& file, std::string_view bytes) {
  return write_to(file, O_CREAT | O_TRUNC, bytes);
}

}  // namespace fastcomp
