#include "frontend/guards/source.h"

#include <fmt/format.h>

#include "support/pystr.h"

namespace fastcomp::frontend {
namespace {

bool same_key(PyObject* a, PyObject* b) {
  if (a == b) return true;
  if (!a || !b || Py_TYPE(a) != Py_TYPE(b)) return false;
  int eq = PyObject_RichCompareBool(a, b, Py_EQ);
  if (eq < 0) PyErr_Clear();
  return eq == 1;
}

}  // namespace

// Sources that may be equal share a bucket: the same kind, base and index, and keys of one hash (a constant
// object's by identity). A model's trace interns thousands of sources (T5: a linear scan was a third of it).
size_t SourceTable::bucket_of(const Source& s) {
  size_t key = 0;
  if (s.kind == SourceKind::ConstObject) {
    key = std::hash<const void*>()(s.key.get());
  } else if (s.key) {
    const Py_hash_t h = PyObject_Hash(s.key.get());
    if (h == -1) PyErr_Clear();  // unhashable: bucket 0, compared one by one
    else key = static_cast<size_t>(h);
  }
  size_t h = static_cast<size_t>(s.kind);
  for (size_t part : {static_cast<size_t>(s.base), static_cast<size_t>(s.index), key})
    h ^= part + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h;
}

int SourceTable::intern(Source s) {
  std::vector<int>& bucket = buckets_[bucket_of(s)];
  for (int i : bucket) {
    const Source& o = sources_[i];
    // A constant object is that object: two equal ones (torch's four empty global hook dicts) are two sources.
    const bool same = s.kind == SourceKind::ConstObject ? o.key.get() == s.key.get() : same_key(o.key.get(), s.key.get());
    if (o.kind == s.kind && o.base == s.base && o.index == s.index && same) return i;
  }
  sources_.push_back(std::move(s));
  bucket.push_back(static_cast<int>(sources_.size()) - 1);
  return bucket.back();
}

int SourceTable::local(int slot, const std::string& var_name) {
  return intern({SourceKind::Local, -1, slot, {}, fmt::format("L['{}']", var_name)});
}

int SourceTable::closure(int slot, const std::string& var_name) {
  return intern({SourceKind::Closure, -1, slot, {}, fmt::format("L['{}']", var_name)});
}

int SourceTable::global(PyObject* name) {
  return intern({SourceKind::Global, -1, 0, PyRef::borrow(name), fmt::format("G['{}']", py_str(name))});
}

int SourceTable::const_object(PyObject* obj, const std::string& display_name) {
  return intern({SourceKind::ConstObject, -1, 0, PyRef::borrow(obj), display_name});
}

int SourceTable::dict_item(int base, PyObject* key) {
  return intern({SourceKind::DictItem, base, 0, PyRef::borrow(key),
                 fmt::format("{}[{}]", sources_[base].name, py_repr(key))});
}

int SourceTable::attr(int base, PyObject* name) {
  return intern({SourceKind::Attr, base, 0, PyRef::borrow(name),
                 fmt::format("{}.{}", sources_[base].name, py_str(name))});
}

int SourceTable::inst_dict(int base, PyObject* name) {
  return intern({SourceKind::InstDict, base, 0, PyRef::borrow(name),
                 fmt::format("{}.{}", sources_[base].name, py_str(name))});
}

int SourceTable::module_slot(SourceKind kind, int base, PyObject* name) {
  return intern({kind, base, 0, PyRef::borrow(name), fmt::format("{}.{}", sources_[base].name, py_str(name))});
}

int SourceTable::seq_item(int base, int index) {
  return intern({SourceKind::SeqItem, base, index, {}, fmt::format("{}[{}]", sources_[base].name, index)});
}

int SourceTable::closure_cell(int slot, const std::string& var_name) {
  return intern({SourceKind::ClosureCell, -1, slot, {}, fmt::format("<cell of L['{}']>", var_name)});
}

int SourceTable::class_dict_item(int base, PyObject* name) {
  return intern({SourceKind::ClassDictItem, base, 0, PyRef::borrow(name),
                 fmt::format("{}.__dict__[{}]", sources_[base].name, py_repr(name))});
}

int SourceTable::obj_dict(int base) {
  return intern({SourceKind::ObjDict, base, 0, {}, fmt::format("{}.__dict__", sources_[base].name)});
}

int SourceTable::cell_contents(int base) {
  return intern({SourceKind::CellContents, base, 0, {}, fmt::format("{}.cell_contents", sources_[base].name)});
}

int SourceTable::weakref_referent(int base) {
  return intern({SourceKind::WeakrefReferent, base, 0, {}, fmt::format("{}()", sources_[base].name)});
}

}  // namespace fastcomp::frontend
