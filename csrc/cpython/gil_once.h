// A value made once per process by an initialiser that calls into Python (imports, attribute lookups, calls).
//
// Why not a function-local static: C++ runs a static's initialiser under a lock of its own, and a thread that
// reaches the static while another initialises it waits on that lock. Python code can release the GIL at any
// point (an import, I/O, the interpreter switching threads every few milliseconds), so with two threads: A holds
// the static's lock and waits for the GIL inside the initialiser, B holds the GIL and waits for the static's
// lock. Neither moves (issue 26, #19: four threads making the first compile of a process).
//
// GilOnce waits for the initialiser without the GIL and runs it with the GIL, so the only lock ever held while
// waiting for the other is this one, never the GIL. A `static GilOnce<T>` is constant-initialised (no C++
// initialisation lock of its own) and trivially destructible (nothing runs after the interpreter is gone).
// The value lives until the process exits, like the Python objects it usually holds.
#pragma once
#include <Python.h>

#include <atomic>
#include <mutex>

namespace fastcomp::cpython {

template <class T>
class GilOnce {
 public:
  constexpr GilOnce() = default;

  // The value `init()` returned (a T*, possibly null) on the first call to finish; `init` runs at most once
  // successfully, with the GIL held. An exception from `init` propagates and lets a later call try again.
  // Callable with or without the GIL; returns holding it exactly if the caller did.
  template <class Init>
  T* get(Init&& init) {
    if (done_.load(std::memory_order_acquire)) return value_;
    struct Released {  // the caller's GIL, released while waiting for the once-lock
      PyThreadState* saved = PyGILState_Check() ? PyEval_SaveThread() : nullptr;
      ~Released() {
        if (saved) PyEval_RestoreThread(saved);
      }
    } released;
    std::call_once(flag_, [&] {
      struct Held {
        PyGILState_STATE state = PyGILState_Ensure();
        ~Held() { PyGILState_Release(state); }
      } held;
      value_ = init();
      done_.store(true, std::memory_order_release);
    });
    return value_;
  }

 private:
  std::once_flag flag_;
  std::atomic<bool> done_{false};
  T* value_ = nullptr;
};

// `module.attr` as a new reference, or null (error cleared) when either is missing. For GilOnce initialisers:
//   static GilOnce<PyObject> partial;  partial.get([] { return import_attr("functools", "partial"); })
inline PyObject* import_attr(const char* module, const char* attr) {
  PyObject* m = PyImport_ImportModule(module);
  PyObject* a = m ? PyObject_GetAttrString(m, attr) : nullptr;
  Py_XDECREF(m);
  if (!a) PyErr_Clear();
  return a;
}

}  // namespace fastcomp::cpython
