#include "plan/channels_last.h"

#include <numeric>
#include <string>

#include "plan/lowering.h"
#include "support/pystr.h"

namespace fastcomp::plan {
namespace {

using detail::CallArgs;

// How an op treats the memory order of its (first) tensor argument.
enum class Role : uint8_t {
  Other,        // may observe or depend on it: never given a replanned value
  Elementwise,  // reads every operand through its strides; its own result's order is free
  Follows,      // torch gives its result its input's memory order: convolution, pooling, an in-place op
};

struct OpInfo {
  Role role = Role::Other;
  bool convolution = false;  // a 2-d convolution of one group: what makes channels-last pay
  bool elementwise = false;  // also in place: every operand but the one written is read through its strides
};

OpInfo classify(const graph::Node& n) {
  if (n.kind != graph::NodeKind::Call || n.type != graph::ValueType::Tensor) return {};
  const bool in_place = graph::writes_an_argument(n);
  const graph::Node f = in_place ? detail::functional_form(n) : graph::Node();
  const graph::Node& call = in_place ? f : n;
  const std::string op = detail::called_op_name(call);
  if (op == "conv2d" && (call.target_name == "torch.conv2d" || call.target_name == "torch.nn.functional.conv2d")) {
    // Grouped (depthwise) convolutions keep their traced order: cuDNN's NHWC kernels for them are not reliably
    // faster.
    const graph::Arg* groups = CallArgs(call).get(6, "groups");
    if (in_place || call.args.empty() || call.args[0].kind != graph::Arg::Kind::Node ||
        (groups && detail::const_int(groups) != 1))
      return {};
    return {Role::Follows, true, false};
  }
  if (op == "max_pool2d" || op == "avg_pool2d" || op == "adaptive_avg_pool2d") return {in_place ? Role::Other : Role::Follows};
  if (!detail::is_elementwise_op(call, op)) return {};
  return {in_place ? Role::Follows : Role::Elementwise, false, true};
}

bool same_mapping(const std::vector<int64_t>& sizes, const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  for (size_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] != 1 && a[d] != b[d]) return false;
  return true;
}

// A value lowering may plan NHWC: a static 4-d floating tensor the trace saw NCHW-contiguous, whose two orders
// differ.
bool replannable(const graph::Node& n) {
  const graph::TensorMeta& m = n.meta;
  if (n.kind != graph::NodeKind::Call || n.type != graph::ValueType::Tensor || m.sizes.size() != 4 || m.is_dynamic())
    return false;
  const auto dtype = detail::dtype_of(m.dtype.get());
  if (!dtype || !detail::is_floating(*dtype) || *dtype == codegen::DType::F64) return false;
  const Sizes contiguous = contiguous_strides(codegen::to_sizes(m.sizes));
  for (size_t d = 0; d < 4; ++d)
    if (m.sizes[d] != 1 && contiguous[d].hint() != m.strides[d]) return false;
  return !maps_as_channels_last(m);
}

struct Use {
  graph::NodeId user;
  bool first;  // as the user's first argument (its `input`)
};

// Each node's uses by others; a use inside a list, tuple or dict argument, or by the graph's output, makes
// `fixed` true (its layout may be observed).
void collect_uses(const graph::Graph& g, std::vector<std::vector<Use>>* uses, std::vector<bool>* fixed) {
  uses->assign(g.nodes.size(), {});
  fixed->assign(g.nodes.size(), false);
  auto nested = [&](const graph::Arg& a, const auto& self) -> void {
    if (a.kind == graph::Arg::Kind::Node) (*fixed)[a.node] = true;
    for (const auto& item : a.items) self(item, self);
  };
  for (const graph::Node& n : g.nodes) {
    auto top = [&](const graph::Arg& a, bool first) {
      if (a.kind == graph::Arg::Kind::Node) (*uses)[a.node].push_back({n.id, first});
      for (const auto& item : a.items) nested(item, nested);
    };
    for (size_t i = 0; i < n.args.size(); ++i) top(n.args[i], i == 0);
    if (n.kwnames)
      for (size_t i = 0; i < n.kwargs.size(); ++i)
        top(n.kwargs[i], utf8(PyTuple_GET_ITEM(n.kwnames.get(), static_cast<Py_ssize_t>(i))) == "input");
  }
  nested(g.output, nested);
}

int find(std::vector<int>& parent, int x) {
  while (parent[x] != x) x = parent[x] = parent[parent[x]];
  return x;
}

}  // namespace

std::vector<int64_t> nhwc_strides(const std::vector<int64_t>& s) {
  return {s[1] * s[2] * s[3], 1, s[3] * s[1], s[1]};
}

bool maps_as_channels_last(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  if (sizes.size() != 4) return false;
  if (sizes[1] == 1 || sizes[2] * sizes[3] == 1) return true;
  return same_mapping(sizes, strides, nhwc_strides(sizes));
}

bool maps_as_channels_last(const graph::TensorMeta& m) { return maps_as_channels_last(m.sizes, m.strides); }

std::vector<std::vector<int64_t>> channels_last_strides(const graph::Graph& g) {
  const size_t count = g.nodes.size();
  std::vector<OpInfo> info(count);
  for (const graph::Node& n : g.nodes) info[n.id] = classify(n);
  std::vector<std::vector<Use>> uses;
  std::vector<bool> fixed;
  collect_uses(g, &uses, &fixed);
  auto first_tensor = [&](graph::NodeId id) -> graph::NodeId {
    const graph::Node& n = g.nodes[id];
    const graph::Arg* a = CallArgs(n).get(0, "input");
    return a && a->kind == graph::Arg::Kind::Node ? a->node : -1;
  };

  // Start from every value that may be replanned and that only tolerant ops read, then drop values until the
  // rules hold: an op that follows its input's order is NHWC exactly when that input is.
  std::vector<bool> nhwc(count, false);
  bool any_convolution = false;
  for (const graph::Node& n : g.nodes) {
    if (info[n.id].role == Role::Other || fixed[n.id] || !replannable(n)) continue;
    bool tolerated = true;
    for (const Use& u : uses[n.id]) {
      const OpInfo& user = info[u.user];
      tolerated = tolerated && (user.elementwise || (user.role == Role::Follows && u.first));
    }
    nhwc[n.id] = tolerated;
    any_convolution = any_convolution || (tolerated && info[n.id].convolution);
  }
  if (!any_convolution) return {};
  for (bool changed = true; changed;) {
    changed = false;
    for (const graph::Node& n : g.nodes) {
      if (!nhwc[n.id]) continue;
      bool keep = true;
      // A convolution whose input stays as traced reads an NHWC copy of it (lowering makes one): cheaper than
      // cuDNN's own transposes of its input and result.
      if (info[n.id].role == Role::Follows && !info[n.id].convolution) {
        const graph::NodeId x = first_tensor(n.id);
        keep = x >= 0 && nhwc[x];
      }
      for (const Use& u : uses[n.id])
        if (info[u.user].role == Role::Follows && u.first && !nhwc[u.user] &&
            !maps_as_channels_last(g.nodes[u.user].meta))
          keep = false;
      if (!keep) {
        nhwc[n.id] = false;
        changed = true;
      }
    }
  }
  // Only regions where a convolution reads a value planned NHWC gain: a lone convolution would only trade cuDNN's
  // transposes for copies of its own.
  std::vector<int> parent(count);
  std::iota(parent.begin(), parent.end(), 0);
  for (const graph::Node& n : g.nodes)
    if (nhwc[n.id])
      for (const Use& u : uses[n.id])
        if (nhwc[u.user]) parent[find(parent, u.user)] = find(parent, n.id);
  std::vector<bool> gains(count, false);
  for (const graph::Node& n : g.nodes)
    if (nhwc[n.id] && info[n.id].convolution && nhwc[first_tensor(n.id)]) gains[find(parent, n.id)] = true;
  std::vector<std::vector<int64_t>> out(count);
  bool any = false;
  for (const graph::Node& n : g.nodes)
    if (nhwc[n.id] && gains[find(parent, n.id)]) {
      out[n.id] = nhwc_strides(n.meta.sizes);
      any = true;
    }
  if (!any) out.clear();
  return out;
}

}  // namespace fastcomp::plan
