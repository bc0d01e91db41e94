#include "graph/ir.h"

#include <string_view>

#include <fmt/format.h>

#include "support/pystr.h"

namespace fastcomp::graph {
namespace {

std::string join_ints(const std::vector<int64_t>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out;
}

std::string arg_to_string(const Arg& a) {
  switch (a.kind) {
    case Arg::Kind::Node: return fmt::format("%{}", a.node);
    case Arg::Kind::Const: return py_repr(a.value.get());
    case Arg::Kind::Sym: return str(a.sym);
    case Arg::Kind::Slice:
      return fmt::format("slice({}, {}, {})", arg_to_string(a.items[0]), arg_to_string(a.items[1]), arg_to_string(a.items[2]));
    case Arg::Kind::Tuple:
    case Arg::Kind::List: {
      std::string out = a.kind == Arg::Kind::Tuple ? "(" : "[";
      for (size_t i = 0; i < a.items.size(); ++i) out += (i ? ", " : "") + arg_to_string(a.items[i]);
      if (a.kind == Arg::Kind::Tuple && a.items.size() == 1) out += ",";
      return out + (a.kind == Arg::Kind::Tuple ? ")" : "]");
    }
    case Arg::Kind::Dict: {
      std::string out = "{";
      for (size_t i = 0; i < a.items.size(); ++i)
        out += (i ? ", " : "") + py_repr(a.keys[i].get()) + ": " + arg_to_string(a.items[i]);
      return out + "}";
    }
  }
  return "?";
}

}  // namespace

bool writes_an_argument(const graph::Node& n) {
  const std::string& t = n.target_name;
  if (t.rfind("operator.", 0) == 0) {
    // The operator module's in-place functions (iadd ... ixor) and setitem; and_, or_, not_, is_, invert and
    // index compute new values.
    static const std::string_view kInPlace[] = {"iadd",  "iand",      "iconcat", "ifloordiv", "ilshift",
                                               "imod",  "imul",      "imatmul", "ior",       "ipow",
                                               "irshift", "isub",    "itruediv", "ixor",     "setitem"};
    const std::string_view op = std::string_view(t).substr(9);
    for (auto name : kInPlace)
      if (op == name) return true;
    return false;
  }
  if (t == "Tensor.__setitem__") return true;
  const std::string op = t.substr(t.rfind('.') + 1);
  if (op.size() > 1 && op.back() == '_' && op.rfind("__", 0) != 0) return true;
  if (n.kwnames)
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(n.kwnames.get()); ++i) {
      const std::string key = utf8(PyTuple_GET_ITEM(n.kwnames.get(), i));
      if (key == "out") return true;
      if (key == "inplace" && n.kwargs[i].kind == Arg::Kind::Const && PyObject_IsTrue(n.kwargs[i].value.get()) == 1)
        return true;
    }
  return functional_inplace_position(n) >= 0;
}

namespace {

// The argument given at `position` or as keyword `name`; null when it is not given.
const Arg* argument(const Node& n, size_t position, std::string_view name) {
  if (n.args.size() > position) return &n.args[position];
  if (n.kwnames)
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(n.kwnames.get()); ++i)
      if (utf8(PyTuple_GET_ITEM(n.kwnames.get(), i)) == name) return &n.kwargs[i];
  return nullptr;
}

bool is_const(const Arg* a, PyObject* value) { return a && a->kind == Arg::Kind::Const && a->value.get() == value; }

}  // namespace

bool has_write_effects(const Node& n) {
  if (writes_an_argument(n)) return true;
  const std::string& t = n.target_name;
  const std::string_view op = std::string_view(t).substr(t.rfind('.') + 1);
  // F.batch_norm, torch.batch_norm and F.instance_norm all take their training flag sixth; the running statistics
  // change unless it is a constant False (conservative for the private variants, which take it elsewhere).
  if (op.find("batch_norm") != std::string_view::npos) {
    const Arg* training = argument(n, 5, "training");
    return !(is_const(training, Py_False) || (!training && op == "batch_norm"));
  }
  if (op.find("instance_norm") != std::string_view::npos) return true;
  if (t == "torch.nn.functional.embedding") {  // F.embedding(input, weight, padding_idx, max_norm, ...)
    const Arg* max_norm = argument(n, 3, "max_norm");
    return max_norm && !is_const(max_norm, Py_None);
  }
  return false;
}

int functional_inplace_position(const Node& n) {
  // torch.nn.functional's activations and dropouts that take `inplace` positionally, by its position.
  static const std::pair<std::string_view, int> kPositions[] = {
      {"relu", 1},        {"relu6", 1},     {"selu", 1},      {"hardswish", 1},     {"hardsigmoid", 1},
      {"silu", 1},        {"mish", 1},      {"elu", 2},       {"celu", 2},          {"leaky_relu", 2},
      {"hardtanh", 3},    {"threshold", 3}, {"rrelu", 4},     {"dropout", 3},       {"alpha_dropout", 3},
      {"dropout1d", 3},   {"dropout2d", 3}, {"dropout3d", 3}, {"feature_alpha_dropout", 3}};
  const std::string& t = n.target_name;
  if (t.rfind("torch.nn.functional.", 0) != 0) return -1;
  const std::string_view op = std::string_view(t).substr(20);
  for (const auto& [name, position] : kPositions)
    if (op == name && static_cast<int>(n.args.size()) > position && n.args[position].kind == Arg::Kind::Const &&
        PyObject_IsTrue(n.args[position].value.get()) == 1)
      return position;
  return -1;
}

std::string dtype_short_name(PyObject* dtype) {
  static const std::pair<const char*, const char*> kNames[] = {
      {"torch.float32", "f32"}, {"torch.float64", "f64"}, {"torch.float16", "f16"},
      {"torch.bfloat16", "bf16"}, {"torch.int64", "i64"}, {"torch.int32", "i32"},
      {"torch.int16", "i16"}, {"torch.int8", "i8"}, {"torch.uint8", "u8"}, {"torch.bool", "b8"},
      {"torch.complex64", "c64"}, {"torch.complex128", "c128"}};
  std::string s = py_str(dtype);
  for (auto& [full, short_name] : kNames)
    if (s == full) return short_name;
  return s;
}

static std::string join_syms(const std::vector<Sym>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + str(v[i]);
  return out;
}

std::string TensorMeta::to_string() const {
  std::string out = fmt::format("{}[{}]", dtype ? dtype_short_name(dtype.get()) : "?",
                                is_dynamic() ? join_syms(sym_sizes) : join_ints(sizes));
  // Strides only when they differ from the contiguous layout, to keep common graphs readable.
  int64_t expected = 1;
  bool contiguous = true;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] != 1 && strides[i] != expected) contiguous = false;
    expected *= sizes[i];
  }
  if (!contiguous)
    out += fmt::format(" stride=({})", is_dynamic() && !sym_strides.empty() ? join_syms(sym_strides) : join_ints(strides));
  if (device) out += " " + py_str(device.get());
  if (requires_grad) out += " requires_grad";
  return out;
}

Arg Arg::of_node(NodeId n) {
  Arg a;
  a.kind = Kind::Node;
  a.node = n;
  return a;
}

Arg Arg::of_const(PyRef v) {
  Arg a;
  a.kind = Kind::Const;
  a.value = std::move(v);
  return a;
}

Arg Arg::of_sym(graph::Sym e, int64_t hint) {
  Arg a;
  a.kind = Kind::Sym;
  a.sym = std::move(e);
  a.value = PyRef::steal(PyLong_FromLongLong(hint));
  return a;
}

NodeId Graph::add(Node node) {
  node.id = static_cast<NodeId>(nodes.size());
  if (node.kind == NodeKind::Input) inputs.push_back(node.id);
  nodes.push_back(std::move(node));
  return nodes.back().id;
}

int Graph::num_calls() const {
  int n = 0;
  for (const Node& node : nodes) n += node.kind == NodeKind::Call;
  return n;
}

std::string Graph::to_string() const {
  std::string out;
  for (size_t i = 0; i < symbols.size(); ++i)
    out += fmt::format("s{} = %{}.size({})\n", i, inputs[symbols[i].input], symbols[i].dim);
  for (const Node& n : nodes) {
    std::string type = n.type == ValueType::Tensor ? n.meta.to_string() : "object";
    if (n.kind == NodeKind::Input) {
      out += fmt::format("%{} = input {}  # {}\n", n.id, n.input_source, type);
      continue;
    }
    std::string args;
    for (const Arg& a : n.args) args += (args.empty() ? "" : ", ") + arg_to_string(a);
    if (n.kwnames) {
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(n.kwnames.get()); ++i)
        args += (args.empty() ? "" : ", ") + py_str(PyTuple_GET_ITEM(n.kwnames.get(), i)) + "=" +
                arg_to_string(n.kwargs[i]);
    }
    out += fmt::format("%{} = {}({})  # {}{}\n", n.id, n.target_name, args, type,
                       n.user_loc.empty() ? "" : "  @ " + n.user_loc);
  }
  out += "return " + arg_to_string(output) + "\n";
  return out;
}

}  // namespace fastcomp::graph
