// Whole-file reads and atomic whole-file writes with POSIX calls. fastcomp does no file I/O through iostreams:
// a stream formats through the process's global C++ locale, which libraries loaded into the same process may
// replace (on a CUDA machine, writing a number to a std::ofstream after NVRTC was loaded crashed in num_put).
#pragma once
#include <filesystem>
#include <string>
#include <string_view>

namespace fastcomp {

// The file's bytes; empty when it cannot be read. `missing` (nullable) is set when it does not exist.
std::string read_file(const std::filesystem::path& file, bool* missing = nullptr);

// Writes `bytes` to a temporary file next to `file` (a name no other writer uses, in this or another process)
// and renames it into place, so a reader never sees half a file. Creates the parent folders. No fsync: after a
// machine crash the file may be short, and readers must check what they read. Returns the error, "" on success.
std::string write_file_atomically(const std::filesystem::path& file, std::string_view bytes);

// Writes `bytes` to `file` in place (dumps for people to read). Returns the error, "" on success.
std::string write_file(const std::filesystem::path& file, std::string_view bytes);

}  // namespace fastcomp
