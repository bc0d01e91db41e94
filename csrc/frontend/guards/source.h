// Where a value the trace read came from, as a path from the frame: L['self'].fc1.weight, G['torch'], ...
// Sources are interned in a SourceTable; a source's base always has a smaller id, so the table is in
// evaluation order and the guard program loads each source once per call.
#pragma once
#include <Python.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "cpython/pyref.h"

namespace fastcomp::frontend {

enum class SourceKind : uint8_t {
  Local,         // frame fast-local slot `index`
  Closure,       // contents of the free-variable cell in slot `index`
  Global,        // the frame's globals[key], falling back to its builtins
  ConstObject,   // an object the guard program holds itself (`key`), e.g. an inlined function's globals
  DictItem,      // base[key] where base is a dict (exact lookup, no __missing__)
  Attr,          // getattr(base, key)
  InstDict,      // base.__dict__[key]: instance attributes without descriptor lookup
  ModuleParam,   // base._parameters[key]
  ModuleBuffer,  // base._buffers[key]
  ModuleChild,   // base._modules[key]
  SeqItem,       // base[index] for a tuple or list
  ObjDict,       // base.__dict__ (the instance dict itself)
  ClosureCell,   // the cell object of free-variable slot `index` (where a nonlocal assignment is written back)
  ClassDictItem, // base is a class: its own namespace's entry `key` (a class attribute, read without descriptors)
  CellContents,  // base is a cell object: its contents (what `cell_contents` gives, read without getattr)
  WeakrefReferent,  // base is a weakref.ref: what calling it gives (its referent, None once that is gone)
};

struct Source {
  SourceKind kind = SourceKind::Local;
  int base = -1;  // id of the base source, -1 for roots
  int index = 0;  // Local/Closure slot, SeqItem index
  PyRef key;      // name (str) or dict key or the held object (ConstObject)
  std::string name;  // user-facing path, e.g. "L['self'].fc1.weight"
};

class SourceTable {
 public:
  int local(int slot, const std::string& var_name);
  int closure(int slot, const std::string& var_name);
  int global(PyObject* name);
  int const_object(PyObject* obj, const std::string& display_name);
  int dict_item(int base, PyObject* key);
  int attr(int base, PyObject* name);
  int inst_dict(int base, PyObject* name);
  int module_slot(SourceKind kind, int base, PyObject* name);
  int seq_item(int base, int index);
  int obj_dict(int base);
  int closure_cell(int slot, const std::string& var_name);
  int class_dict_item(int base, PyObject* name);
  int cell_contents(int base);
  int weakref_referent(int base);

  const Source& at(int id) const { return sources_[id]; }
  const std::string& name(int id) const { return sources_[id].name; }
  int size() const { return static_cast<int>(sources_.size()); }

 private:
  int intern(Source s);
  static size_t bucket_of(const Source& s);
  std::vector<Source> sources_;
  std::unordered_map<size_t, std::vector<int>> buckets_;  // bucket_of -> the sources in it
};

}  // namespace fastcomp::frontend
