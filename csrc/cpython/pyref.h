// RAII ownership of CPython references. Every PyObject* that fastcomp keeps beyond one call lives in a PyRef.
#pragma once
#include <Python.h>

#include <utility>

namespace fastcomp {

// An owned (strong) reference. Moves transfer ownership; copies add a reference.
class PyRef {
 public:
  PyRef() = default;
  // Takes ownership of a new reference (may be null).
  static PyRef steal(PyObject* o) { return PyRef(o); }
  // Adds a reference to a borrowed pointer (may be null).
  static PyRef borrow(PyObject* o) {
    Py_XINCREF(o);
    return PyRef(o);
  }
  PyRef(const PyRef& other) : obj_(other.obj_) { Py_XINCREF(obj_); }
  PyRef(PyRef&& other) noexcept : obj_(std::exchange(other.obj_, nullptr)) {}
  PyRef& operator=(PyRef other) noexcept {
    std::swap(obj_, other.obj_);
    return *this;
  }
  ~PyRef() { Py_XDECREF(obj_); }

  PyObject* get() const { return obj_; }  // borrowed
  PyObject* release() { return std::exchange(obj_, nullptr); }  // new reference for the caller
  PyObject* new_ref() const {
    Py_XINCREF(obj_);
    return obj_;
  }
  explicit operator bool() const { return obj_ != nullptr; }
  bool operator==(const PyRef& o) const { return obj_ == o.obj_; }

 private:
  explicit PyRef(PyObject* o) : obj_(o) {}
  PyObject* obj_ = nullptr;
};

}  // namespace fastcomp
