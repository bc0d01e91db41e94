// Two matrix products that read the same A with the same shape (x @ Wg and x @ Wu of a SwiGLU MLP, separate
// q/k/v projections of one activation) as one batched cuBLASLt call: the second weight is the batch's second B,
// at whatever distance from the first it lies (read per call), and both results are the batches of one buffer.
// One launch instead of two, and on mid-sized products more tiles a wave: W9's pair on an H200, 38.6 -> 34.5 µs
// (scripts/shared_operand_probe.py).
#pragma once
#include "plan/program.h"

namespace fastcomp::plan {

/** Fuses such pairs in `program` (see MatmulStep::b_second). A pair needs: plain products (batch 1, no bias or
 *  activation), the same A view, B's of one layout that are graph inputs (weights, ready before either product
 *  runs), results that are scratch (not graph outputs or objects), no extern step between them, and a result of
 *  at most kPairMaxOutputElements (beyond a few waves of tiles, two calls were faster). */
void pair_shared_operand_products(Program& program);

// 8 Mi elements: four waves of 128 x 128 tiles on a 132-SM H100/H200. At 4096 x 4096 (f16, H200) the batched
// call took 396 µs against 359 for two; at 2048 x 2816 (bf16) 34.5 against 38.6.
constexpr int64_t kPairMaxOutputElements = int64_t{8} << 20;

}  // namespace fastcomp::plan
