// Pointwise kernels that read only graph inputs (the weights under autocast, cast to the region's dtype on every
// call; a bias cast for each product) depend on nothing the plan computes, so they may run earlier than where
// lowering put them: before the first of them, as one combo kernel (kernel_ir.h's Kind::Combo). One launch instead
// of dozens of a few microseconds each, and products that share an A find their cast B's ready for one batched
// call (group_products.h).
//
// First, a pointwise kernel that computes what an earlier one did (the same code on the same inputs, written once:
// an activation cast to the region's dtype once for each of q, k and v) is left out, its outputs views of the
// earlier one's; then the products of one activation share one A.
//
// Moving a kernel earlier keeps its output alive longer: a combo makes at most kMaxComboBytes of outputs, and the
// next candidates start another combo where the last one stopped.
#pragma once
#include <cstdint>

#include "graph/ir.h"
#include "plan/program.h"

namespace fastcomp::plan {

/** Combines such kernels in `program`: static pointwise kernels whose inputs are graph inputs (in a program where
 *  no step writes a graph input, and no extern step writes any argument), whose outputs are buffers of their own, and that read and
 *  write in their iteration order (no transposing read: a part is never tiled). Each combo runs where its first
 *  part did. */
void combine_input_kernels(Program& program, const graph::Graph& graph);

constexpr size_t kMaxComboParts = 32;
constexpr int64_t kMaxComboBytes = int64_t{32} << 20;

}  // namespace fastcomp::plan
