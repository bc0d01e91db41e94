// fastcomp._C._testing.scratch_arena: the scratch arena's slot assignment and per-call layout, so CPU tests can
// check that buffers alive at the same time never share bytes.
#include <pybind11/stl.h>

#include <optional>
#include <tuple>
#include <vector>

#include "bindings/bind.h"
#include "runtime/scratch_arena.h"

namespace fastcomp::bindings {

void bind_scratch_arena(py::module_& m) {
  m.def(
      "scratch_arena",
      [](const std::vector<std::tuple<int, int, int64_t>>& lifetimes, std::optional<std::vector<int64_t>> sizes) {
        std::vector<runtime::ScratchLifetime> buffers;
        for (const auto& [first, last, bytes] : lifetimes) {
          if (first > last) throw py::value_error("a lifetime's first step comes after its last");
          buffers.push_back({first, last, bytes});
        }
        if (!sizes) {
          sizes.emplace();
          for (const auto& b : buffers) sizes->push_back(b.bytes);
        }
        if (sizes->size() != buffers.size()) throw py::value_error("sizes needs one entry per buffer");
        const runtime::ScratchArena arena(buffers);
        std::vector<int> slots;
        for (size_t i = 0; i < buffers.size(); ++i) slots.push_back(arena.slot(i));
        std::vector<int64_t> offsets;
        const int64_t total = arena.layout(*sizes, &offsets);
        py::dict out;
        out["slots"] = slots;
        out["offsets"] = offsets;
        out["size"] = total;
        out["alignment"] = runtime::kScratchAlignment;
        return out;
      },
      py::arg("lifetimes"), py::arg("sizes") = py::none(),
      "Packs buffers given as (first step, last step, bytes at the trace-time shape) into slots; returns their "
      "slots, byte offsets and the arena's size for `sizes` (this call's bytes per buffer; default: the "
      "trace-time bytes).");
}

}  // namespace fastcomp::bindings
