// The graph IR: an ordered list of calls into torch (or Python) on tensor and constant arguments, with the
// metadata of every tensor value. Stage-2 output of the tracer; input of the runners and the CUDA backend.
#pragma once
#include <Python.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cpython/pyref.h"
#include "graph/sym.h"

namespace fastcomp::graph {

using NodeId = int32_t;

// Everything a tensor's guards and the backend need to know about a value, read from a real or meta tensor.
struct TensorMeta {
  PyRef dtype;   // torch.dtype
  PyRef device;  // torch.device of the real tensor (meta tensors stand in for it at trace time)
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t storage_offset = 0;
  bool requires_grad = false;
  // Dynamic shapes: sizes and strides as expressions over the graph's symbols (`sizes`/`strides` then hold their
  // values at trace time). Empty when every size is static.
  std::vector<Sym> sym_sizes;
  std::vector<Sym> sym_strides;

  bool is_dynamic() const { return !sym_sizes.empty(); }
  std::string to_string() const;  // "f32[8, 16] cpu", "f32[s0, 16] cpu" (strides shown when not contiguous)
};

// A node argument: a tree of node references and constants.
struct Arg {
  // Slice: items are start, stop and step (a slice with a symbolic bound, `x[:, :s0]`).
  enum class Kind : uint8_t { Node, Const, Tuple, List, Dict, Sym, Slice };
  Kind kind = Kind::Const;
  NodeId node = -1;          // Kind::Node
  PyRef value;               // Kind::Const; Kind::Sym: its value at trace time
  graph::Sym sym;            // Kind::Sym: a Python int computed from sizes, evaluated on every call
  std::vector<Arg> items;    // Tuple, List, Dict values; Slice start, stop, step
  std::vector<PyRef> keys;   // Dict keys (constants)

  static Arg of_node(NodeId n);
  static Arg of_const(PyRef v);
  static Arg of_sym(graph::Sym e, int64_t hint);
  bool is_flat() const { return kind == Kind::Node || kind == Kind::Const || kind == Kind::Sym; }
};

enum class NodeKind : uint8_t {
  Input,  // a graph input, in order of Graph::inputs
  Call,   // target(*args, **kwargs)
};

// What a node produces, as far as the tracer knows.
enum class ValueType : uint8_t { Tensor, Other };

struct Node {
  NodeId id = -1;
  NodeKind kind = NodeKind::Call;
  std::string target_name;  // "torch.add", "Tensor.view", "operator.iadd", "torch.nn.functional.linear"
  PyRef target;             // the Python callable
  std::vector<Arg> args;    // positional
  std::vector<Arg> kwargs;  // values of keyword arguments, names in `kwnames`
  PyRef kwnames;            // tuple of str or null
  ValueType type = ValueType::Other;
  TensorMeta meta;          // when type == Tensor
  std::string input_source; // Input: guard source name, e.g. "L['x']"
  std::string user_loc;     // Call: "file.py:12" of the user line that made it
  // Call: builds a Python object of the graph's output (a list returned twice, an object made in the trace) rather
  // than computing anything; not an op of the graph (explain() and op counts leave it out).
  bool rebuilds = false;
};

// Where a symbol's value comes from on each call: a size of one of the graph's inputs.
struct SymBinding {
  int input = -1;  // position in Graph::inputs
  int dim = -1;
};

struct Graph {
  std::vector<Node> nodes;
  std::vector<NodeId> inputs;  // Input nodes, in the order the guard program collects them
  Arg output;
  std::vector<SymBinding> symbols;  // symbol i is symbols[i]; empty for static graphs
  // Grad mode when the graph starts (torch._C._set_grad_enabled nodes switch it): under no_grad throughout, a view
  // of a parameter still requires grad, yet nothing in the graph records gradients.
  bool grad_enabled_at_start = true;
  // Autocast is on when the graph starts, or a block of it (fastcomp._autocast.enter/leave nodes) is in the graph:
  // its ops' dtypes are autocast's, which only torch's dispatch applies.
  bool under_autocast = false;
  std::string autocast_kept_because;  // why the trace kept autocast (an op, where, and what autocast does in it)
  // Traced under autocast with its casts explicit (Tensor.to nodes): the graph runs with autocast suspended, so that
  // its torch calls are not cast again.
  bool suspends_autocast = false;

  bool is_dynamic() const { return !symbols.empty(); }

  NodeId add(Node node);
  std::string to_string() const;  // stable text form for logs and golden tests
  int num_calls() const;
};

// Whether the call writes into one of its arguments (in-place ops `add_`, `operator.iadd`, `setitem`, `out=`,
// `F.relu(x, inplace=True)`), judged by its target's name and those arguments.
bool writes_an_argument(const Node& n);
// Whether running the call changes anything but its output: it writes an argument in place (writes_an_argument),
// or tensors it takes only to update them: a batch or instance norm's running statistics (unless it is given
// training=False), an embedding's weight renormalised under max_norm. Such a graph cannot run twice.
bool has_write_effects(const Node& n);
// The position of a torch.nn.functional op's `inplace=True` given positionally (F.relu(x, True)); -1 otherwise.
int functional_inplace_position(const Node& n);

// Short readable form of a dtype: torch.float32 -> "f32".
std::string dtype_short_name(PyObject* dtype);

}  // namespace fastcomp::graph
