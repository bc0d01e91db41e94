// The per-code-object cache: compiled entries, most recently used first, stored in the code's co_extra.
#pragma once
#include <Python.h>

#include <memory>
#include <string>
#include <vector>

#include "compile.h"

namespace fastcomp::runtime {

struct CacheEntry {
  int options_key = 0;
  int compile_id = 0;  // "<frame id>/<n>" in logs, like Dynamo's compile ids
  CompiledFrame compiled;
  // The modules among the frame's arguments when it was compiled (slot, object; compared by address only): versions
  // compiled for other instances do not count towards this instance's recompile limit.
  std::vector<std::pair<int, const PyObject*>> owners;
  // Set when the compiled graph raised and CPython then ran the frame without raising: the graph is wrong for
  // these inputs (a fastcomp bug), so frames its guards accept run in CPython from then on.
  bool runs_eagerly = false;
};

struct CodeCache {
  // Whether frames of this code are compiled when a compiled function's CPython part calls them.
  enum class Role : uint8_t { Unknown, User, Skip };
  Role role = Role::Unknown;
  int frame_id = -1;  // assigned at the first compile (assign_frame_id)
  int compiles = 0;
  // MRU first. Shared: a call holds the entry it runs, as another thread may reset or reorder the cache meanwhile.
  std::vector<std::shared_ptr<CacheEntry>> entries;
  bool warned_limit = false;
  bool warned_failure = false;
  bool warned_run_failure = false;  // a compiled graph raised where CPython did not (dispatch's rerun_in_cpython)

  CodeCache();
  ~CodeCache();
};

// The cache of `code`, created on first use. Owned by the code object.
CodeCache& code_cache(PyCodeObject* code);
// Gives `cache` the next frame id if it has none yet ("<frame id>/<compile id>" in logs).
void assign_frame_id(CodeCache& cache);
// Drops every entry of every code object (fastcomp.reset()).
void reset_all_caches();

}  // namespace fastcomp::runtime
