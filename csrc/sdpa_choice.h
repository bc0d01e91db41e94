// Which of torch's kernels F.scaled_dot_product_attention runs: the lowering of a masked f16 or bf16 head asks,
// because torch's kernels disagree there. cuDNN's gives a query row the mask leaves no key the mean of the values
// (the others, and fastcomp's attention kernel, give 0), and the math path computes half heads in f32 and rounds
// the output once, where the fused kernels round the probabilities before their product with v.
#pragma once
#include <functional>

#include "frontend/guards/guards.h"
#include "plan/lower.h"

namespace fastcomp {

/** On a CUDA device: torch's own answer (torch._fused_sdp_choice on uninitialised tensors of the traced sizes,
 *  strides and dtype), which weighs the SDPA settings, the device and the operands as F.scaled_dot_product_attention
 *  does. Sets `*asked` when it is called. */
plan::SdpKernelQuery torch_sdp_kernel(bool* asked);

/** Rehearsal (CPU graphs planned as if on a GPU): the first of torch's kernels that takes a mask in its priority
 *  order among those enabled (memory-efficient, math or cuDNN), a model of what torch picks on an H100. Sets
 *  `*asked` when it is called. */
plan::SdpKernelQuery rehearsed_sdp_kernel(bool* asked);

/** On a CUDA device: the bias torch's F.scaled_dot_product_attention makes of a boolean mask for cuDNN, read from
 *  its own decomposition on stand-ins of the traced layouts (fastcomp/_attention_bias.py); nullopt where it cannot
 *  be seen exactly. Ask only for a head torch runs on cuDNN (torch_sdp_kernel). */
plan::SdpMaskBiasQuery torch_sdp_mask_bias();

/** Rehearsal: a model of torch 2.5 to 2.11 on an H100 (where(mask, 0, -65504) in the query's dtype, contiguous). */
plan::SdpMaskBiasQuery rehearsed_sdp_mask_bias();

/** Guards the settings torch's choice depends on (which kernels are enabled, their priority order, whether the math
 *  path may compute half heads in half): a graph whose lowering asked adds them. */
void add_sdp_setting_guards(frontend::GuardSet& guards);

}  // namespace fastcomp
