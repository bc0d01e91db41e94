// Capture goes through torch.cuda.graph (so torch's allocator serves the graph's memory from a private pool and
// torch's random generators are registered); replay goes through cuGraphLaunch when the graph holds only
// fastcomp's own work, else torch's replay(). See the header for the input and output policy.
#include "runtime/cuda_graph_executable.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "cpython/gil_once.h"
#include "frontend/trace/torch_refs.h"
#include "runtime/arg_values.h"
#include "runtime/cuda/events.h"
#include "runtime/cuda/module.h"
#include "runtime/torch_shim.h"
#include "support/small_buffer.h"
#include "support/log.h"
#include "support/pystr.h"

namespace fastcomp::runtime {
namespace {

namespace cuda = runtime::cuda;

constexpr size_t kMaxInstances = 2;  // outputs alternate between two captures while the last ones are held
constexpr int kMaxCaptures = 8;      // more means inputs keep moving in ways a recapture does not settle
// compare_matmul_picks: best of 3 rounds of 5 replays each way; the favourites stay only if 1% faster.
constexpr int kCompareRounds = 3;
constexpr int kCompareReplays = 5;
constexpr double kCompareMinGain = 0.01;
// A replay saves the host time of the launches it replaces (~2 µs each) at the price of one graph launch. A moved
// input's copy costs a launch plus ~2 bytes of traffic per byte (~3 TB/s on an H100/H200: ~0.7 µs per MiB): this
// many bytes cost about one launch. Calls whose copies cost more than the replay saves run the executable.
constexpr size_t kCopyBytesPerLaunch = 2 << 20;

// torch's CUDA entry points used here, looked up once (the GIL must be held).
struct TorchCuda {
  PyRef current_stream;     // torch._C._cuda_getCurrentRawStream(device) -> int
  PyRef storage_use_count;  // torch._C._storage_Use_Count(storage._cdata) -> int
  PyRef graph_type;         // torch.cuda.CUDAGraph
  PyRef graph_context;      // torch.cuda.graph (the capture context manager)
  PyRef graph_pool_handle;  // torch.cuda.graph_pool_handle
  PyRef memory_reserved;    // torch.cuda.memory_reserved
  // What storage_use_count(t) says of a tensor that nobody else refers to or views (measured, since torch's
  // count includes references of its own that vary between versions).
  long long sole_tensor_storage_refs = 0;
};

long long storage_refs(PyObject* storage_use_count, PyObject* tensor) {  // -1 with a Python error set
  PyRef storage = PyRef::steal(PyObject_CallMethod(tensor, "untyped_storage", nullptr));
  PyRef key = storage ? PyRef::steal(PyObject_GetAttrString(storage.get(), "_cdata")) : PyRef();
  PyRef count = key ? PyRef::steal(PyObject_CallOneArg(storage_use_count, key.get())) : PyRef();
  return count ? PyLong_AsLongLong(count.get()) : -1;
}

const TorchCuda& torch_cuda() {
  static cpython::GilOnce<const TorchCuda> refs;
  return *refs.get([] {
    auto r = std::make_unique<TorchCuda>();
    PyObject* torch = frontend::torch_refs().torch.get();
    PyRef c = PyRef::steal(PyObject_GetAttrString(torch, "_C"));
    PyRef cuda_module = PyRef::steal(PyImport_ImportModule("torch.cuda"));
    if (!c || !cuda_module) throw std::runtime_error("fastcomp: cannot import torch.cuda: " + take_error_message());
    auto get = [](PyObject* owner, const char* name) {
      PyRef v = PyRef::steal(PyObject_GetAttrString(owner, name));
      if (!v) throw std::runtime_error(fmt::format("fastcomp: this torch has no {} ({})", name, take_error_message()));
      return v;
    };
    r->current_stream = get(c.get(), "_cuda_getCurrentRawStream");
    r->storage_use_count = get(c.get(), "_storage_Use_Count");
    r->graph_type = get(cuda_module.get(), "CUDAGraph");
    r->graph_context = get(cuda_module.get(), "graph");
    r->graph_pool_handle = get(cuda_module.get(), "graph_pool_handle");
    r->memory_reserved = get(cuda_module.get(), "memory_reserved");
    PyRef probe = PyRef::steal(PyObject_CallMethod(torch, "empty", "i", 1));
    r->sole_tensor_storage_refs = probe ? storage_refs(r->storage_use_count.get(), probe.get()) : -1;
    if (r->sole_tensor_storage_refs < 0) throw std::runtime_error("fastcomp: " + take_error_message());
    return r.release();
  });
}

// Bytes from an input's first element to one past its last, for its sizes and strides (elements).
size_t span_bytes(const graph::TensorMeta& meta) {
  PyRef itemsize = PyRef::steal(PyObject_GetAttrString(meta.dtype.get(), "itemsize"));
  const long long item = itemsize ? PyLong_AsLongLong(itemsize.get()) : 0;
  PyErr_Clear();
  long long last = 0;
  for (size_t d = 0; d < meta.sizes.size(); ++d) {
    if (meta.sizes[d] == 0) return 0;
    last += (meta.sizes[d] - 1) * meta.strides[d];
  }
  return static_cast<size_t>((last + 1) * item);
}

bool overlaps(const char* a, size_t a_bytes, const char* b, size_t b_bytes) {
  return a_bytes && b_bytes && a < b + b_bytes && b < a + a_bytes;
}

// Where a replay reads one input.
struct Home {
  PyRef tensor;  // the tensor that owns the memory: the user's (read in place) or one fastcomp allocated
  char* address = nullptr;
  size_t bytes = 0;
  bool own = false;  // fastcomp allocated it and never hands it out
};

// A tensor a replay writes, and how to tell whether anyone but fastcomp still holds it.
struct HeldOutput {
  PyObject* tensor = nullptr;  // borrowed from Instance::values
  Py_ssize_t refs = 0;         // its reference count while only fastcomp holds it
  PyRef storage_key;           // its storage's _cdata, for torch._C._storage_Use_Count
  long long storage_refs = 0;  // the storage's use count while only fastcomp holds it
};

// An output that is a view of an input (x.t(), x[1:]): a replay cannot write it, since it must view the caller's
// tensor rather than the input's home; each call makes it again, from that call's input.
struct InputView {
  graph::NodeId node = -1;
  size_t input = 0;
  long long offset = 0;  // elements from the input's first element to the view's
  PyRef sizes, strides;  // tuples
};

// One capture: the CUDA graph, the memory its inputs are read from and the outputs it writes.
struct Instance {
  PyRef graph;                       // torch.cuda.CUDAGraph
  cuda::CUgraphExec exec = nullptr;  // its cudaGraphExec_t, when replays launch it directly
  std::vector<Home> homes;           // per graph input
  std::vector<PyObject*> values;     // per graph node: the objects of output nodes (owned), null elsewhere
  std::vector<HeldOutput> outputs;
  std::vector<InputView> input_views;  // outputs that are views of inputs: made again from each call's inputs
  double pool_mib = 0;

  Instance() = default;
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;
  ~Instance() {
    for (PyObject* v : values) Py_XDECREF(v);
  }
};

// Pairs the objects of `out` (built by an executable from `arg`) with the graph nodes they came from.
bool collect_outputs(const graph::Arg& arg, PyObject* out, std::vector<PyObject*>& values) {
  switch (arg.kind) {
    case graph::Arg::Kind::Node:
      if (!values[arg.node]) values[arg.node] = Py_NewRef(out);
      return true;
    case graph::Arg::Kind::Const:
    case graph::Arg::Kind::Slice: return true;
    case graph::Arg::Kind::Tuple:
    case graph::Arg::Kind::List: {
      PyRef seq = PyRef::steal(PySequence_Fast(out, "graph output"));
      if (!seq || PySequence_Fast_GET_SIZE(seq.get()) != Py_ssize_t(arg.items.size())) return false;
      for (size_t i = 0; i < arg.items.size(); ++i)
        if (!collect_outputs(arg.items[i], PySequence_Fast_GET_ITEM(seq.get(), i), values)) return false;
      return true;
    }
    case graph::Arg::Kind::Dict:
      for (size_t i = 0; i < arg.items.size(); ++i) {
        PyObject* v = PyDict_Check(out) ? PyDict_GetItemWithError(out, arg.keys[i].get()) : nullptr;
        if (!v || !collect_outputs(arg.items[i], v, values)) return false;
      }
      return true;
  }
  return false;
}

class CudaGraphExecutable final : public Executable {
 public:
  CudaGraphExecutable(std::unique_ptr<Executable> inner, const graph::Graph& graph, CudaGraphOptions options)
      : inner_(std::move(inner)), options_(std::move(options)), output_(graph.output), num_nodes_(graph.nodes.size()) {
    for (graph::NodeId id : graph.inputs) {
      const graph::Node& n = graph.nodes[id];
      input_nodes_.push_back(id);
      input_metas_.push_back(n.meta);
      input_sources_.push_back(n.input_source);
      if (n.type != graph::ValueType::Tensor) off_ = fmt::format("input {} is not a tensor", n.input_source);
    }
    own_home_.assign(input_nodes_.size(), false);
    output_labels_.resize(graph.nodes.size());
    for (const graph::Node& n : graph.nodes) {
      output_labels_[n.id] = fmt::format("%{} = {}{}", n.id, n.kind == graph::NodeKind::Input ? "input " : "",
                                         n.kind == graph::NodeKind::Input ? n.input_source : n.target_name);
      if (!n.user_loc.empty()) output_labels_[n.id] += " @ " + n.user_loc;
      if (n.kind == graph::NodeKind::Call && graph::has_write_effects(n)) writes_inputs_ = true;
      // A CPU tensor's values are read on the host (a CPU scalar beside CUDA tensors becomes a kernel argument):
      // a replay would repeat the values of the capture.
      if (off_.empty() && n.type == graph::ValueType::Tensor && n.meta.device &&
          py_str(n.meta.device.get()).rfind("cuda", 0) != 0)
        off_ = fmt::format("%{} is a tensor on {}", n.id, py_str(n.meta.device.get()));
    }
    if (!off_.empty()) FC_LOG(cudagraphs, info, "cudagraphs: {} runs without a CUDA graph: {}", options_.label, off_);
  }

  PyObject* run(PyObject* const* inputs, size_t ninputs) override {
    if (!off_.empty() || inner_->compiling()) return inner_->run(inputs, ninputs);
    if (!warmed_up_) {  // the first call with the final executable loads kernels and plans cuBLASLt: not capturable
      warmed_up_ = true;
      return inner_->run(inputs, ninputs);
    }
    try {
      // This call's input addresses, read once: whether an input moved, and whether copying it home would cost
      // more than the replay saves, is decided before asking torch anything (who holds the old memory, which
      // stream is current), so that calls which run the executable directly (W1: one kernel, a moving input)
      // pay no more than the default mode does.
      SmallBuffer<char*, 8> addresses(ninputs);
      for (size_t i = 0; i < ninputs; ++i)
        if (!(addresses[i] = tensor_data_ptr(inputs[i])) && PyErr_Occurred()) return nullptr;
      cuda::CUstream stream = nullptr;
      bool have_stream = false, too_costly = false, settled_elsewhere = false;
      // The same addresses as the last call's: the caller has settled on these inputs (refills them with copy_()),
      // so an instance reading elsewhere is stale even when copying into it would cost too much.
      const bool settled = std::equal(addresses.data(), addresses.data() + ninputs, last_addresses_.begin(),
                                      last_addresses_.end());
      last_addresses_.assign(addresses.data(), addresses.data() + ninputs);
      size_t stale = instances_.size();  // an instance whose outputs are free but whose inputs cannot be placed
      for (size_t i = 0; i < instances_.size(); ++i) {
        Instance& inst = *instances_[i];
        const Moved moved = moved_inputs(inst, addresses.data());
        if (moved.too_costly) {
          if (settled) stale = i, settled_elsewhere = true;
          else too_costly = true;
          continue;
        }
        const int free = outputs_free(inst);
        if (free < 0) return nullptr;
        if (!free) continue;
        if (!have_stream && !(have_stream = current_stream(&stream))) return nullptr;
        const int placed = moved.count ? place_inputs(inst, addresses.data(), stream) : 1;
        if (placed < 0) return nullptr;
        if (placed) return replay(inst, inputs, stream);
        stale = i;
      }
      if (too_costly && stale == instances_.size()) {
        log_copies_too_costly();
        return inner_->run(inputs, ninputs);
      }
      if (!have_stream && !current_stream(&stream)) return nullptr;
      if (captures_ >= kMaxCaptures) {
        turn_off(fmt::format("captured {} times and the inputs still move; the last input that could not be "
                             "placed was {}", captures_, last_moved_));
        return inner_->run(inputs, ninputs);
      }
      // Settled inputs are read where they are, even those that once had to move into buffers of fastcomp's own.
      if (settled_elsewhere) std::fill(own_home_.begin(), own_home_.end(), false);
      if (stale < instances_.size()) {
        instances_.erase(instances_.begin() + stale);
      } else if (instances_.size() >= kMaxInstances) {
        if (!held_logged_) {
          held_logged_ = true;
          FC_LOG(cudagraphs, info, "cudagraphs: {}: the outputs of its last {} replays are still held, so this "
                 "call runs without the CUDA graph (fresh outputs); drop old outputs to keep replaying",
                 options_.label, kMaxInstances);
        }
        return inner_->run(inputs, ninputs);
      }
      return capture_and_replay(inputs, ninputs, stream);
    } catch (const std::exception& e) {
      PyErr_SetString(PyExc_RuntimeError, fmt::format("fastcomp: CUDA graph replay failed: {}", e.what()).c_str());
      return nullptr;
    }
  }

  std::string describe() const override {
    std::string state;
    if (!off_.empty()) state = "off (" + off_ + ")";
    else if (instances_.empty()) state = "captured after one warm-up call";
    else {
      double mib = 0;
      for (const auto& inst : instances_) mib += inst->pool_mib;
      state = fmt::format("captured {}x, pool {:.1f} MiB", instances_.size(), mib);
    }
    return inner_->describe() + "; CUDA graph: " + state;
  }

  bool compiling() const override { return inner_->compiling(); }

 private:
  bool current_stream(cuda::CUstream* stream) const {
    PyRef s = PyRef::steal(PyObject_CallOneArg(torch_cuda().current_stream.get(), device_index_.get()));
    if (!s) return false;
    *stream = reinterpret_cast<cuda::CUstream>(PyLong_AsVoidPtr(s.get()));
    return true;
  }

  // 1 when no one but fastcomp holds the instance's outputs (they may be overwritten), 0 when someone does,
  // -1 with a Python error set.
  int outputs_free(const Instance& inst) const {
    for (const HeldOutput& o : inst.outputs) {
      if (Py_REFCNT(o.tensor) > o.refs) return 0;
      PyRef count = PyRef::steal(PyObject_CallOneArg(torch_cuda().storage_use_count.get(), o.storage_key.get()));
      if (!count) return -1;
      if (PyLong_AsLongLong(count.get()) > o.storage_refs) return 0;
    }
    return 1;
  }

  // Whether only fastcomp holds the memory of `home` (so a call's input may be copied into it).
  int home_free(const Home& home) const {
    if (home.own) return 1;
    if (Py_REFCNT(home.tensor.get()) > 1) return 0;
    const long long refs = storage_refs(torch_cuda().storage_use_count.get(), home.tensor.get());
    if (refs < 0) return -1;
    return refs <= torch_cuda().sole_tensor_storage_refs ? 1 : 0;
  }

  struct Moved {
    size_t count = 0;         // inputs not at the instance's homes
    bool too_costly = false;  // copying them home costs more than the replay saves
  };

  Moved moved_inputs(const Instance& inst, char* const* addresses) const {
    Moved moved;
    size_t bytes = 0;
    for (size_t i = 0; i < inst.homes.size(); ++i) {
      const Home& home = inst.homes[i];
      if (addresses[i] == home.address || home.bytes == 0) continue;
      ++moved.count;
      bytes += home.bytes;
    }
    // Each copy is a launch of its own, and moves bytes: worth it only while the replay still saves launches.
    const double copy_cost = moved.count + double(bytes) / kCopyBytesPerLaunch;
    moved.too_costly = moved.count && 1 + copy_cost >= options_.launches;
    return moved;
  }

  void log_copies_too_costly() {
    if (copy_logged_) return;
    copy_logged_ = true;
    FC_LOG(cudagraphs, info, "cudagraphs: {}: its inputs moved, and copying them costs more than a replay of its {} "
           "launches saves; such calls run without the CUDA graph (pass the same input tensors, e.g. refilled with "
           "copy_(), to replay)", options_.label, options_.launches);
  }

  // Copies this call's moved inputs home (queued on `stream`): 1 done, 0 an input cannot be placed (the instance
  // must be captured again), -1 with a Python error set.
  int place_inputs(Instance& inst, char* const* addresses, cuda::CUstream stream) {
    for (size_t i = 0; i < inst.homes.size(); ++i) {
      const Home& home = inst.homes[i];
      if (addresses[i] == home.address || home.bytes == 0) continue;
      const int free = writes_inputs_ ? 0 : home_free(home);
      if (free < 0) return -1;
      if (!free) {
        if (!writes_inputs_) own_home_[i] = true;
        last_moved_ = "input " + std::to_string(i);
        return 0;
      }
    }
    cuda::ContextGuard guard(options_.device);
    for (size_t i = 0; i < inst.homes.size(); ++i) {
      const Home& home = inst.homes[i];
      if (addresses[i] != home.address && home.bytes) cuda::copy_async(home.address, addresses[i], home.bytes, stream);
    }
    return 1;
  }

  PyObject* replay(Instance& inst, PyObject* const* inputs, cuda::CUstream stream) {
    if (!launch(inst, stream)) return nullptr;
    SmallBuffer<PyRef, 4> views(inst.input_views.size());
    for (size_t v = 0; v < inst.input_views.size(); ++v) {
      const InputView& view = inst.input_views[v];
      PyObject* input = inputs[view.input];
      PyRef base = PyRef::steal(PyObject_CallMethod(input, "storage_offset", nullptr));
      PyRef offset = base ? PyRef::steal(PyLong_FromLongLong(PyLong_AsLongLong(base.get()) + view.offset)) : PyRef();
      views[v] = offset ? PyRef::steal(PyObject_CallMethod(input, "as_strided", "OOO", view.sizes.get(),
                                                           view.strides.get(), offset.get()))
                        : PyRef();
      if (!views[v]) return nullptr;
    }
    for (size_t i = 0; i < input_nodes_.size(); ++i) inst.values[input_nodes_[i]] = inputs[i];
    for (size_t v = 0; v < inst.input_views.size(); ++v) inst.values[inst.input_views[v].node] = views[v].get();
    PyObject* result = new_arg(output_, inst.values);
    for (graph::NodeId id : input_nodes_) inst.values[id] = nullptr;
    for (const InputView& view : inst.input_views) inst.values[view.node] = nullptr;
    return result;
  }

  double reserved_mib() const {
    PyRef device = PyRef::steal(PyLong_FromLong(options_.device));
    PyRef v = PyRef::steal(PyObject_CallOneArg(torch_cuda().memory_reserved.get(), device.get()));
    const double bytes = v ? PyLong_AsDouble(v.get()) : 0;
    PyErr_Clear();
    return bytes / (1 << 20);
  }

  // Homes for this call's inputs: in place, unless an input moved before (own_home_) or overlaps another one.
  bool choose_homes(Instance& inst, PyObject* const* inputs, cuda::CUstream stream) {
    const auto& T = frontend::torch_refs();
    for (size_t i = 0; i < input_nodes_.size(); ++i) {
      const graph::TensorMeta& meta = input_metas_[i];
      Home home;
      home.bytes = span_bytes(meta);
      char* p = tensor_data_ptr(inputs[i]);
      if (!p && PyErr_Occurred()) return false;
      bool own = own_home_[i];
      for (const Home& other : inst.homes) own = own || overlaps(p, home.bytes, other.address, other.bytes);
      if (!own) {
        home.tensor = PyRef::borrow(inputs[i]);
        home.address = p;
      } else {
        PyRef sizes = PyRef::steal(PyTuple_New(meta.sizes.size()));
        PyRef strides = PyRef::steal(PyTuple_New(meta.strides.size()));
        for (size_t d = 0; d < meta.sizes.size(); ++d) {
          PyTuple_SET_ITEM(sizes.get(), d, PyLong_FromLongLong(meta.sizes[d]));
          PyTuple_SET_ITEM(strides.get(), d, PyLong_FromLongLong(meta.strides[d]));
        }
        PyRef device = PyRef::steal(PyObject_GetAttrString(inputs[i], "device"));
        PyRef kwargs = PyRef::steal(Py_BuildValue("{sOsO}", "dtype", meta.dtype.get(), "device", device.get()));
        PyRef args = PyRef::steal(PyTuple_Pack(2, sizes.get(), strides.get()));
        home.tensor = PyRef::steal(PyObject_Call(T.empty_strided.get(), args.get(), kwargs.get()));
        home.own = true;
        if (!home.tensor || !(home.address = tensor_data_ptr(home.tensor.get()))) return false;
        cuda::ContextGuard guard(options_.device);
        if (home.bytes) cuda::copy_async(home.address, p, home.bytes, stream);
      }
      inst.homes.push_back(std::move(home));
    }
    return true;
  }

  // Records the inner executable into a new instance; runs the call on it. On a capture failure the CUDA graph is
  // turned off and the call runs through the inner executable.
  PyObject* capture_and_replay(PyObject* const* inputs, size_t ninputs, cuda::CUstream stream) {
    const TorchCuda& tc = torch_cuda();
    auto inst = std::make_unique<Instance>();
    inst->values.assign(num_nodes_, nullptr);
    if (!choose_homes(*inst, inputs, stream)) return nullptr;
    std::vector<PyObject*> home_objects;
    for (const Home& h : inst->homes) home_objects.push_back(h.tensor.get());

    inst->graph = PyRef::steal(PyObject_CallNoArgs(tc.graph_type.get()));
    PyRef pool = inst->graph ? PyRef::steal(PyObject_CallNoArgs(tc.graph_pool_handle.get())) : PyRef();
    PyRef kwargs = PyRef::steal(Py_BuildValue("{sOss}", "pool", pool ? pool.get() : Py_None, "capture_error_mode",
                                              "thread_local"));
    PyRef args = inst->graph ? PyRef::steal(PyTuple_Pack(1, inst->graph.get())) : PyRef();
    PyRef context = args && pool ? PyRef::steal(PyObject_Call(tc.graph_context.get(), args.get(), kwargs.get())) : PyRef();
    PyRef entered = context ? PyRef::steal(PyObject_CallMethod(context.get(), "__enter__", nullptr)) : PyRef();
    if (!entered) return give_up("torch.cuda.graph could not start a capture: " + take_error_message(), inputs, ninputs);
    const double reserved_before = reserved_mib();  // after torch.cuda.graph emptied the allocator's cache

    PyRef out = PyRef::steal(inner_->run(home_objects.data(), home_objects.size()));
    PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
    PyErr_Fetch(&type, &value, &traceback);
    std::string failure;
    if (!out) {
      PyErr_NormalizeException(&type, &value, &traceback);
      failure = value ? py_str(value) : "unknown error";
    }
    PyRef exited = PyRef::steal(PyObject_CallMethod(context.get(), "__exit__", "OOO", type ? type : Py_None,
                                                    value ? value : Py_None, traceback ? traceback : Py_None));
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    if (!exited && failure.empty()) failure = take_error_message();
    PyErr_Clear();
    if (!failure.empty())
      return give_up("capture failed, an op in the graph cannot be recorded (" + failure + ")", inputs, ninputs);

    if (!collect_outputs(output_, out.get(), inst->values))
      return give_up("its output does not have the structure the graph declares", inputs, ninputs);
    out = PyRef();
    for (graph::NodeId id : input_nodes_) Py_CLEAR(inst->values[id]);  // a replay returns the caller's input itself
    std::string alias = take_input_views(*inst);
    if (!alias.empty()) return give_up(alias, inputs, ninputs);
    if (options_.launch_directly) {
      PyRef exec = PyRef::steal(PyObject_CallMethod(inst->graph.get(), "raw_cuda_graph_exec", nullptr));
      if (exec) inst->exec = reinterpret_cast<cuda::CUgraphExec>(PyLong_AsVoidPtr(exec.get()));
      PyErr_Clear();  // torch < 2.5 has no raw_cuda_graph_exec(): replay through torch
    }
    if (!watch_outputs(*inst)) return nullptr;
    inst->pool_mib = reserved_mib() - reserved_before;
    ++captures_;
    FC_LOG(cudagraphs, info, "cudagraphs: captured {} (capture {}, pool {:.1f} MiB, replays {})", options_.label,
           captures_, inst->pool_mib, inst->exec ? "through cuGraphLaunch" : "through torch.cuda.CUDAGraph.replay");
    instances_.push_back(std::move(inst));
    if (!picks_compared_) {
      picks_compared_ = true;
      // Replaying more than once is harmless only when the graph writes no input and draws no random numbers
      // (torch ops, which a direct launch rules out).
      if (options_.launch_directly && !writes_inputs_)
        if (const int picks = inner_->tuned_matmul_picks(); picks > 0)
          return compare_matmul_picks(picks, inputs, ninputs, stream);
    }
    return replay(*instances_.back(), inputs, stream);
  }

  // The graph's tuned cuBLASLt picks against the heuristic's favourites, inside the model: a pick timed alone can
  // run slower between the model's other kernels (W7 on an H200: 203.1 µs/call tuned, 197.3 with the
  // favourites). The instance just captured (tuned) and one captured with the favourites replay in turn on this
  // call's inputs; the faster stays, and the inner executable keeps its picks for later captures (a tie keeps the
  // tuned ones). Once per executable, at its first capture: kCompareRounds x kCompareReplays replays of each.
  // `picks`: how many products have tuned picks (for the log line).
  PyObject* compare_matmul_picks(int picks, PyObject* const* inputs, size_t ninputs, cuda::CUstream stream) {
    inner_->prefer_heuristic_matmul_picks(true);
    PyRef favourites_out = PyRef::steal(capture_and_replay(inputs, ninputs, stream));
    if (!favourites_out || instances_.size() != 2) {  // the capture failed (and turned the graph off), or errored
      inner_->prefer_heuristic_matmul_picks(false);
      return favourites_out.release();
    }
    favourites_out = PyRef();
    double best[2] = {-1, -1};  // µs a replay: [0] tuned picks, [1] the heuristic's favourites
    try {
      cuda::ContextGuard guard(options_.device);
      cuda::EventPair events;
      for (int round = 0; round < kCompareRounds; ++round)
        for (int i = 0; i < 2; ++i) {
          FC_CU_CHECK(cuEventRecord(events.start, stream));
          for (int r = 0; r < kCompareReplays; ++r)
            if (!launch(*instances_[i], stream)) {  // torch's replay() raised: keep the tuned picks, report it
              inner_->prefer_heuristic_matmul_picks(false);
              instances_.pop_back();
              return nullptr;
            }
          FC_CU_CHECK(cuEventRecord(events.stop, stream));
          const double us = events.elapsed_ms() * 1e3 / kCompareReplays;
          if (best[i] < 0 || us < best[i]) best[i] = us;
        }
    } catch (const std::exception& e) {  // an event call failed: keep the tuned picks
      best[0] = best[1] = -1;
      FC_LOG(cudagraphs, info, "cudagraphs: {}: could not time its replays ({}); keeping cuBLASLt's tuned picks",
             options_.label, e.what());
    }
    const bool favourites = best[0] > 0 && best[1] > 0 && best[1] < best[0] * (1 - kCompareMinGain);
    if (best[0] > 0)
      FC_LOG(cudagraphs, info, "cudagraphs: {}: {} cuBLASLt products with tuned picks: {:.1f} us a replay with them, "
             "{:.1f} with the heuristic's favourites; keeping the {}", options_.label, picks, best[0], best[1],
             favourites ? "favourites" : "tuned picks");
    inner_->prefer_heuristic_matmul_picks(favourites);
    instances_.erase(instances_.begin() + (favourites ? 0 : 1));
    return replay(*instances_.front(), inputs, stream);
  }

  // Queues one replay of `inst` on `stream`; false with a Python error set.
  bool launch(Instance& inst, cuda::CUstream stream) {
    if (inst.exec) {
      cuda::ContextGuard guard(options_.device);
      cuda::launch_graph(inst.exec, stream);
      return true;
    }
    return bool(PyRef::steal(PyObject_CallMethod(inst.graph.get(), "replay", nullptr)));
  }

  // Moves the outputs that view an input (x.t(), x[1:] of an input x) out of the instance's outputs into its
  // input views, made again at each replay from that call's input. Names an output that shares memory with an
  // input otherwise (a view of another dtype): the CUDA graph cannot return it.
  std::string take_input_views(Instance& inst) const {
    for (size_t n = 0; n < inst.values.size(); ++n) {
      PyObject* v = inst.values[n];
      if (!v || !frontend::torch_refs().is_tensor(v)) continue;
      PyRef storage = PyRef::steal(PyObject_CallMethod(v, "untyped_storage", nullptr));
      PyRef ptr = storage ? PyRef::steal(PyObject_CallMethod(storage.get(), "data_ptr", nullptr)) : PyRef();
      PyRef nbytes = storage ? PyRef::steal(PyObject_CallMethod(storage.get(), "nbytes", nullptr)) : PyRef();
      PyRef dtype = PyRef::steal(PyObject_GetAttrString(v, "dtype"));
      PyRef itemsize = dtype ? PyRef::steal(PyObject_GetAttrString(dtype.get(), "itemsize")) : PyRef();
      if (!ptr || !nbytes || !itemsize) {
        PyErr_Clear();
        return "an output's storage cannot be inspected";
      }
      const char* base = static_cast<const char*>(PyLong_AsVoidPtr(ptr.get()));
      const size_t bytes = PyLong_AsSize_t(nbytes.get());
      for (size_t i = 0; i < inst.homes.size(); ++i) {
        const Home& home = inst.homes[i];
        if (!overlaps(base, bytes, home.address, home.bytes)) continue;
        const char* first = tensor_data_ptr(v);
        const long long item = PyLong_AsLongLong(itemsize.get());
        const long long delta = first - home.address;
        InputView view;
        view.node = graph::NodeId(n);
        view.input = i;
        view.offset = item > 0 ? delta / item : 0;
        view.sizes = PyRef::steal(PyObject_CallMethod(v, "size", nullptr));
        view.strides = PyRef::steal(PyObject_CallMethod(v, "stride", nullptr));
        if (!first || !view.sizes || !view.strides || item <= 0 || delta % item ||
            dtype.get() != input_metas_[i].dtype.get()) {
          PyErr_Clear();
          return fmt::format("output {} shares memory with input {} ({}) but is not a view of it of its dtype; "
                             "CUDA graph outputs must be their own tensors", output_labels_[n], i, input_sources_[i]);
        }
        inst.input_views.push_back(std::move(view));
        Py_CLEAR(inst.values[n]);
        break;
      }
    }
    return "";
  }

  // The reference counts of the outputs while fastcomp alone holds them.
  bool watch_outputs(Instance& inst) {
    for (PyObject* v : inst.values) {
      if (!v || !frontend::torch_refs().is_tensor(v)) continue;
      bool seen = false;
      for (const HeldOutput& o : inst.outputs) seen = seen || o.tensor == v;
      if (seen) continue;
      HeldOutput o;
      o.tensor = v;
      o.refs = Py_REFCNT(v);
      PyRef storage = PyRef::steal(PyObject_CallMethod(v, "untyped_storage", nullptr));
      o.storage_key = storage ? PyRef::steal(PyObject_GetAttrString(storage.get(), "_cdata")) : PyRef();
      storage = PyRef();  // asked the way outputs_free asks, with no storage object alive
      PyRef count = o.storage_key ? PyRef::steal(PyObject_CallOneArg(torch_cuda().storage_use_count.get(),
                                                                     o.storage_key.get()))
                                  : PyRef();
      if (!count) return false;
      o.storage_refs = PyLong_AsLongLong(count.get());
      inst.outputs.push_back(std::move(o));
    }
    return true;
  }

  PyObject* give_up(const std::string& why, PyObject* const* inputs, size_t ninputs) {
    PyErr_Clear();
    turn_off(why);
    return inner_->run(inputs, ninputs);
  }

  void turn_off(const std::string& why) {
    off_ = why;
    instances_.clear();
    FC_LOG(cudagraphs, warning, "fastcomp: {} runs without a CUDA graph (mode=\"reduce-overhead\"): {}",
           options_.label, why);
  }

  std::unique_ptr<Executable> inner_;
  CudaGraphOptions options_;
  PyRef device_index_ = PyRef::steal(PyLong_FromLong(options_.device));
  graph::Arg output_;
  size_t num_nodes_ = 0;
  std::vector<graph::NodeId> input_nodes_;
  std::vector<graph::TensorMeta> input_metas_;
  std::vector<std::string> input_sources_;  // per input: its guard source, for messages
  std::vector<std::string> output_labels_;  // per node: "%12 = Tensor.view @ file.py:3", for messages
  std::vector<bool> own_home_;  // per input: read from a buffer of fastcomp's own (it moved while held)
  bool writes_inputs_ = false;  // the graph writes into its inputs: they are always read in place
  bool warmed_up_ = false;
  bool held_logged_ = false;
  bool copy_logged_ = false;
  int captures_ = 0;
  bool picks_compared_ = false;  // compare_matmul_picks ran (or had nothing to compare), at the first capture
  std::string last_moved_;
  std::vector<char*> last_addresses_;  // the inputs' data pointers at the last call past warm-up
  std::string off_;  // why the CUDA graph is off, once it is
  std::vector<std::unique_ptr<Instance>> instances_;
};

}  // namespace

std::unique_ptr<Executable> make_cuda_graph_executable(std::unique_ptr<Executable> inner, const graph::Graph& graph,
                                                       CudaGraphOptions options) {
  return std::make_unique<CudaGraphExecutable>(std::move(inner), graph, std::move(options));
}

}  // namespace fastcomp::runtime
