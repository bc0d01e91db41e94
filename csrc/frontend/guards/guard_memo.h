// The shortcut through a guard set for the calls after one that passed. Most guards of a library model read
// module attributes through dicts (module __dict__s, _parameters, _modules, globals) that no call changes: the
// memo records each dict those loads read, with its version tag (cpython/dict_version.h), and the values they
// produced. A later call whose recorded dicts all have the same tags reuses those values without a lookup, and
// skips the guards that depend on nothing else: identity, equality with an immutable constant, a dict's keys,
// aliasing. What can change while every dict stays the same is checked on every call: tensor metadata (a
// parameter's `.data`, dtype or requires_grad changes in place), types (`__class__` assignment), lengths,
// class versions, global state, symbolic sizes, set membership, and every value read through getattr (a property or
// __getattr__ can return anything) or out of a list.
//
// From 3.12 a dict watcher says that none of the watched dicts changed without reading them, and the check then
// reads only what finds a dict: the holders' __dict__ pointers (an object's __dict__ can be replaced without
// changing any dict).
//
// A dict that changed since the record sends the call through the full check, which records again when it
// passes. A dict that changes on every call (an attribute the compiled function writes, a dict argument made per
// call) would make every call pay both: after two records in a row that find it changed, its loads are made on
// every call instead, and the rest of the set keeps the shortcut.
#pragma once
#include <Python.h>

#include <cstdint>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "cpython/dict_version.h"
#include "cpython/frame.h"
#include "cpython/pyref.h"

namespace fastcomp::frontend {

struct GuardSet;
struct GuardScratch;

// Counts over the process, for tests and benchmarks (fastcomp._C.guard_check_stats).
struct GuardCheckStats {
  bool timed = false;         // time every check (two clock reads each): benchmarks/guard_check.py
  uint64_t checks = 0;        // check_guards calls that asked no failure reason (a call's lookup)
  uint64_t check_ns = 0;      // their total time, while timed
  uint64_t memo_passed = 0;   // checks a memo answered "the guards pass"
  uint64_t memo_failed = 0;   // checks it answered "a guard fails"
  uint64_t memo_stale = 0;    // checks it could not answer: a recorded dict changed
  uint64_t memo_records = 0;  // records made after a full check passed
};
GuardCheckStats& guard_check_stats();

class GuardMemo {
 public:
  enum class Verdict : uint8_t { Pass, Fail, Unknown };

  // Whether checks of `set` use a memo: fastcomp.config.guard_memo, and under "auto" the size of the set.
  static bool worthwhile(const GuardSet& set);

  // Pass or Fail, as check_guards would answer for `frame` (on Pass, scratch holds what it would hold), or
  // Unknown: no record, a recorded dict changed, or the memo is in use further up the stack.
  Verdict check(const GuardSet& set, const cpython::FrameView& frame, GuardScratch& scratch);
  // Records what a full check of `set` that passed just read into `scratch`.
  void record(const GuardSet& set, const cpython::FrameView& frame, const GuardScratch& scratch);

 private:
  // Where a watched dict is found; the same key across records names the same dict in the program's terms.
  enum class DictRole : uint8_t {
    InstanceDict,  // the __dict__ of source `holder`'s value (null where it has none)
    ModuleSlot,    // the dict `slot` (e.g. "_parameters") in that __dict__
    DictValue,     // source `holder`'s value itself
    TypeDict,      // the own namespace of source `holder`'s value, a class
    Globals,       // the frame's globals
    Builtins,      // the frame's builtins
  };
  using DictKey = std::tuple<DictRole, int, PyObject*>;  // role, holder, slot (an interned name)
  struct WatchedDict {
    DictKey key;
    int parent = -1;  // the watched dict that vouches for the holder's value, checked first
    PyRef dict;       // as recorded (null: the holder had no __dict__, and must still have none)
    cpython::DictWatch watch;  // after `dict`: released before it
    uint64_t version = 0;
    uint64_t checked = 0;  // the generation in which it was last found unchanged
  };
  enum class Mode : uint8_t {
    Load,      // loaded on every call
    Constant,  // the same object always (held by the guard set)
    Watched,   // the recorded value, while dict `vouch` is unchanged
  };
  struct Step {   // one step of a check, in source order
    bool load;    // load source `index`, else check watched dict `index`
    bool runs_python;  // the load may run Python code, which may change any dict
    int index;
  };

  bool unchanged(int dict, const cpython::FrameView& frame, const GuardScratch& scratch);
  bool versions_vouched() const;
  int watch(DictKey key, int parent, PyObject* dict);
  void build(const GuardSet& set, const cpython::FrameView& frame, const GuardScratch& scratch);
  void note_changes(const std::vector<WatchedDict>& before);

  bool recorded_ = false;
  bool busy_ = false;   // a check or record is running (a load ran Python code that came back here)
  bool useless_ = false;  // no source of the set can be watched: the memo stays out of the way
  uint64_t generation_ = 0;
  // Where every watched dict has a dict watcher (3.12): cpython::watched_dict_changes() when they were last all
  // found unchanged. While the count stays there, none changed, and their versions need not be read.
  bool all_watched_ = false;
  uint64_t changes_seen_ = 0;
  uint64_t passes_since_record_ = 0;
  std::vector<PyObject*> values_;  // per source: the recorded value (borrowed; the watched dicts hold them)
  std::vector<Mode> modes_;
  std::vector<int> vouch_;         // per source: the watched dict whose tag vouches for its value, or -1
  std::vector<int> value_dict_;    // per source: the watched dict that is its value (for key guards), or -1
  std::vector<WatchedDict> dicts_;
  std::map<DictKey, int> dict_ids_;
  std::vector<Step> steps_;
  std::vector<int> guards_to_check_;  // indices into set.guards, in order
  std::map<DictKey, int> change_streak_;  // consecutive records that found the dict changed
  std::set<DictKey> loaded_always_;        // dicts that changed too often to be watched
};

}  // namespace fastcomp::frontend
