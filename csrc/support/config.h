// fastcomp's settings, as fastcomp.config sets them from Python (which also reads the FASTCOMP_* variables).
#pragma once

namespace fastcomp {

struct Config {
  int recompile_limit = 8;          // cache entries per code object and option set before running eagerly
  bool error_on_recompile = false;  // raise instead of warning when the limit is hit
  bool suppress_errors = true;      // internal compile failures warn once and run eagerly
};

Config& config();

}  // namespace fastcomp
