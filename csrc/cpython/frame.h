// A version-neutral view of a CPython frame that has not started executing yet (the PEP 523 hook sees
// frames before their prologue runs). The struct access is per version (frame_py311.cpp /
// frame_py312.cpp); what user code would see is derived from it in frame.cpp.
#pragma once
#include <Python.h>

struct _PyInterpreterFrame;

namespace fastcomp::cpython {

// How a slot of `co_localsplusnames` is used (CPython's CO_FAST_* kinds, version-neutral).
enum class SlotKind : unsigned char { Local, Cell, Free, CellArg /* an argument that is also a cell */, Hidden };

class FrameView {
 public:
  explicit FrameView(_PyInterpreterFrame* frame) : frame_(frame) {}

  PyCodeObject* code() const;   // borrowed
  PyObject* function() const;   // borrowed; the PyFunctionObject being called
  PyObject* globals() const;    // borrowed
  PyObject* builtins() const;   // borrowed
  int nlocalsplus() const;

  // The value of fast-local slot `i` as user code would see it after the prologue: arguments and locals
  // directly, cell variables unwrapped, free variables read from the function's closure. Borrowed;
  // nullptr when unbound (always for a cell that is not an argument, whose cell does not exist yet, and for
  // hidden slots).
  PyObject* local(int i) const;
  // The cell object of a free variable slot (from the function's closure). Borrowed; nullptr if `i`
  // is not a free variable.
  PyObject* free_cell(int i) const;
  SlotKind slot_kind(int i) const;

  _PyInterpreterFrame* raw() const { return frame_; }

 private:
  // Slot `i` of localsplus exactly as stored before the prologue. Borrowed; may be nullptr.
  PyObject* raw_slot(int i) const;

  _PyInterpreterFrame* frame_;
};

// Name of slot `i` (borrowed str) for messages and guard sources.
PyObject* slot_name(PyCodeObject* code, int i);

}  // namespace fastcomp::cpython
