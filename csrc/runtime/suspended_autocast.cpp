#include "runtime/suspended_autocast.h"

#include "cpython/gil_once.h"
#include "cpython/pyref.h"

namespace fastcomp::runtime {
namespace {

struct SuspendRefs {
  PyRef suspend, resume;  // fastcomp._autocast.suspend / resume
};

const SuspendRefs* suspend_refs() {
  static cpython::GilOnce<SuspendRefs> refs;
  return refs.get([]() -> SuspendRefs* {
    auto r = new SuspendRefs;
    r->suspend = PyRef::steal(cpython::import_attr("fastcomp._autocast", "suspend"));
    r->resume = PyRef::steal(cpython::import_attr("fastcomp._autocast", "resume"));
    if (!r->suspend || !r->resume) {
      PyErr_Clear();
      delete r;
      return nullptr;
    }
    return r;
  });
}

class AutocastSuspended final : public Executable {
 public:
  explicit AutocastSuspended(std::unique_ptr<Executable> inner) : inner_(std::move(inner)) {}

  PyObject* run(PyObject* const* inputs, size_t ninputs) override {
    const SuspendRefs* R = suspend_refs();
    if (!R) {
      PyErr_SetString(PyExc_RuntimeError, "fastcomp: fastcomp._autocast.suspend is missing");
      return nullptr;
    }
    PyRef was = PyRef::steal(PyObject_CallNoArgs(R->suspend.get()));
    if (!was) return nullptr;
    PyObject* out = inner_->run(inputs, ninputs);
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyRef resumed = PyRef::steal(PyObject_CallOneArg(R->resume.get(), was.get()));
    if (!resumed) {
      Py_XDECREF(out);
      out = nullptr;
      Py_XDECREF(type), Py_XDECREF(value), Py_XDECREF(tb);
      return nullptr;
    }
    PyErr_Restore(type, value, tb);
    return out;
  }
  std::string describe() const override { return inner_->describe() + ", autocast suspended"; }
  bool compiling() const override { return inner_->compiling(); }
  int tuned_matmul_picks() const override { return inner_->tuned_matmul_picks(); }
  void prefer_heuristic_matmul_picks(bool heuristic) override { inner_->prefer_heuristic_matmul_picks(heuristic); }

 private:
  std::unique_ptr<Executable> inner_;
};

}  // namespace

std::unique_ptr<Executable> with_autocast_suspended(std::unique_ptr<Executable> inner) {
  return std::make_unique<AutocastSuspended>(std::move(inner));
}

}  // namespace fastcomp::runtime
