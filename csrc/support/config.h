// fastcomp's settings, as fastcomp.config sets them from Python (which also reads the FASTCOMP_* variables).
#pragma once
#include <string>
#include <vector>

namespace fastcomp {

struct Config {
  int recompile_limit = 8;          // cache entries per code object and option set before running eagerly
  bool error_on_recompile = false;  // raise instead of warning when the limit is hit
  bool suppress_errors = true;      // internal compile failures warn once and run eagerly
  // Code under these directories (torch, the standard library, fastcomp) is never compiled as a frame of its
  // own when the CPython part of a compiled function calls it. Set by the Python package at import.
  std::vector<std::string> skip_dirs;
};

Config& config();

}  // namespace fastcomp
