#include "graph/repeated_casts.h"

#include <map>
#include <string>
#include <vector>

namespace fastcomp::graph {
namespace {

// Appends repr(value) and a separator; false where the repr fails.
bool append_repr(PyObject* value, std::string* key) {
  PyObject* r = PyObject_Repr(value);
  if (!r) {
    PyErr_Clear();
    return false;
  }
  *key += PyUnicode_AsUTF8(r);
  *key += '\x1f';
  Py_DECREF(r);
  return true;
}

// The constant arguments of a cast as a key: their reprs (dtypes, devices, bools), in order, then the keyword
// names and values.
bool constant_key(const Node& n, std::string* key) {
  if (n.args.empty() || n.args[0].kind != Arg::Kind::Node) return false;
  for (size_t i = 1; i < n.args.size(); ++i)
    if (n.args[i].kind != Arg::Kind::Const || !append_repr(n.args[i].value.get(), key)) return false;
  if (n.kwnames && !append_repr(n.kwnames.get(), key)) return false;
  for (const Arg& a : n.kwargs)
    if (a.kind != Arg::Kind::Const || !append_repr(a.value.get(), key)) return false;
  return true;
}

void mark(const Arg& a, std::vector<bool>& held) {
  if (a.kind == Arg::Kind::Node) held[a.node] = true;
  for (const Arg& item : a.items) mark(item, held);
}

void rewire(Arg& a, const std::vector<NodeId>& to) {
  if (a.kind == Arg::Kind::Node && to[a.node] >= 0) a.node = to[a.node];
  for (Arg& item : a.items) rewire(item, to);
}

}  // namespace

int share_repeated_casts(Graph& graph) {
  for (const Node& n : graph.nodes)
    if (n.kind == NodeKind::Call && has_write_effects(n)) return 0;
  std::vector<bool> held(graph.nodes.size(), false);  // by the output or a rebuilt object
  mark(graph.output, held);
  for (const Node& n : graph.nodes)
    if (n.rebuilds) {
      for (const Arg& a : n.args) mark(a, held);
      for (const Arg& a : n.kwargs) mark(a, held);
    }
  std::vector<NodeId> to(graph.nodes.size(), -1);
  std::map<std::pair<NodeId, std::string>, NodeId> first;
  int shared = 0;
  for (Node& n : graph.nodes) {
    for (Arg& a : n.args) rewire(a, to);
    for (Arg& a : n.kwargs) rewire(a, to);
    std::string key;
    if (n.kind != NodeKind::Call || n.target_name != "Tensor.to" || n.type != ValueType::Tensor ||
        !constant_key(n, &key))
      continue;
    auto [it, added] = first.emplace(std::make_pair(n.args[0].node, key), n.id);
    if (added || held[n.id] || held[it->second]) continue;
    to[n.id] = it->second;
    ++shared;
  }
  return shared;
}

}  // namespace fastcomp::graph
