// Where a call's scratch buffers live inside its one scratch allocation. Buffers whose lifetimes (step indices,
// both ends included) never meet share a slot, so the arena is about the peak of the buffers alive at once rather
// than their sum. Slots are chosen once, at build time; under dynamic shapes a slot's size is the largest of its
// members' sizes in each call, and the slots' offsets are that call's prefix sums. Pure: no Python, no CUDA.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace fastcomp::runtime {

// torch's caching allocator hands out 512-byte aligned blocks; cuBLASLt and vector loads need 16 of them.
constexpr int64_t kScratchAlignment = 512;

struct ScratchLifetime {
  int first = 0;      // the first step that writes the buffer
  int last = 0;       // the last step that reads or writes it
  int64_t bytes = 0;  // its size at the trace-time shape: orders the packing (bigger buffers choose slots first)
};

class ScratchArena {
 public:
  ScratchArena() = default;
  // Gives every buffer a slot shared only with buffers whose lifetimes are disjoint from its own.
  explicit ScratchArena(const std::vector<ScratchLifetime>& buffers);

  size_t num_buffers() const { return slot_.size(); }
  int num_slots() const { return num_slots_; }
  int slot(size_t buffer) const { return slot_[buffer]; }
  // This call's layout: `bytes` holds each buffer's size now; writes each buffer's byte offset into the arena to
  // `offsets` (multiples of kScratchAlignment) and returns the arena's size in bytes.
  int64_t layout(const std::vector<int64_t>& bytes, std::vector<int64_t>* offsets) const;

 private:
  std::vector<int> slot_;  // per buffer
  int num_slots_ = 0;
};

}  // namespace fastcomp::runtime
