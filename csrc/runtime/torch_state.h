// Torch's global and thread-local state as plain C reads, for the global-state guards every compiled graph
// checks on every call. Asking torch through Python costs a call each: torch.get_default_dtype() and
// torch._C._is_any_autocast_enabled() together cost about as much as the rest of a one-tensor graph's guards.
//
// Both reads use libc10 symbols that are C++ rather than torch's stable C shim, so they are only a fast path:
// - the default dtype: c10::get_default_dtype_as_scalartype(), checked once against torch.get_default_dtype();
// - the thread's local dispatch key set (c10::impl::raw_local_dispatch_key_set, a thread_local pair of 64-bit
//   masks). Autocast being on for a device is its key being out of the excluded mask, so an unchanged pair
//   means unchanged autocast state; the read is checked once by entering and leaving torch.autocast("cpu").
// A guard whose recorded value differs (or a torch where a check failed) asks torch through Python as before.
#pragma once
#include <Python.h>

#include <cstdint>

namespace fastcomp::runtime {

struct LocalDispatchKeys {
  uint64_t included = 0, excluded = 0;
  bool operator==(const LocalDispatchKeys& o) const { return included == o.included && excluded == o.excluded; }
};

class TorchState {
 public:
  template <class Reader>
  friend const Reader* verified_once(const char*);

  // The reader, or null when this torch lacks a symbol or a check failed. Resolved on the first call (which
  // enters and leaves CPU autocast once); needs the GIL.
  static const TorchState* get();

  // c10::ScalarType of torch.get_default_dtype(), in the shim's numbering (runtime/torch_shim.h).
  int32_t default_dtype() const { return default_dtype_(); }
  // This thread's local dispatch key set.
  LocalDispatchKeys local_dispatch_keys() const;

 private:
  bool load();
  bool probe() const;
  int8_t (*default_dtype_)() = nullptr;
  void* c10_ = nullptr;  // libc10's handle, for the per-thread address of the key set
};

}  // namespace fastcomp::runtime
