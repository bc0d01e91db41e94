// When each buffer and graph value of a fusion plan is alive while the plan runs, in step indices, and which
// buffers live in the call's scratch arena: what the CUDA executable needs to allocate buffers just before their
// first use and release them after their last reader. Computed once per executable; makes no Python calls.
#pragma once
#include <string>
#include <vector>

#include "graph/ir.h"
#include "plan/program.h"
#include "runtime/scratch_arena.h"

namespace fastcomp::runtime {

struct MemoryPlan {
  int end = 0;  // the step index that stands for the graph's output: program.steps.size()
  // Per buffer (roots only: a view's uses count as its root's): the step that first uses it (its writer; for a
  // bare allocation, torch.empty, maybe a reader or an extern op filling it in place) and the last step that reads
  // or writes it; `end` when the output holds it; -1 where no step does.
  std::vector<int> first_use, last_use;
  std::vector<int> node_last_use;  // per graph node: the last step that reads its torch object (`end`: the output)
  std::vector<bool> check_layout;  // per Extern buffer: a kernel or matmul reads it through its planned strides

  // Alloc buffers that never need a torch object: none is made from them (node_object), no extern step reads
  // them, the output does not hold them. Only the plan's kernels and matmuls touch them, so they share one
  // allocation per call, `arena` placing them (in `scratch` order).
  std::vector<int> scratch;
  ScratchArena arena;
  int arena_first = -1, arena_last = -1;  // the arena is allocated before step arena_first, released after arena_last
  bool arena_static = true;               // every scratch buffer's size is static: the layout is the same each call

  // "scratch arena: 6 buffers in 3 slots, 1536 bytes (b2 b5 | b3 | b4 b7 b9)"; "dynamic" for the size where it
  // depends on the shapes; "" when there are no scratch buffers.
  std::string to_string(const plan::Program& program) const;
};

MemoryPlan plan_memory(const plan::Program& program, const graph::Graph& graph);

// Bytes from a buffer's first element to one past its last, at the sizes' trace-time values (0 when empty).
int64_t span_bytes_hint(const plan::Buffer& buffer);

}  // namespace fastcomp::runtime
