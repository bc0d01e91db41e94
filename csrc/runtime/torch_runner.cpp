// The reference executor: one vectorcall per node into torch, no Python frame of fastcomp's in between.
#include <fmt/format.h>

#include <vector>

#include "frontend/trace/torch_refs.h"
#include "runtime/arg_values.h"
#include "runtime/executable.h"
#include "support/small_buffer.h"

namespace fastcomp::runtime {
namespace {

class TorchRunner final : public Executable {
 public:
  explicit TorchRunner(graph::Graph g) : graph_(std::move(g)) {
    const size_t n = graph_.nodes.size();
    last_use_.assign(n, -1);
    for (const graph::Node& node : graph_.nodes) {
      if (node.target.get() == frontend::torch_refs().set_grad_enabled.get()) switches_grad_mode_ = true;
      autocast_step_.push_back(node.target_name == "fastcomp._autocast.enter"   ? 1
                               : node.target_name == "fastcomp._autocast.leave" ? -1
                                                                                : 0);
      enters_autocast_ |= autocast_step_.back() != 0;
      for (const auto& a : node.args) mark_uses(a, node.id);
      for (const auto& a : node.kwargs) mark_uses(a, node.id);
      max_args_ = std::max(max_args_, node.args.size() + node.kwargs.size());
    }
    mark_uses(graph_.output, static_cast<int>(n));  // outputs live to the end
    frees_after_.assign(n, {});
    for (int i = 0; i < static_cast<int>(n); ++i)
      if (last_use_[i] >= 0 && last_use_[i] < static_cast<int>(n)) frees_after_[last_use_[i]].push_back(i);
  }

  PyObject* run(PyObject* const* inputs, size_t ninputs) override {
    // Scratch on the stack for graphs up to these sizes, so that a call allocates nothing of its own.
    SmallBuffer<PyObject*, 32> values(graph_.nodes.size());  // owned
    struct Cleanup {
      SmallBuffer<PyObject*, 32>& v;
      ~Cleanup() {
        for (PyObject* o : v) Py_XDECREF(o);
      }
    } cleanup{values};
    for (size_t i = 0; i < ninputs; ++i) values[graph_.inputs[i]] = Py_NewRef(inputs[i]);
    std::vector<int64_t> symbols;  // dynamic shapes: this call's sizes, for the arguments computed from them
    if (graph_.is_dynamic() && !read_symbols(graph_.symbols, inputs, &symbols)) return nullptr;
    bool grad_mode_at_entry = switches_grad_mode_ && frontend::torch_refs().grad_enabled();

    SmallBuffer<PyObject*, 16> argv(max_args_ + 1);  // [0] is the PY_VECTORCALL_ARGUMENTS_OFFSET slot
    std::vector<PyRef> temps;                         // composite arguments, rare
    for (size_t at = 0; at < graph_.nodes.size(); ++at) {
      const graph::Node& node = graph_.nodes[at];
      if (node.kind != graph::NodeKind::Call) continue;
      PyObject* out = call_node(node, values.data(), argv.data(), temps, &symbols);
      if (!out) return fail(grad_mode_at_entry, at, values.data(), argv.data(), &symbols);
      values[node.id] = out;
      for (int dead : frees_after_[node.id]) Py_CLEAR(values[dead]);
    }
    PyObject* result = new_arg(graph_.output, values.data(), &symbols);
    if (!result) return fail(grad_mode_at_entry, graph_.nodes.size(), values.data(), argv.data(), &symbols);
    return result;
  }

  std::string describe() const override {
    return fmt::format("torch runner: {} ops{}", graph_.num_calls(),
                       graph_.is_dynamic() ? fmt::format(", {} dynamic sizes", graph_.symbols.size()) : "");
  }

 private:
  void mark_uses(const graph::Arg& a, int user) {
    if (a.kind == graph::Arg::Kind::Node) last_use_[a.node] = std::max(last_use_[a.node], user);
    for (const auto& item : a.items) mark_uses(item, user);
  }

  // One call of `node`; null with the error set when an argument or the call failed.
  PyObject* call_node(const graph::Node& node, PyObject* const* values, PyObject** argv, std::vector<PyRef>& temps,
                      const std::vector<int64_t>* symbols) {
    temps.clear();
    size_t argc = 0;
    for (const auto& a : node.args) argv[++argc] = borrow_arg(a, values, temps, symbols);
    for (const auto& a : node.kwargs) argv[++argc] = borrow_arg(a, values, temps, symbols);
    for (size_t i = 1; i <= argc; ++i)
      if (!argv[i]) return nullptr;
    return PyObject_Vectorcall(node.target.get(), argv + 1, node.args.size() | PY_VECTORCALL_ARGUMENTS_OFFSET,
                               node.kwnames.get());
  }

  // Node `failed` raised (or the outputs could not be built, `failed` past the last node): leaves grad mode as the
  // caller had it when that was half-way through a no_grad block, and leaves the autocast blocks still open, innermost
  // first, by their leave nodes further on (as their __exit__ does for an exception passing through them).
  PyObject* fail(bool grad_mode_at_entry, size_t failed, PyObject* const* values, PyObject** argv,
                 const std::vector<int64_t>* symbols) {
    if (!switches_grad_mode_ && !enters_autocast_) return nullptr;
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    if (enters_autocast_) {
      int open = 0;
      for (size_t i = 0; i < failed && i < autocast_step_.size(); ++i) open += autocast_step_[i];
      std::vector<PyRef> temps;
      for (size_t i = failed + 1, inner = 0; open > 0 && i < graph_.nodes.size(); ++i) {
        if (autocast_step_[i] > 0) ++inner;
        if (autocast_step_[i] >= 0) continue;
        if (inner > 0) {
          --inner;  // the leave of a block entered after the failure
          continue;
        }
        PyRef left = PyRef::steal(call_node(graph_.nodes[i], values, argv, temps, symbols));
        if (!left) PyErr_Clear();
        --open;
      }
    }
    if (switches_grad_mode_) {
      PyRef r = PyRef::steal(PyObject_CallOneArg(frontend::torch_refs().set_grad_enabled.get(),
                                                 grad_mode_at_entry ? Py_True : Py_False));
      if (!r) PyErr_Clear();
    }
    PyErr_Restore(t, v, tb);
    return nullptr;
  }

  graph::Graph graph_;
  std::vector<int> last_use_;
  std::vector<std::vector<int>> frees_after_;
  bool switches_grad_mode_ = false;
  std::vector<int8_t> autocast_step_;  // per node: 1 enters an autocast block, -1 leaves one
  bool enters_autocast_ = false;
  size_t max_args_ = 0;  // positional and keyword arguments of the widest call
};

}  // namespace

std::unique_ptr<Executable> make_torch_runner(graph::Graph graph) { return std::make_unique<TorchRunner>(std::move(graph)); }

}  // namespace fastcomp::runtime
