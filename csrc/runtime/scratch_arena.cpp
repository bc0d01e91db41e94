#include "runtime/scratch_arena.h"

#include <algorithm>
#include <numeric>

namespace fastcomp::runtime {
namespace {

bool meet(const ScratchLifetime& a, const ScratchLifetime& b) { return a.first <= b.last && b.first <= a.last; }

int64_t aligned(int64_t bytes) {
  return (std::max<int64_t>(bytes, 0) + kScratchAlignment - 1) / kScratchAlignment * kScratchAlignment;
}

}  // namespace

// Greedy interval colouring, biggest buffers first: each takes the smallest slot none of whose members it meets
// (every slot is at least as big as it by then, so the best fit wastes the least), or opens a new one.
ScratchArena::ScratchArena(const std::vector<ScratchLifetime>& buffers) : slot_(buffers.size(), -1) {
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return buffers[a].bytes != buffers[b].bytes ? buffers[a].bytes > buffers[b].bytes
                                                : buffers[a].first < buffers[b].first;
  });
  std::vector<std::vector<size_t>> members;
  std::vector<int64_t> slot_bytes;
  for (size_t i : order) {
    int best = -1;
    for (size_t s = 0; s < members.size(); ++s) {
      if (best >= 0 && slot_bytes[s] >= slot_bytes[best]) continue;
      bool free = true;
      for (size_t m : members[s]) free = free && !meet(buffers[m], buffers[i]);
      if (free) best = static_cast<int>(s);
    }
    if (best < 0) {
      best = static_cast<int>(members.size());
      members.emplace_back();
      slot_bytes.push_back(0);
    }
    members[best].push_back(i);
    slot_bytes[best] = std::max(slot_bytes[best], buffers[i].bytes);
    slot_[i] = best;
  }
  num_slots_ = static_cast<int>(members.size());
}

int64_t ScratchArena::layout(const std::vector<int64_t>& bytes, std::vector<int64_t>* offsets) const {
  std::vector<int64_t> slot_offset(num_slots_, 0);
  for (size_t i = 0; i < slot_.size(); ++i) slot_offset[slot_[i]] = std::max(slot_offset[slot_[i]], aligned(bytes[i]));
  int64_t total = 0;
  for (int64_t& s : slot_offset) {  // sizes become offsets
    const int64_t size = s;
    s = total;
    total += size;
  }
  offsets->resize(slot_.size());
  for (size_t i = 0; i < slot_.size(); ++i) (*offsets)[i] = slot_offset[slot_[i]];
  return total;
}

}  // namespace fastcomp::runtime
