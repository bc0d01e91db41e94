// Convolutions in channels-last (NHWC) memory order. Given NCHW tensors, cuDNN's fast convolution kernels
// transpose the input to NHWC and the result back around every convolution: a third of ResNet-18's GPU time at
// batch 8 on an H100. A value that only convolutions, pooling and elementwise ops read - no view, no other torch
// op, not the graph's output - has a memory order nobody observes, so the plan may choose it: the values between
// convolutions are planned NHWC, torch then runs each convolution in NHWC (passing its weight in that order too),
// and the kernels between them read and write through strides anyway. A convolution planned NHWC whose input is
// not (the network's input image) reads an NHWC copy of it.
//
// The choice is checked while lowering: an op that runs through torch on such a value but is not planned NHWC
// itself (an elementwise op lowering declined) would hand torch a layout the trace never saw, so lowering throws
// LayoutConflict and plan::lower plans the graph again in its traced layouts.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "graph/ir.h"

namespace fastcomp::plan {

// Per graph node: the strides lowering plans for its value instead of the traced ones (empty: the traced ones).
// Empty when no convolution would run channels-last.
std::vector<std::vector<int64_t>> channels_last_strides(const graph::Graph& graph);

// Whether a tensor's traced layout addresses memory as channels-last would: a 4-d tensor of one channel or one
// spatial position, or one traced NHWC.
bool maps_as_channels_last(const graph::TensorMeta& meta);
bool maps_as_channels_last(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides);
// The NHWC strides of a 4-d tensor of `sizes` [N, C, H, W].
std::vector<int64_t> nhwc_strides(const std::vector<int64_t>& sizes);

struct LayoutConflict : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace fastcomp::plan
