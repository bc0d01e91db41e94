// Python callables that graphs call to build the objects a trace made and returns or stores: instances of user
// classes, functions with closures, cells, containers returned more than once. Each writes the final state the
// trace computed directly (no __init__, __setattr__ or __setitem__ of the class runs again).
#pragma once
#include <Python.h>

namespace fastcomp::frontend {

struct RebuildFunctions {
  PyObject* object;    // (cls, attrs: dict, items: dict | None) -> instance; items fill a dict subclass
  PyObject* function;  // (code, globals, defaults, kwdefaults, closure, attrs: dict) -> function
  PyObject* cell;      // (contents) -> cell; no argument: an empty cell
  PyObject* list;      // (*items) -> list
  PyObject* dict;      // (keys: tuple, *values) -> dict
  PyObject* set;       // (frozen: bool, *items) -> set | frozenset
  PyObject* iter_at;   // (iterable, n) -> iter(iterable) advanced by n items
};

// Created on first use (the GIL must be held); never destroyed.
const RebuildFunctions& rebuild_functions();

}  // namespace fastcomp::frontend
