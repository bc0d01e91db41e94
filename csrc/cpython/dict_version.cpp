// PEP 509's ma_version_tag and PEP 699's dict watchers, per CPython version.
//
// 3.11 assigns every dict a fresh tag from a global counter at creation and at each change of its entries
// (insertdict leaves it alone when a key is set to the object it already holds); it has no watchers. 3.12 keeps
// the counter, with the field deprecated and its low 8 bits (DICT_MAX_WATCHERS) holding which watchers watch the
// dict: those are masked off, so watching a dict does not change its version. A 3.12 watcher is called before
// every change of a watched dict (PyDict_EVENT_ADDED, MODIFIED, DELETED, CLONED, CLEARED) and at its
// deallocation. 3.14 drops the version counter: there, only watchers can tell.
#include "cpython/dict_version.h"

#include <unordered_map>
#include <utility>

#include "cpython/version.h"

namespace fastcomp::cpython {
namespace {

uint64_t g_changes = 0;

#if FC_PY_MINOR >= 12
constexpr uint64_t kWatcherBits = 0xFF;  // DICT_WATCHER_MASK: (1 << DICT_MAX_WATCHERS) - 1

int on_dict_event(PyDict_WatchEvent, PyObject*, PyObject*, PyObject*) {
  ++g_changes;
  return 0;
}

// The watcher id, or -1 where none was free (another library took them all).
int watcher_id() {
  static int id = [] {
    int got = PyDict_AddWatcher(on_dict_event);
    if (got < 0) PyErr_Clear();
    return got;
  }();
  return id;
}

std::unordered_map<PyObject*, int>& watch_counts() {
  static auto* counts = new std::unordered_map<PyObject*, int>();  // never destroyed: used until the process ends
  return *counts;
}
#endif

}  // namespace

uint64_t dict_version(PyObject* dict) {
#if FC_PY_MINOR == 11
  return reinterpret_cast<PyDictObject*>(dict)->ma_version_tag;
#elif FC_PY_MINOR == 12
  _Py_COMP_DIAG_PUSH
  _Py_COMP_DIAG_IGNORE_DEPR_DECLS
  return reinterpret_cast<PyDictObject*>(dict)->ma_version_tag & ~kWatcherBits;
  _Py_COMP_DIAG_POP
#else
#error "fastcomp: dict_version is not audited for this CPython version (3.14 has no version counter: use watchers)"
#endif
}

uint64_t watched_dict_changes() { return g_changes; }

bool dict_watchers_available() {
#if FC_PY_MINOR >= 12
  return watcher_id() >= 0;
#else
  return false;
#endif
}

DictWatch::DictWatch(PyObject* dict) {
#if FC_PY_MINOR >= 12
  if (!dict || watcher_id() < 0) return;
  int& count = watch_counts()[dict];
  if (count == 0 && PyDict_Watch(watcher_id(), dict) < 0) {
    PyErr_Clear();
    watch_counts().erase(dict);
    return;
  }
  ++count;
  dict_ = dict;
#else
  (void)dict;
#endif
}

DictWatch::DictWatch(DictWatch&& other) noexcept : dict_(std::exchange(other.dict_, nullptr)) {}

DictWatch& DictWatch::operator=(DictWatch&& other) noexcept {
  if (this != &other) {
    this->~DictWatch();
    dict_ = std::exchange(other.dict_, nullptr);
  }
  return *this;
}

DictWatch::~DictWatch() {
#if FC_PY_MINOR >= 12
  if (!dict_) return;
  auto at = watch_counts().find(dict_);
  if (at != watch_counts().end() && --at->second == 0) {
    watch_counts().erase(at);
    PyObject *type, *value, *traceback;  // a destructor may run while an exception is on its way up
    PyErr_Fetch(&type, &value, &traceback);
    if (PyDict_Unwatch(watcher_id(), dict_) < 0) PyErr_Clear();
    PyErr_Restore(type, value, traceback);
  }
  dict_ = nullptr;
#endif
}

}  // namespace fastcomp::cpython
