#include "frontend/guards/guard_memo.h"

#include <algorithm>

#include "cpython/dict_version.h"
#include "cpython/type_dict.h"
#include "frontend/guards/guards.h"
#include "support/config.h"

namespace fastcomp::frontend {
namespace {

// Whether `o == o` always answers the same, whatever happens to other objects: builtin immutable values.
bool immutable_constant(PyObject* o) {
  if (o == Py_None || o == Py_Ellipsis || PyBool_Check(o) || PyLong_CheckExact(o) || PyFloat_CheckExact(o) ||
      PyComplex_CheckExact(o) || PyUnicode_CheckExact(o) || PyBytes_CheckExact(o) || PyCode_Check(o))
    return true;
  if (!PyTuple_CheckExact(o)) return false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); ++i)
    if (!immutable_constant(PyTuple_GET_ITEM(o, i))) return false;
  return true;
}

// The __dict__ of `o` (borrowed), made if it is still kept as inline values; null where `o` has none.
PyObject* instance_dict(PyObject* o) {
  PyObject** dictptr = _PyObject_GetDictPtr(o);
  if (!dictptr) PyErr_Clear();
  return dictptr ? *dictptr : nullptr;
}

PyObject* module_slot_name(SourceKind kind) {  // borrowed, interned for the process
  static PyObject* parameters = PyUnicode_InternFromString("_parameters");
  static PyObject* buffers = PyUnicode_InternFromString("_buffers");
  static PyObject* modules = PyUnicode_InternFromString("_modules");
  return kind == SourceKind::ModuleParam ? parameters : kind == SourceKind::ModuleBuffer ? buffers : modules;
}

// Whether loading `s` may run Python code: getattr can reach any descriptor or __getattr__, and a dict lookup
// with a key other than a str may call the stored keys' __eq__.
bool load_runs_python(const Source& s) {
  switch (s.kind) {
    case SourceKind::Attr: return true;
    case SourceKind::DictItem:
    case SourceKind::Global:
    case SourceKind::InstDict:
    case SourceKind::ModuleParam:
    case SourceKind::ModuleBuffer:
    case SourceKind::ModuleChild:
    case SourceKind::ClassDictItem: return !PyUnicode_CheckExact(s.key.get());
    default: return false;
  }
}

struct Busy {
  explicit Busy(bool& flag) : flag_(flag) { flag_ = true; }
  ~Busy() { flag_ = false; }
  bool& flag_;
};

}  // namespace

bool GuardMemo::worthwhile(const GuardSet& set) {
  // Smaller sets check in about the time the memo's own bookkeeping takes.
  constexpr int kMinSources = 16;
  switch (config().guard_memo) {
    case GuardMemoUse::Auto: return set.sources.size() >= kMinSources;
    case GuardMemoUse::Always: return true;
    case GuardMemoUse::Off: return false;
  }
  return false;
}

GuardCheckStats& guard_check_stats() {
  static GuardCheckStats stats;
  return stats;
}

int GuardMemo::watch(DictKey key, int parent, PyObject* dict) {
  if (loaded_always_.count(key)) return -1;
  auto [at, added] = dict_ids_.emplace(key, static_cast<int>(dicts_.size()));
  if (!added) return at->second;
  WatchedDict w;
  w.key = key;
  w.parent = parent;
  w.dict = PyRef::borrow(dict);
  w.watch = cpython::DictWatch(dict);
  all_watched_ = all_watched_ && (!dict || w.watch.watching());
  w.version = dict ? cpython::dict_version(dict) : 0;
  dicts_.push_back(std::move(w));
  return at->second;
}

void GuardMemo::build(const GuardSet& set, const cpython::FrameView& frame, const GuardScratch& scratch) {
  const int n = set.sources.size();
  values_ = scratch.values;
  modes_.assign(n, Mode::Load);
  vouch_.assign(n, -1);
  value_dict_.assign(n, -1);
  dicts_.clear();
  dict_ids_.clear();
  all_watched_ = cpython::dict_watchers_available();
  steps_.clear();
  guards_to_check_.clear();
  auto watched_by = [&](int i, int dict) {
    if (dict < 0) return;
    modes_[i] = Mode::Watched;
    vouch_[i] = dict;
  };
  for (int i = 0; i < n; ++i) {
    const Source& s = set.sources.at(i);
    PyObject* v = scratch.values[i];
    const int b = s.base;
    PyObject* base = b >= 0 ? scratch.values[b] : nullptr;
    const int base_vouch = b >= 0 ? vouch_[b] : -1;
    if (b >= 0 && !base) continue;
    switch (s.kind) {
      case SourceKind::ConstObject: modes_[i] = Mode::Constant; break;
      case SourceKind::SeqItem:  // a tuple's items are part of it: they stay while the tuple does
        if (v && modes_[b] != Mode::Load && PyTuple_Check(base)) {
          modes_[i] = modes_[b];
          vouch_[i] = vouch_[b];
        }
        break;
      case SourceKind::InstDict:
      case SourceKind::ObjDict: {
        PyObject* d = instance_dict(base);
        if (s.kind == SourceKind::InstDict ? !v || !d : d != v) break;
        const int id = watch({DictRole::InstanceDict, b, nullptr}, base_vouch, d);
        watched_by(i, id);
        if (s.kind == SourceKind::ObjDict && d) value_dict_[i] = id;
        break;
      }
      case SourceKind::ModuleParam:
      case SourceKind::ModuleBuffer:
      case SourceKind::ModuleChild: {
        PyObject* d = instance_dict(base);
        if (!v || !d) break;
        const int parent = watch({DictRole::InstanceDict, b, nullptr}, base_vouch, d);
        PyObject* slot_name = module_slot_name(s.kind);
        PyObject* slot = PyDict_GetItemWithError(d, slot_name);
        if (!slot) PyErr_Clear();
        if (parent >= 0 && slot && PyDict_Check(slot))
          watched_by(i, watch({DictRole::ModuleSlot, b, slot_name}, parent, slot));
        break;
      }
      case SourceKind::DictItem:
        // A dict loaded on every call (a **kwargs dict, an argument) is usually a new one each time.
        if (v && modes_[b] != Mode::Load && PyDict_Check(base))
          watched_by(i, watch({DictRole::DictValue, b, nullptr}, base_vouch, base));
        break;
      case SourceKind::ClassDictItem: {
        PyObject* d = v && PyType_Check(base) ? cpython::type_dict(reinterpret_cast<PyTypeObject*>(base)) : nullptr;
        if (d) watched_by(i, watch({DictRole::TypeDict, b, nullptr}, base_vouch, d));
        break;
      }
      case SourceKind::Global: {
        PyObject* globals = frame.globals();
        if (!v || !PyDict_Check(globals)) break;
        const int g = watch({DictRole::Globals, -1, nullptr}, -1, globals);
        PyObject* found = PyDict_GetItemWithError(globals, s.key.get());
        if (!found) PyErr_Clear();
        if (found == v) {
          watched_by(i, g);
        } else if (!found && g >= 0 && PyDict_Check(frame.builtins())) {
          watched_by(i, watch({DictRole::Builtins, -1, nullptr}, g, frame.builtins()));
        }
        break;
      }
      case SourceKind::Local:
      case SourceKind::Closure:
      case SourceKind::ClosureCell:
      case SourceKind::CellContents:  // a cell has no version: `nonlocal` stores change it
      case SourceKind::WeakrefReferent:  // nor has a weak reference: its referent can go at any time
      case SourceKind::Attr: break;
    }
  }
  // A guard on a dict's keys or length holds while that dict is unchanged (the hook dicts of every module).
  for (const Guard& g : set.guards) {
    const bool on_keys = g.kind == GuardKind::DictKeys || g.kind == GuardKind::DictLacks || g.kind == GuardKind::Length;
    if (!on_keys || g.source < 0) continue;
    PyObject* v = values_[g.source];
    if (modes_[g.source] != Mode::Load && value_dict_[g.source] < 0 && v && PyDict_CheckExact(v))
      value_dict_[g.source] = watch({DictRole::DictValue, g.source, nullptr}, vouch_[g.source], v);
  }

  // The steps, in source order: a watched dict is checked before the first value it vouches for is used, and
  // after the loads of the values it is found through.
  std::vector<char> placed(dicts_.size(), 0);
  auto place = [&](int d, auto& self) -> void {
    if (d < 0 || placed[d]) return;
    self(dicts_[d].parent, self);
    placed[d] = 1;
    steps_.push_back({false, false, d});
  };
  for (int i = 0; i < n; ++i) {
    if (modes_[i] == Mode::Load) steps_.push_back({true, load_runs_python(set.sources.at(i)), i});
    if (modes_[i] == Mode::Watched) place(vouch_[i], place);
    place(value_dict_[i], place);
  }

  // The guards a call still checks: those that could fail while every watched dict is unchanged.
  int settled_count = 0;
  for (size_t gi = 0; gi < set.guards.size(); ++gi) {
    const Guard& g = set.guards[gi];
    bool settled = false;
    if (g.source >= 0 && modes_[g.source] != Mode::Load) {
      switch (g.kind) {
        case GuardKind::IdMatch: settled = true; break;
        case GuardKind::ConstEquals: settled = immutable_constant(g.expected.get()); break;
        case GuardKind::DictKeys:
        case GuardKind::DictLacks:
        case GuardKind::Length: settled = value_dict_[g.source] >= 0; break;
        case GuardKind::SameObject: settled = modes_[g.length] != Mode::Load; break;
        default: break;
      }
    }
    if (settled) {
      ++settled_count;
    } else {
      guards_to_check_.push_back(static_cast<int>(gi));
    }
  }
  useless_ = dicts_.empty() && settled_count == 0 && loaded_always_.empty();
}

void GuardMemo::note_changes(const std::vector<WatchedDict>& before) {
  if (passes_since_record_ > 0) change_streak_.clear();
  for (const WatchedDict& w : before) {
    auto at = dict_ids_.find(w.key);
    if (at == dict_ids_.end()) continue;
    const WatchedDict& now = dicts_[at->second];
    if (now.dict.get() == w.dict.get() && now.version == w.version) {
      change_streak_.erase(w.key);
    } else if (++change_streak_[w.key] >= 2) {
      loaded_always_.insert(w.key);
    }
  }
}

void GuardMemo::record(const GuardSet& set, const cpython::FrameView& frame, const GuardScratch& scratch) {
  if (busy_ || useless_) return;
  Busy busy(busy_);
  ++guard_check_stats().memo_records;
  std::vector<WatchedDict> before = std::move(dicts_);
  build(set, frame, scratch);
  const size_t loaded_before = loaded_always_.size();
  note_changes(before);
  if (loaded_always_.size() != loaded_before) build(set, frame, scratch);
  passes_since_record_ = 0;
  changes_seen_ = cpython::watched_dict_changes();
  recorded_ = !useless_;
}

bool GuardMemo::unchanged(int id, const cpython::FrameView& frame, const GuardScratch& scratch) {
  WatchedDict& w = dicts_[id];
  if (w.checked == generation_) return true;
  if (w.parent >= 0 && !unchanged(w.parent, frame, scratch)) return false;
  const auto& [role, holder, slot] = w.key;
  PyObject* now = nullptr;
  switch (role) {
    case DictRole::InstanceDict: {
      PyObject* h = scratch.values[holder];
      if (!h) return false;
      now = instance_dict(h);
      break;
    }
    case DictRole::ModuleSlot: now = w.dict.get(); break;  // the parent __dict__ is unchanged, so is its entry
    case DictRole::DictValue: now = scratch.values[holder]; break;
    case DictRole::TypeDict: {
      PyObject* h = scratch.values[holder];
      now = h && PyType_Check(h) ? cpython::type_dict(reinterpret_cast<PyTypeObject*>(h)) : nullptr;
      if (!now) return false;
      break;
    }
    case DictRole::Globals: now = frame.globals(); break;
    case DictRole::Builtins: now = frame.builtins(); break;
  }
  if (now != w.dict.get() || (now && !versions_vouched() && cpython::dict_version(now) != w.version)) return false;
  w.checked = generation_;
  return true;
}

bool GuardMemo::versions_vouched() const {
  return all_watched_ && cpython::watched_dict_changes() == changes_seen_;
}

GuardMemo::Verdict GuardMemo::check(const GuardSet& set, const cpython::FrameView& frame, GuardScratch& scratch) {
  if (!recorded_ || busy_) return Verdict::Unknown;
  Busy busy(busy_);
  GuardCheckStats& stats = guard_check_stats();
  auto stale = [&] {
    ++stats.memo_stale;
    return Verdict::Unknown;
  };
  scratch.reset(set.sources.size(), static_cast<int>(set.symbols.size()));
  std::copy(values_.begin(), values_.end(), scratch.values.begin());
  const uint64_t first = ++generation_;
  for (const Step& step : steps_) {
    if (!step.load) {
      if (!unchanged(step.index, frame, scratch)) return stale();
      continue;
    }
    const int base = set.sources.at(step.index).base;
    if (base >= 0 && vouch_[base] >= 0 && !unchanged(vouch_[base], frame, scratch)) return stale();
    load_source(set, frame, scratch, step.index);
    if (step.runs_python) ++generation_;
  }
  // Python code that a load ran may have changed a dict checked before it: every recorded value must still hold.
  if (generation_ != first)
    for (int d = 0; d < static_cast<int>(dicts_.size()); ++d)
      if (!unchanged(d, frame, scratch)) return stale();
  // Every watched dict is as recorded now; a guard below that runs Python code may still change one.
  const uint64_t validated_at = cpython::watched_dict_changes();
  for (int gi : guards_to_check_) {
    if (!check_guard(set, set.guards[gi], scratch, nullptr)) {
      ++stats.memo_failed;
      return Verdict::Fail;
    }
  }
  for (int src : set.input_sources) scratch.inputs.push_back(scratch.values[src]);
  changes_seen_ = validated_at;
  ++passes_since_record_;
  ++stats.memo_passed;
  return Verdict::Pass;
}

GuardMemoSlot::GuardMemoSlot() = default;
GuardMemoSlot::GuardMemoSlot(const GuardMemoSlot&) {}
GuardMemoSlot::GuardMemoSlot(GuardMemoSlot&&) noexcept = default;
GuardMemoSlot& GuardMemoSlot::operator=(const GuardMemoSlot&) {
  memo_.reset();
  return *this;
}
GuardMemoSlot& GuardMemoSlot::operator=(GuardMemoSlot&&) noexcept = default;
GuardMemoSlot::~GuardMemoSlot() = default;

GuardMemo& GuardMemoSlot::get() const {
  if (!memo_) memo_ = std::make_unique<GuardMemo>();
  return *memo_;
}

}  // namespace fastcomp::frontend
