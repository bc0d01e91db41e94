// Matrix products that read the same A with the same shape (x @ Wg and x @ Wu of a SwiGLU MLP, separate q/k/v
// projections of one activation) as one batched cuBLASLt call: batch i's B is the i-th weight, wherever it lies
// (the executable reads the distances on each call), and the results are the batches of one buffer. One launch
// instead of several, and on mid-sized products more tiles a wave: W9's pair on an H200, 38.6 -> 34.5 µs
// (scripts/shared_operand_probe.py).
#pragma once
#include "plan/program.h"

namespace fastcomp::plan {

/** Groups such products in `program` (see MatmulStep::b_next). A group's products are plain (batch 1, no
 *  activation; each with a bias or none), read the same A view, have B's of one layout that are graph inputs
 *  (weights, ready before any of them runs), and results that are scratch (not graph outputs or objects), with no
 *  extern step between them; at most kMaxGroupedProducts, each result at most kGroupMaxOutputElements (beyond
 *  a few waves of tiles, separate calls were faster). */
void group_shared_operand_products(Program& program);

// q, k, v and one more: past a few products the batch alone fills several waves of tiles, where separate calls
// do as well (see kGroupMaxOutputElements).
constexpr int kMaxGroupedProducts = 4;
// 8 Mi elements: four waves of 128 x 128 tiles on a 132-SM H100/H200. At 4096 x 4096 (f16, H200) a batched pair
// took 396 µs against 359 for two calls; at 2048 x 2816 (bf16) 34.5 against 38.6.
constexpr int64_t kGroupMaxOutputElements = int64_t{8} << 20;

}  // namespace fastcomp::plan
