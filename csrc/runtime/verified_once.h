// Readers of torch internals (runtime/torch_shim.h, runtime/torch_state.h) are used only once they have checked
// themselves against torch's Python answers: made on first use, kept when `load()` and `probe()` succeed, and
// otherwise null, with a perf hint saying what callers do instead. Needs the GIL.
#pragma once
#include <Python.h>

#include "cpython/gil_once.h"
#include "support/log.h"

namespace fastcomp::runtime {

template <class Reader>
const Reader* verified_once(const char* hint_when_missing) {
  static cpython::GilOnce<const Reader> reader;
  return reader.get([&] {
    auto* r = new Reader();
    if (r->load() && r->probe()) return const_cast<const Reader*>(r);
    PyErr_Clear();
    delete r;
    FC_LOG(perf_hints, info, "{}", hint_when_missing);
    return static_cast<const Reader*>(nullptr);
  });
}

}  // namespace fastcomp::runtime
