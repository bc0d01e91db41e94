// Recording torch calls as graph nodes. Output metadata comes from running the same call on meta tensors,
// so every torch op works without an op table; devices are tracked beside the meta tensors. Common ops whose
// meta implementations are slow Python (elementwise_meta.h, nn_meta.h, attention_meta.h) are computed in C++.
#include <fmt/format.h>

#include <string_view>

#include "frontend/trace/attention_meta.h"
#include "frontend/trace/elementwise_meta.h"
#include "frontend/trace/kernel_layout.h"
#include "frontend/trace/meta.h"
#include "frontend/trace/nn_meta.h"
#include "frontend/trace/torch_refs.h"
#include "frontend/trace/tracer.h"
#include "support/pystr.h"

namespace fastcomp::frontend {
namespace {

// Functions that create tensors from nothing: their device comes from `device=` (meta while tracing).
bool is_factory(std::string_view name) {
  static const std::string_view kFactories[] = {
      "zeros", "ones", "empty", "full", "arange", "linspace", "logspace", "eye", "rand", "randn",
      "randint", "randperm", "tensor", "as_tensor", "scalar_tensor", "empty_strided", "zeros_like",
      "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "randint_like", "tril_indices",
      "triu_indices", "new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"};
  auto dot = name.rfind('.');
  std::string_view base = dot == std::string_view::npos ? name : name.substr(dot + 1);
  for (auto f : kFactories)
    if (base == f) return true;
  return false;
}

// The tensor methods whose result depends on tensor values: they cannot be traced to a graph.
bool is_data_dependent(std::string_view name) {
  static const std::string_view kNames[] = {"Tensor.item", "Tensor.tolist", "Tensor.numpy", "Tensor.__bool__",
                                            "Tensor.__int__", "Tensor.__float__", "Tensor.__index__",
                                            "Tensor.__len__", "Tensor.nonzero", "Tensor.unique",
                                            "torch.nonzero", "torch.unique", "Tensor.masked_select",
                                            "torch.masked_select", "Tensor.data_ptr", "Tensor.__array__"};
  for (auto n : kNames)
    if (name == n) return true;
  return false;
}

// torch functions of no arguments that read global state the traced code branches on (torch.jit.is_tracing,
// nn.Module.__call__'s choice of forward, torch.are_deterministic_algorithms_enabled): their value while tracing is
// a constant of the graph under a guard that reads it again, rather than a graph op the branch never sees.
bool is_state_query(std::string_view name) {
  static const std::string_view kNames[] = {
      "torch._C._get_tracing_state",          "torch._C._get_deterministic_algorithms",
      "torch._C._get_deterministic_algorithms_warn_only", "torch.are_deterministic_algorithms_enabled",
      "torch.is_deterministic_algorithms_warn_only_enabled", "torch.get_deterministic_debug_mode",
      "torch.is_inference_mode_enabled",      "torch.is_warn_always_enabled",
      "torch._C._is_torch_function_enabled",  "torch._C._is_torch_function_mode_enabled"};
  for (auto n : kNames)
    if (name == n) return true;
  return false;
}

// A torch.device of type "cuda" (any index).
bool is_cuda_device(PyObject* device) {
  PyRef type = PyRef::steal(PyObject_GetAttrString(device, "type"));
  const bool cuda = type && PyUnicode_Check(type.get()) && PyUnicode_CompareWithASCIIString(type.get(), "cuda") == 0;
  PyErr_Clear();
  return cuda;
}

// torch.device("cuda", <index>) for a CUDA device without an index, under a GLOBAL_STATE guard on the current
// device; null for any other device, or where the current device cannot be read.
PyRef current_cuda_index(PyObject* device, GuardSet& guards) {
  if (!is_cuda_device(device)) return {};
  PyRef index = PyRef::steal(PyObject_GetAttrString(device, "index"));
  if (!index) return PyErr_Clear(), PyRef();
  if (index.get() != Py_None) return {};
  Guard g;
  if (!make_global_state_guard(torch_refs().cuda_current_device.get(), "torch.cuda.current_device()",
                               StateProbe::None, &g))
    return {};
  PyRef indexed = PyRef::steal(PyObject_CallFunction(torch_refs().device_type.get(), "sO", "cuda", g.expected.get()));
  if (!indexed) return PyErr_Clear(), PyRef();
  guards.guards.push_back(std::move(g));
  return indexed;
}

struct Converted {
  graph::Arg arg;
  PyRef meta;  // what the meta call receives
};

}  // namespace

// Converts a Value used as an argument of a torch call. Tensors become node references and meta tensors.
static Converted convert_arg(Tracer& t, const ValueRef& v, PyObject** device) {
  switch (v->kind) {
    case VKind::Tensor: {
      // Prefer a non-CPU device: a CPU scalar tensor mixed with CUDA tensors yields CUDA results.
      if (!*device || PyObject_RichCompareBool(*device, torch_refs().cpu_device.get(), Py_EQ) == 1)
        *device = v->device.get();
      return {graph::Arg::of_node(v->node), v->meta};
    }
    case VKind::Tuple:
    case VKind::List: {
      Converted c;
      c.arg.kind = v->kind == VKind::Tuple ? graph::Arg::Kind::Tuple : graph::Arg::Kind::List;
      c.meta = PyRef::steal(v->kind == VKind::Tuple ? PyTuple_New(v->items.size()) : PyList_New(v->items.size()));
      for (size_t i = 0; i < v->items.size(); ++i) {
        Converted item = convert_arg(t, v->items[i], device);
        c.arg.items.push_back(std::move(item.arg));
        if (v->kind == VKind::Tuple) PyTuple_SET_ITEM(c.meta.get(), i, item.meta.release());
        else PyList_SET_ITEM(c.meta.get(), i, item.meta.release());
      }
      return c;
    }
    case VKind::Slice: {
      if (!has_sym(v)) break;  // a constant slice
      // A bound computed from sizes (x[:, :seq_len]): each bound is evaluated on every call.
      Converted c;
      c.arg.kind = graph::Arg::Kind::Slice;
      PyRef parts[3];
      for (int i = 0; i < 3; ++i) {
        Converted part = convert_arg(t, v->items[i], device);
        c.arg.items.push_back(std::move(part.arg));
        parts[i] = std::move(part.meta);
      }
      c.meta = PyRef::steal(PySlice_New(parts[0].get(), parts[1].get(), parts[2].get()));
      return c;
    }
    case VKind::SymInt: {
      // Evaluated from the inputs' sizes on every call; the meta call sees its value while tracing.
      graph::Sym e = t.shapes().resolve(v->sym);
      return {graph::Arg::of_sym(e, PyLong_AsLongLong(v->obj.get())), v->obj};
    }
    default: break;
  }
  // An object read from the frame and guarded by type only (a numpy array, say) would be baked into the
  // graph as the object seen while tracing.
  if ((v->is(VKind::Object) && v->source >= 0 && !guard_by_identity(v->obj.get())) || (v->is(VKind::Const) && v->flag))
    throw Unsupported(BreakCode::UnsupportedValue,
                      fmt::format("cannot pass {} from the frame to a torch function", describe(*v)));
  PyRef c = t.as_python_constant(v);
  if (!c) throw Unsupported(BreakCode::UnsupportedValue, fmt::format("cannot pass {} to a torch function", describe(*v)));
  return {graph::Arg::of_const(c), c};
}

// Turns the meta output of a recorded node into Values (with extra getitem nodes for tuple outputs).
// `known` (nullable) is the output's metadata when it was computed without reading `out`.
// `shapes` (one per tensor output, in order; empty when static) are the outputs' symbolic shapes.
static ValueRef wrap_output(Tracer& t, graph::Node node, PyObject* out, PyObject* device,
                            const graph::TensorMeta* known, const std::vector<graph::SymShape>& shapes) {
  const auto& T = torch_refs();
  size_t next_shape = 0;
  auto tensor_value = [&](graph::NodeId id, PyObject* meta_tensor) {
    auto v = std::make_shared<Value>();
    v->kind = VKind::Tensor;
    v->node = id;
    v->meta = PyRef::borrow(meta_tensor);
    v->device = PyRef::borrow(device);
    v->tensor_type = reinterpret_cast<PyTypeObject*>(T.tensor_type.get());
    if (next_shape < shapes.size()) v->shape = shapes[next_shape];
    ++next_shape;
    graph::TensorMeta& m = t.graph().nodes[id].meta;
    m.sym_sizes = v->shape.sizes;
    m.sym_strides = v->shape.strides;
    return v;
  };
  if (T.is_tensor(out)) {
    node.type = graph::ValueType::Tensor;
    if (known) {
      node.meta = *known;
      node.meta.device = PyRef::borrow(device);
    } else {
      node.meta = meta_of_tensor(out, device);
    }
    t.note_requires_grad(node.meta.requires_grad);
    return tensor_value(t.graph().add(std::move(node)), out);
  }
  bool sequence = PyTuple_Check(out) || PyList_Check(out);
  bool has_tensor = false;
  if (sequence) {
    for (Py_ssize_t i = 0; i < PySequence_Size(out); ++i) {
      PyRef item = PyRef::steal(PySequence_GetItem(out, i));
      has_tensor |= T.is_tensor(item.get());
    }
  }
  if (!has_tensor) {
    // Results computed from metadata alone (sizes, dtypes, flags) are constants of this trace; the tensor
    // guards keep them valid. A call with tensor arguments and no result is kept for its side effects.
    // A list or dict the call made is a new object on every eager call, so a container made in the trace (each call
    // gets its own, and appends to it are traced), not one object every call shares.
    if (out == Py_None) t.graph().add(std::move(node));
    return t.wrap_call_result(out);
  }
  node.type = graph::ValueType::Other;
  std::string loc = node.user_loc;
  graph::NodeId id = t.graph().add(std::move(node));
  std::vector<ValueRef> items;
  for (Py_ssize_t i = 0; i < PySequence_Size(out); ++i) {
    PyObject* item = PySequence_Fast_GET_ITEM(out, i);  // borrowed: a list or tuple (or structseq) holds it
    if (!T.is_tensor(item)) {
      items.push_back(t.wrap_call_result(item));
      continue;
    }
    graph::Node get;
    get.target = T.getitem;
    get.target_name = "operator.getitem";
    get.args = {graph::Arg::of_node(id), graph::Arg::of_const(PyRef::steal(PyLong_FromSsize_t(i)))};
    get.type = graph::ValueType::Tensor;
    get.meta = meta_of_tensor(item, device);
    get.user_loc = loc;
    items.push_back(tensor_value(t.graph().add(std::move(get)), item));
  }
  if (PyList_Check(out)) return make_seq(VKind::List, std::move(items));
  if (PyTuple_CheckExact(out)) return make_seq(VKind::Tuple, std::move(items));
  // torch.return_types.* (structseq): fields by name and by index.
  auto rec = std::make_shared<Value>();
  rec->kind = VKind::Record;
  rec->obj = PyRef::borrow(reinterpret_cast<PyObject*>(Py_TYPE(out)));
  PyRef names = PyRef::steal(PyObject_GetAttrString(rec->obj.get(), "__match_args__"));
  if (!names) PyErr_Clear();
  for (size_t i = 0; i < items.size(); ++i)
    rec->keys.push_back(names && i < size_t(PyTuple_GET_SIZE(names.get()))
                            ? make_const_borrowed(PyTuple_GET_ITEM(names.get(), i))
                            : make_const(PyRef::steal(PyUnicode_FromFormat("_%zu", i))));
  rec->items = std::move(items);
  return rec;
}

ValueRef Tracer::call_torch(PyObject* target, const std::string& name, const std::vector<ValueRef>& args,
                            const std::vector<std::pair<std::string, ValueRef>>& kwargs) {
  const auto& T = torch_refs();
  if (target == T.is_grad_enabled.get()) note_requires_grad(true);  // the code reads grad mode
  if (name.find("autocast") != std::string::npos) {
    // Autocast changes only at the blocks the trace models (autocast.cpp); a query of it is answered now, under a
    // guard of the autocast state.
    for (const char* setter : {"set_", "increment", "decrement", "clear", "_enter", "_exit"})
      if (name.find(setter) != std::string::npos)
        throw Unsupported(BreakCode::UnsupportedCall, fmt::format("{}() changes autocast outside a `with torch.autocast(...)` block", name));
    note_autocast_read(name.find("enabled") == std::string::npos || name.find("cache") != std::string::npos);
  }
  if (is_data_dependent(name))
    throw Unsupported(BreakCode::DataDependentValue, fmt::format("{}() needs the tensor's values", name));
  if (shapes_.active())
    if (auto size = size_query(name, args, kwargs)) return *size;
  if (args.empty() && kwargs.empty() && is_state_query(name)) {
    Guard g;
    if (!make_global_state_guard(target, (name + "()").c_str(), StateProbe::None, &g))
      throw Unsupported(BreakCode::UnsupportedValue, fmt::format("{}() raised", name));
    PyRef value = g.expected;
    guards_.guards.push_back(std::move(g));
    return make_const(value);
  }
  // torch._assert(condition, message) whose condition is known while tracing (a size check, under the shape
  // guards): it holds, so there is nothing to run (timm's patch embeddings check the image size this way). A
  // failing one, or one of a tensor, stays the call, which raises as eager does.
  if (name == "torch._assert" && !args.empty() && args[0]->kind == VKind::Const) {
    const int holds = PyObject_IsTrue(args[0]->obj.get());
    if (holds < 0) PyErr_Clear();
    if (holds > 0) return make_const_borrowed(Py_None);
  }
  graph::Node node;
  node.kind = graph::NodeKind::Call;
  node.target = PyRef::borrow(target);
  node.target_name = name;
  node.user_loc = user_loc();

  PyObject* device = nullptr;  // borrowed from a Value or a constant argument
  PyRef meta_args = PyRef::steal(PyTuple_New(args.size()));
  for (size_t i = 0; i < args.size(); ++i) {
    Converted c = convert_arg(*this, args[i], &device);
    node.args.push_back(std::move(c.arg));
    PyTuple_SET_ITEM(meta_args.get(), i, c.meta.release());
  }
  PyRef meta_kwargs = PyRef::steal(PyDict_New());
  PyRef explicit_device;
  if (!kwargs.empty()) {
    node.kwnames = PyRef::steal(PyTuple_New(kwargs.size()));
    for (size_t i = 0; i < kwargs.size(); ++i) {
      const auto& [key, value] = kwargs[i];
      PyTuple_SET_ITEM(node.kwnames.get(), i, PyUnicode_FromString(key.c_str()));
      Converted c = convert_arg(*this, value, &device);
      node.kwargs.push_back(std::move(c.arg));
      if (key == "device" && c.meta.get() != Py_None) {
        // Real device for the metadata; the meta call runs on "meta".
        explicit_device = PyRef::steal(PyObject_CallOneArg(T.device_type.get(), c.meta.get()));
        if (!explicit_device) throw UserCodeError("invalid device argument");
        PyDict_SetItemString(meta_kwargs.get(), "device", T.meta_device.get());
      } else {
        PyDict_SetItemString(meta_kwargs.get(), key.c_str(), c.meta.get());
      }
    }
  }
  if (!explicit_device && is_factory(name) && !device) {
    PyDict_SetItemString(meta_kwargs.get(), "device", T.meta_device.get());
    explicit_device = T.cpu_device;
  }

  // The output metadata: C++ for common ops, else torch's meta function, with the layout the kernel gives
  // (kernel_layout.h). Dynamic shapes run it again at other sizes (sym_infer.cpp).
  // CPU tensors take the layout the CPU kernel gives stand-ins of their arguments (attention: the kernel torch picks);
  // CUDA convolutions and attention the one their library kernel gives (cuda_kernel_layout); other CUDA ops their
  // meta function's.
  const bool cpu_device = device && PyObject_RichCompareBool(device, T.cpu_device.get(), Py_EQ) == 1;
  const bool cuda_device = device && !cpu_device && !shapes_.active() && is_cuda_device(device);
  auto run_plain_meta = [&](PyObject* margs, PyObject* mkwargs, std::optional<ComputedMeta>* computed) -> PyRef {
    std::optional<ComputedMeta> local;
    std::optional<ComputedMeta>& fast_meta = computed ? *computed : local;
    // The elementwise fast path answers only for dtypes torch accepts; where it declines, torch's CPU kernel checks
    // them before any other path (nn_meta's, the meta call) may accept what torch refuses.
    if ((fast_meta = elementwise_meta(target, margs, mkwargs, grad_enabled_)))
      return fast_meta->alias ? PyRef::borrow(fast_meta->alias) : make_meta_result(fast_meta->meta);
    if (!elementwise_dtypes_accepted(target, margs, mkwargs)) return PyRef();
    if ((fast_meta = nn_meta(target, margs, mkwargs, grad_enabled_)))
      return fast_meta->alias ? PyRef::borrow(fast_meta->alias) : make_meta_result(fast_meta->meta);
    if (auto attention = attention_meta(target, margs, mkwargs, grad_enabled_)) {
      PyRef output = make_meta_result(attention->output.meta);
      PyRef weights = attention->weights ? make_meta_result(attention->weights->meta) : PyRef::borrow(Py_None);
      return PyRef::steal(PyTuple_Pack(2, output.get(), weights.get()));
    }
    PyRef out;
    if (auto sdpa = scaled_dot_product_attention_meta(target, margs, mkwargs, grad_enabled_)) {
      out = make_meta_result(sdpa->meta);  // the math path's layout: the device's kernel's follows
    } else {
      // Without a tensor argument (torch.normal(0.0, 1.0, size), torch.tensor(...)) the call runs for real.
      const bool runs_for_real = !device && !PyDict_GetItemString(mkwargs, "device");
      if (runs_for_real && !computed) {
        // A probe at other sizes (sym_infer.cpp) asks for the result's sizes only: on "meta", so that a far larger
        // size (torch.normal(0.0, 1.0, (numel + 1,)) at 2**20 times the sizes) allocates nothing (fuzz seed 8
        // #38779).
        PyRef on_meta = PyRef::steal(PyDict_Copy(mkwargs));
        PyDict_SetItemString(on_meta.get(), "device", T.meta_device.get());
        return PyRef::steal(PyObject_Call(target, margs, on_meta.get()));
      }
      out = runs_for_real ? call_keeping_rng(target, margs, mkwargs) : PyRef::steal(PyObject_Call(target, margs, mkwargs));
      // A real result stands in as a meta tensor, so that later ops on it run on "meta" too (a dropout of it would
      // draw from the generator while tracing).
      if (out && runs_for_real && T.is_tensor(out.get())) out = PyRef::steal(PyObject_CallMethod(out.get(), "to", "s", "meta"));
    }
    if (out && cpu_device)
      if (PyRef kernel = kernel_layout(name, target, margs, mkwargs, out.get())) out = kernel;
    // On CUDA only at the traced sizes: a probe at other sizes (dynamic shapes) keeps the meta layout, as the runtime
    // then checks each result's layout and copies one laid out otherwise.
    if (out && cuda_device && computed)
      if (PyRef kernel = cuda_kernel_layout(name, target, margs, mkwargs, out.get(), device)) out = kernel;
    return out;
  };
  // Under autocast the dtypes are the device's autocast gives (autocast.cpp); the meta call stands where it agrees.
  auto run_meta = [&](PyObject* margs, PyObject* mkwargs, std::optional<ComputedMeta>* computed) -> PyRef {
    PyRef out = run_plain_meta(margs, mkwargs, computed);
    if (!device) return out;
    // A probe at other sizes (computed null: sym_infer.cpp) asks for sizes, which autocast does not change; the
    // stand-ins' kernels may allocate on the device at those sizes (CPU attention's causal mask at 2**20 times them).
    if (out && !computed) return out;
    // Arguments of several dtypes that autocast casts to one (conv2d of a bf16 result with its f32 weight) make
    // the meta call raise where the op runs.
    PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
    if (!out) PyErr_Fetch(&type, &value, &tb);
    PyRef cast = autocast_meta(target, margs, mkwargs, device, out ? out.get() : Py_None);
    if (!cast && !PyErr_Occurred() && !out) PyErr_Restore(type, value, tb);  // autocast is off here: the meta error
    else Py_XDECREF(type), Py_XDECREF(value), Py_XDECREF(tb);
    if (!cast) return PyErr_Occurred() ? PyRef() : out;
    if (computed) computed->reset();  // the result's metadata is the cast one's
    return cast;
  };
  // Under autocast: the op's casts, made explicit.
  const bool moves = name == "Tensor.to" || name == "Tensor.cuda" || name == "Tensor.cpu";
  if (device && !moves)
    if (auto cast = call_with_explicit_casts(target, name, args, kwargs, meta_args.get(), meta_kwargs.get(), device))
      return *cast;
  // Device-moving methods: compute the real device here and run the meta call without a device.
  PyRef meta_out;
  std::optional<ComputedMeta> fast;
  bool moves_device = false;
  if (moves) {
    moves_device = true;
    PyRef rest = PyRef::steal(PyTuple_GetSlice(meta_args.get(), 1, PyTuple_GET_SIZE(meta_args.get())));
    PyRef parsed;
    if (name == "Tensor.to") {
      parsed = PyRef::steal(PyObject_Call(T.parse_to.get(), rest.get(), meta_kwargs.get()));
      if (!parsed) throw UserCodeError("invalid arguments to Tensor.to");
      PyObject* dev = PyTuple_GET_ITEM(parsed.get(), 0);
      if (PyTuple_GET_SIZE(rest.get()) > 0 && T.is_tensor(PyTuple_GET_ITEM(rest.get(), 0)))
        explicit_device = args[1]->device;  // .to(other): other's device
      else if (dev != Py_None && !explicit_device)  // a device=... keyword was read above (the meta call got "meta")
        explicit_device = PyRef::borrow(dev);
      PyObject* dtype = PyTuple_GET_ITEM(parsed.get(), 1);
      PyObject* self = PyTuple_GET_ITEM(meta_args.get(), 0);
      meta_out = dtype == Py_None ? PyRef::borrow(self) : PyRef::steal(PyObject_CallMethod(self, "to", "O", dtype));
    } else if (name == "Tensor.cpu") {
      explicit_device = T.cpu_device;
      meta_out = PyRef::borrow(PyTuple_GET_ITEM(meta_args.get(), 0));
    } else {
      // Tensor.cuda(device=None, ...): an index, a string or a torch.device; none is the current device (the
      // device=... keyword was read above).
      PyObject* dev = PyTuple_GET_SIZE(rest.get()) > 0 ? PyTuple_GET_ITEM(rest.get(), 0) : nullptr;
      if (dev && PyLong_Check(dev))
        explicit_device = PyRef::steal(PyObject_CallFunction(T.device_type.get(), "sO", "cuda", dev));
      else if (dev && dev != Py_None)
        explicit_device = PyRef::steal(PyObject_CallOneArg(T.device_type.get(), dev));
      else if (!explicit_device)
        explicit_device = PyRef::steal(PyObject_CallFunction(T.device_type.get(), "s", "cuda"));
      if (!explicit_device) throw UserCodeError("invalid device argument to Tensor.cuda");
      meta_out = PyRef::borrow(PyTuple_GET_ITEM(meta_args.get(), 0));
    }
  } else {
    meta_out = run_meta(meta_args.get(), meta_kwargs.get(), &fast);
  }
  if (!meta_out) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    std::string msg = value ? PyUnicode_AsUTF8(PyRef::steal(PyObject_Str(value)).get()) : "unknown error";
    bool not_implemented = type && PyErr_GivenExceptionMatches(type, PyExc_NotImplementedError);
    // With static shapes the meta function raises exactly when the op would (shape and dtype checks), so an `except`
    // in the traced code may catch it; with symbolic sizes it raised at one size only, so its class is not given.
    PyObject* exc_type = shapes_.active() ? nullptr : type;  // classes of torch's errors live as long as torch
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    // Meta tensors have no values: an op whose output size depends on them (nonzero, one-argument torch.where,
    // a size read with .item()) fails there with one of these phrases. That is a data-dependent value (GB002), not a gap
    // in torch's meta functions, and torch.compile breaks there too (capture_dynamic_output_shape_ops off).
    const bool needs_values = msg.find("cannot be called on meta tensors") != std::string::npos ||
                              msg.find("data-independent") != std::string::npos ||
                              msg.find("data-dependent") != std::string::npos;
    if (needs_values)
      throw Unsupported(BreakCode::DataDependentValue,
                        fmt::format("{}: the size of its output depends on the tensor's values", name));
    if (not_implemented || msg.find("meta") != std::string::npos)
      throw Unsupported(BreakCode::MetaPropagation, fmt::format("{}: {}", name, msg.substr(0, 300)));
    throw UserCodeError(fmt::format("{} raised: {}", name, msg.substr(0, 300)), exc_type);
  }
  // A torch function that hands back one of its arguments that is no tensor (torch.jit.annotate(T, v) returns v):
  // that argument's value, so that a list made in the trace stays that list and its appends are traced.
  // (A constant result is a constant: a call returning None for its effects keeps its node below.)
  if (!T.is_tensor(meta_out.get()) && !is_constant(meta_out.get())) {
    for (size_t i = 0; i < args.size(); ++i)
      if (PyTuple_GET_ITEM(meta_args.get(), i) == meta_out.get()) return args[i];
    for (const auto& [key, value] : kwargs)
      if (PyDict_GetItemString(meta_kwargs.get(), key.c_str()) == meta_out.get()) return value;
  }
  PyObject* out_device = explicit_device ? explicit_device.get() : (device ? device : T.cpu_device.get());
  // A CUDA device named without an index ("cuda", .cuda()) is the current one: the value's device says which (as
  // the inputs' devices do), under a guard that the current device is still that one.
  PyRef indexed_device = explicit_device ? current_cuda_index(out_device, guards_) : PyRef();
  if (indexed_device) out_device = indexed_device.get();
  // A call that makes a tensor of its own on the CPU (a TorchScript function computing
  // torch.sqrt(torch.tensor(q.size(-1)))) returned that real tensor from its meta call: its result is there,
  // whatever its arguments' device.
  PyRef made_on;
  if (T.is_tensor(meta_out.get())) {
    bool an_argument = false;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(meta_args.get()); ++i)
      an_argument |= PyTuple_GET_ITEM(meta_args.get(), i) == meta_out.get();
    PyRef is_meta = an_argument ? PyRef() : PyRef::steal(PyObject_GetAttrString(meta_out.get(), "is_meta"));
    if (is_meta && is_meta.get() == Py_False) {
      made_on = PyRef::steal(PyObject_GetAttrString(meta_out.get(), "device"));
      PyRef as_meta = made_on ? PyRef::steal(PyObject_CallMethod(meta_out.get(), "to", "s", "meta")) : PyRef();
      if (!as_meta) throw std::runtime_error("fastcomp: cannot read a result's device: " + take_error_message());
      meta_out = as_meta;
      out_device = made_on.get();
    }
    PyErr_Clear();
  }
  const bool writes = graph::writes_an_argument(node);
  std::vector<graph::SymShape> shapes;
  if (shapes_.active() && moves_device && args[0]->is(VKind::Tensor)) {
    shapes = {shapes_.resolve(args[0]->shape)};  // same sizes and layout, another device or dtype
  } else if (shapes_.active()) {
    ProbeCall probe{name, args, kwargs, meta_args.get(), meta_kwargs.get(),
                    [&](PyObject* a, PyObject* k) { return run_meta(a, k, nullptr); }, writes, fast.has_value()};
    shapes = infer_shapes(probe, meta_out.get());
  }
  ValueRef result = wrap_output(*this, std::move(node), meta_out.get(), out_device, fast ? &fast->meta : nullptr, shapes);
  // An in-place op returns its tensor, whose metadata it may have changed (unsqueeze_, t_, resize_, as_strided_
  // change the meta tensor the Value holds): the tensor's Value is the result, and stands for the op's node,
  // with the sizes and layout it left.
  if (writes && !args.empty() && args[0]->is(VKind::Tensor) && result->is(VKind::Tensor) &&
      meta_out.get() == args[0]->meta.get()) {
    args[0]->node = result->node;
    args[0]->shape = result->shape;
    return args[0];
  }
  // An op that returns its input itself (flatten of a 1-d tensor, contiguous() of a contiguous one, to() its own
  // dtype): the same tensor, so `y is x` holds and an in-place metadata change of one (x.unsqueeze_(0)) shows in
  // the other, as in eager. A device move returns another tensor whatever its meta call returned.
  if (!writes && result->is(VKind::Tensor))
    for (const ValueRef& a : args)
      if (a->is(VKind::Tensor) && a->meta.get() == meta_out.get()) {
        const bool same_device = !moves_device || PyObject_RichCompareBool(a->device.get(), out_device, Py_EQ) == 1;
        PyErr_Clear();
        if (same_device) return a;
      }
  return result;
}

ValueRef Tracer::tensor_attr(const ValueRef& tensor, PyObject* name) {
  const auto& T = torch_refs();
  std::string n = PyUnicode_AsUTF8(name);
  if (n == "device") return make_const(tensor->device);
  if (n == "is_cuda" || n == "is_cpu") {
    const bool is_cuda = is_cuda_device(tensor->device.get());
    return make_const_borrowed((n == "is_cuda") == is_cuda ? Py_True : Py_False);
  }
  if ((n == "shape") && !tensor->shape.empty()) return sym_shape(tensor);
  if (n == "grad") return tensor_grad(tensor, name);
  if (n == "grad_fn" || n == "_version" || n == "data_ptr")
    throw Unsupported(BreakCode::UnsupportedValue, fmt::format("Tensor.{} is not traced", n));
  PyObject* cls_attr = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(T.tensor_type.get()), name);
  bool is_method = cls_attr && (Py_TYPE(cls_attr) == &PyMethodDescr_Type || PyFunction_Check(cls_attr) ||
                                Py_TYPE(cls_attr) == &PyWrapperDescr_Type);
  if (is_method) {
    auto m = std::make_shared<Value>();
    m->kind = VKind::Method;
    m->items = {tensor};
    m->obj = PyRef::borrow(cls_attr);
    m->name = "Tensor." + n;
    return m;
  }
  // Data attributes: metadata becomes a constant; tensor-valued ones (T, mT, real, ...) become nodes.
  PyRef out = PyRef::steal(PyObject_GetAttr(tensor->meta.get(), name));
  if (!out) {
    PyErr_Clear();
    throw attribute_error(fmt::format("'Tensor' object has no attribute '{}'", n));
  }
  if (!T.is_tensor(out.get())) return make_const(out);
  return call_torch(T.builtin_getattr.get(), "getattr", {tensor, make_const_borrowed(name)}, {});
}

// `t.grad`. A tensor read from the frame (a parameter) has the gradient its last backward left, or None: read now
// through a source of its own, so a tensor is an input of the graph and None a guard. A tensor the trace made has
// none: no backward runs inside a graph, and the tracer does not assign `.grad`.
ValueRef Tracer::tensor_grad(const ValueRef& tensor, PyObject* name) {
  if (tensor->source < 0) return make_const_borrowed(Py_None);
  for (const auto& [object, value] : tensor_by_object_) {
    if (value != tensor) continue;
    PyRef grad = PyRef::steal(PyObject_GetAttr(object, name));
    if (!grad) throw UserCodeError(take_error_message());
    return wrap(grad.get(), guards_.sources.attr(tensor->source, name));
  }
  throw Unsupported(BreakCode::UnsupportedValue, "Tensor.grad of a tensor whose object the trace does not hold");
}

ValueRef Tracer::set_grad_mode(bool enabled) {
  const auto& T = torch_refs();
  note_requires_grad(true);  // the graph restores a grad mode recorded now: guard it
  // Under that guard the mode here is known: a switch to it (no_grad() entered under no_grad, its exit) changes
  // nothing, and is no step of the graph.
  if (enabled == grad_enabled_) return make_const_borrowed(Py_None);
  graph::Node node;
  node.kind = graph::NodeKind::Call;
  node.target = T.set_grad_enabled;
  node.target_name = "torch._C._set_grad_enabled";
  node.args = {graph::Arg::of_const(PyRef::borrow(enabled ? Py_True : Py_False))};
  node.user_loc = user_loc();
  graph_.add(std::move(node));
  PyRef r = PyRef::steal(PyObject_CallOneArg(T.set_grad_enabled.get(), enabled ? Py_True : Py_False));
  if (!r) PyErr_Clear();
  grad_enabled_ = enabled;
  return make_const_borrowed(Py_None);
}

}  // namespace fastcomp::frontend
