// Convolutions run through torch (cuDNN), but not their bias: torch adds it in a kernel of its own after cuDNN's
// (at::convolution's cuDNN path calls cudnn_convolution, then output.add_(bias)), where fastcomp's kernel reading
// the convolution anyway (its batch norm, activation or layer norm) can add it for free. The extern step passes
// None for the bias, and the node's value is its result plus the bias along the channels, lazy like any pointwise
// value. ConvNeXt: 40 add kernels a call fewer.
#include "plan/channels_last.h"
#include "plan/lowering.h"

namespace fastcomp::plan::detail {

bool Lowerer::lower_convolution_bias(const graph::Node& n, const std::string& op) {
  if ((op != "conv1d" && op != "conv2d" && op != "conv3d") || n.target_name != "torch." + op) return false;
  // The bias positionally (what nn.Conv2d's forward passes), the other options as constants.
  if (n.type != graph::ValueType::Tensor || n.args.size() < 3 || n.args[2].kind != graph::Arg::Kind::Node) return false;
  for (size_t i = 3; i < n.args.size(); ++i)
    if (n.args[i].kind == graph::Arg::Kind::Node) return false;
  const graph::NodeId bias = n.args[2].node;
  const graph::TensorMeta& out = n.meta;
  if (out.is_dynamic() || out.sizes.size() < 2 || graph_.nodes[bias].type != graph::ValueType::Tensor) return false;
  const DType dtype = node_dtype(n.id);
  const graph::TensorMeta& b = graph_.nodes[bias].meta;
  if (!is_floating(dtype) || dtype == DType::F64 || node_dtype(bias) != dtype || b.sizes.size() != 1 ||
      b.sizes[0] != out.sizes[1])
    return false;
  check_planned_layouts(n);
  ExternStep step{n.id, "", false, 2};
  copy_operands_channels_last(n, &step);
  ensure_argument_objects(n, step);
  Buffer r;
  r.kind = Buffer::Kind::Extern;
  r.dtype = dtype;
  r.sizes = meta_sizes(out);
  r.strides = node_strides(n.id);
  step.result = add_buffer(r);
  const int result = step.result;
  add_extern_step(std::move(step));
  const int bias_buffer = buffer_for(bias);
  value_in_space(n, r.sizes, [&](Cluster& c) {
    const Buffer& rb = program_.buffers[result];
    const Buffer& bb = program_.buffers[bias_buffer];
    Sizes along_channels(rb.sizes.size(), 0);
    along_channels[1] = bb.strides[0];
    // In f32 and rounded once, as torch's add_ of a bf16/f16 bias.
    const int x = c.cast(c.load(result, dtype, rb.strides, 0), DType::F32);
    const int y = c.cast(c.load(bb.root, bb.dtype, along_channels, bb.offset), DType::F32);
    return c.cast(c.op(ExprOp::Add, DType::F32, {x, y}), dtype);
  });
  return true;
}

// A convolution planned NHWC reads its input and its weight in that order: where either is not (the network's
// image; every weight, which parameters hold NCHW), it reads an NHWC copy made by a kernel of the plan. Otherwise
// torch copies the weight inside each convolution call, which costs the host far more than a launch (ResNet-18 at
// batch 8 on an H200, default mode: 713 us a call, 0.59 of torch.compile's, where it was slower than torch.compile;
// on the GPU the copies take about as long as torch's, 65 against 71 us, as this kernel reads the NCHW weight
// uncoalesced). The copy is made every call: a parameter changed in place through .data keeps its version counter,
// so no cached copy could be trusted.
void Lowerer::copy_operands_channels_last(const graph::Node& n, ExternStep* step) {
  if (planned_strides_.empty() || planned_strides_[n.id].empty() || n.args.size() < 2 ||
      op_name(n.target_name) != "conv2d")
    return;
  auto nhwc_copy = [&](const graph::Arg& a) {
    if (a.kind != graph::Arg::Kind::Node || !value(a.node).tensor) return -1;
    const int b = buffer_for(a.node);
    const Buffer& in = buffer(b);
    if (in.sizes.size() != 4 || !codegen::all_static(in.sizes) || !codegen::all_static(in.strides)) return -1;
    std::vector<int64_t> sizes, strides;
    for (size_t d = 0; d < 4; ++d) sizes.push_back(in.sizes[d].hint()), strides.push_back(in.strides[d].hint());
    return maps_as_channels_last(sizes, strides) ? -1 : layout_copy(b, codegen::to_sizes(nhwc_strides(sizes)));
  };
  for (size_t slot : {0, 1})
    if (const int copy = nhwc_copy(n.args[slot]); copy >= 0) step->passed.push_back({slot, copy});
}

}  // namespace fastcomp::plan::detail
