// Repeated casts of one tensor: under autocast (casts explicit) each op casts its arguments itself, so an
// activation read by q, k and v is cast to bf16 three times, and a weight used twice is cast twice. The values are
// the same while nothing writes in between, so later casts may read the first one's result: the backend then
// computes it once and sees one A for the three products (one batched call, plan/group_products.h).
#pragma once
#include "graph/ir.h"

namespace fastcomp::graph {

/** Rewires the uses of each `Tensor.to` node that repeats an earlier one (the same tensor node and the same
 *  constant arguments) to that one, leaving the repeat unused. Only in graphs where no node writes an argument (a
 *  write would make the two casts differ, or the shared result visible), and never for a cast that the graph's
 *  output or a rebuilt object holds (it is a tensor of its own in eager). Returns how many it rewired. */
int share_repeated_casts(Graph& graph);

}  // namespace fastcomp::graph
