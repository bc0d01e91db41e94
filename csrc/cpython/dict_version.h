// Knowing that a dict has not changed without reading its entries. A dict's version tag (PEP 509) changes
// whenever its entries do, so an unchanged tag means the same keys mapped to the same objects; from 3.12 a dict
// watcher can also tell, without reading the dict at all, that none of a set of dicts changed.
#pragma once
#include <Python.h>

#include <cstdint>

namespace fastcomp::cpython {

// `dict` must be a dict (a subclass included: the tag belongs to its storage, which PyDict_* calls read).
uint64_t dict_version(PyObject* dict);

// A count of the changes made to the dicts that DictWatch objects watch, over the process; it stays the same while
// none of them changes. Only meaningful while dict_watchers_available().
uint64_t watched_dict_changes();
bool dict_watchers_available();

// Watches a dict while it lives (dicts watched by several DictWatch objects are watched once). `watching()` is
// false where this CPython has no dict watchers or none was free; the caller then compares version tags.
class DictWatch {
 public:
  DictWatch() = default;
  explicit DictWatch(PyObject* dict);
  DictWatch(DictWatch&& other) noexcept;
  DictWatch& operator=(DictWatch&& other) noexcept;
  DictWatch(const DictWatch&) = delete;
  DictWatch& operator=(const DictWatch&) = delete;
  ~DictWatch();
  bool watching() const { return dict_ != nullptr; }

 private:
  PyObject* dict_ = nullptr;  // borrowed: its owner keeps the dict alive longer than this
};

}  // namespace fastcomp::cpython
