// Autocast while tracing (python/fastcomp/_autocast.py says how autocast is seen). First the trace makes autocast
// explicit: an op under autocast becomes the casts autocast makes, as Tensor.to nodes, and the op on the cast
// tensors; blocks leave no node, and a graph traced under autocast runs with it suspended. The graph is then one of
// ordinary ops, which any backend lowers. Where an op's casts cannot be made explicit (or gradients are recorded)
// the trace starts again keeping autocast: a `with torch.autocast(...)` block becomes two calls of the graph,
// fastcomp._autocast.enter and .leave, with the states inside and outside the block as constants, its ops run under
// autocast as eager runs them, and each result's dtype is the one autocast gives stand-ins of the device.
// The autocast state the frame starts under is guarded (fastcomp._autocast.state()) once the trace depends on it:
// it started under autocast, entered a block, or asked torch what autocast does.
#include <fmt/format.h>

#include "cpython/gil_once.h"
#include "frontend/trace/torch_refs.h"
#include "frontend/trace/tracer.h"
#include "support/pystr.h"

namespace fastcomp::frontend {
namespace {

struct AutocastRefs {
  PyRef autocast_type;       // torch.amp.autocast_mode.autocast
  PyRef state;               // fastcomp._autocast.state
  PyRef only_known_devices;  // fastcomp._autocast.only_known_devices
  PyRef enter, leave;        // fastcomp._autocast.enter / leave
  PyRef trace_meta;          // fastcomp._autocast.trace_meta
  PyRef explicit_casts;      // fastcomp._autocast.explicit_casts
  PyRef tensor_to;           // torch.Tensor.to
};

// Null where this torch or fastcomp's Python side lacks a piece (autocast is then not traced).
const AutocastRefs* autocast_refs() {
  static cpython::GilOnce<AutocastRefs> refs;
  return refs.get([]() -> AutocastRefs* {
    auto r = new AutocastRefs;
    r->autocast_type = PyRef::steal(cpython::import_attr("torch.amp.autocast_mode", "autocast"));
    PyRef module = PyRef::steal(PyImport_ImportModule("fastcomp._autocast"));
    if (!module) PyErr_Clear();
    auto attr = [&](const char* name) {
      PyRef a = module ? PyRef::steal(PyObject_GetAttrString(module.get(), name)) : PyRef();
      if (!a) PyErr_Clear();
      return a;
    };
    r->state = attr("state");
    r->only_known_devices = attr("only_known_devices");
    r->enter = attr("enter");
    r->leave = attr("leave");
    r->trace_meta = attr("trace_meta");
    r->explicit_casts = attr("explicit_casts");
    r->tensor_to = PyRef::steal(PyObject_GetAttrString(torch_refs().tensor_type.get(), "to"));
    if (!r->autocast_type || !r->state || !r->only_known_devices || !r->enter || !r->leave || !r->trace_meta ||
        !r->explicit_casts || !r->tensor_to) {
      PyErr_Clear();
      delete r;
      return nullptr;
    }
    return r;
  });
}

// fastcomp._autocast.enter or .leave (`fn`, named `name`) with the four constants of `state`, as a node of the graph.
void add_autocast_node(graph::Graph& graph, const PyRef& fn, const char* name, PyObject* state, std::string user_loc) {
  graph::Node node;
  node.kind = graph::NodeKind::Call;
  node.target = fn;
  node.target_name = name;
  for (int i = 0; i < 4; ++i) node.args.push_back(graph::Arg::of_const(PyRef::borrow(PyTuple_GET_ITEM(state, i))));
  node.user_loc = std::move(user_loc);
  graph.add(std::move(node));
}

bool call_for_real(PyObject* fn, PyObject* args) {
  PyRef r = PyRef::steal(PyObject_CallObject(fn, args));
  if (!r) PyErr_Clear();
  return static_cast<bool>(r);
}

}  // namespace

void Tracer::start_autocast() {
  PyRef any = PyRef::steal(PyObject_CallNoArgs(torch_refs().is_any_autocast_enabled.get()));
  if (!any) PyErr_Clear();
  autocast_at_start_ = any.get() == Py_True;
  graph_.under_autocast = autocast_at_start_ && keep_autocast_;
  graph_.suspends_autocast = autocast_at_start_ && !keep_autocast_;
  const AutocastRefs* A = autocast_refs();
  if (!A) {
    if (autocast_at_start_) throw Unsupported(BreakCode::UnsupportedValue, "autocast is enabled and fastcomp._autocast is missing");
    return;
  }
  if (autocast_at_start_) {
    PyRef known = PyRef::steal(PyObject_CallNoArgs(A->only_known_devices.get()));
    if (!known) PyErr_Clear();
    if (known.get() != Py_True)
      throw Unsupported(BreakCode::UnsupportedValue, "autocast is enabled for a device other than cpu and cuda");
  }
  Guard g;
  if (make_global_state_guard(A->state.get(), "fastcomp._autocast.state()", StateProbe::None, &g))
    autocast_guard_ = std::move(g);
  else if (autocast_at_start_)
    throw Unsupported(BreakCode::UnsupportedValue, "autocast is enabled and its state cannot be read");
}

void Tracer::unwind_autocast() {
  const AutocastRefs* A = autocast_refs();
  for (; !autocast_open_.empty(); autocast_open_.pop_back())
    if (A) call_for_real(A->leave.get(), autocast_open_.back().get());
}

bool is_autocast_class(PyTypeObject* type) {
  const AutocastRefs* A = autocast_refs();
  if (!A || !PyType_IsSubtype(type, reinterpret_cast<PyTypeObject*>(A->autocast_type.get()))) return false;
  // torch's own classes only: a subclass from elsewhere may enter and leave otherwise.
  PyRef module = PyRef::steal(PyObject_GetAttrString(reinterpret_cast<PyObject*>(type), "__module__"));
  if (!module) PyErr_Clear();
  return module && PyUnicode_Check(module.get()) && utf8(module.get()).rfind("torch.", 0) == 0;
}

// torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None) on constants: built for real now (its
// __init__ reads only its arguments and the default autocast dtype of the device, which the state guard covers), so
// that the block's state is known; it must not leave the trace.
ValueRef Tracer::construct_autocast(PyTypeObject* cls, const std::vector<ValueRef>& args,
                                    const std::vector<std::pair<std::string, ValueRef>>& kwargs) {
  auto refuse = [&](const std::string& what) {
    return Unsupported(BreakCode::UnsupportedCall, fmt::format("{}(...) with {} that is not a constant", cls->tp_name, what));
  };
  PyRef argv = PyRef::steal(PyTuple_New(args.size()));
  for (size_t i = 0; i < args.size(); ++i) {
    PyRef c = as_python_constant(args[i]);
    if (!c) throw refuse(fmt::format("argument {}", i + 1));
    PyTuple_SET_ITEM(argv.get(), i, c.release());
  }
  PyRef kw = PyRef::steal(PyDict_New());
  for (const auto& [k, v] : kwargs) {
    PyRef c = as_python_constant(v);
    if (!c) throw refuse(fmt::format("argument '{}'", k));
    PyDict_SetItemString(kw.get(), k.c_str(), c.get());
  }
  PyRef ctx = PyRef::steal(PyObject_Call(reinterpret_cast<PyObject*>(cls), argv.get(), kw.get()));
  if (!ctx) {
    PyObject* known = known_exception();
    throw UserCodeError(take_error_message(), known);
  }
  autocast_read_ = true;
  ValueRef v = make_object(ctx, -1);
  v->made_in_trace = true;
  return v;
}

ValueRef Tracer::enter_autocast(const ValueRef& ctx) {
  const AutocastRefs* A = autocast_refs();
  // What the block sets, read as attributes (so that an object from the frame, a decorator's, is guarded).
  PyRef region = PyRef::steal(PyTuple_New(4));
  const char* names[] = {"device", "_enabled", "fast_dtype", "_cache_enabled"};
  for (int i = 0; i < 4; ++i) {
    ValueRef a = get_attr(ctx, PyRef::steal(PyUnicode_InternFromString(names[i])).get());
    PyRef c = as_python_constant(a);
    if (!c) throw Unsupported(BreakCode::UnsupportedValue, fmt::format("a torch.autocast object whose {} is not a constant", names[i]));
    if (i == 1 || i == 3) c = PyRef::borrow(PyObject_IsTrue(c.get()) ? Py_True : Py_False);
    PyTuple_SET_ITEM(region.get(), i, c.release());
  }
  PyObject* device = PyTuple_GET_ITEM(region.get(), 0);
  if (!PyUnicode_Check(device) || (utf8(device) != "cpu" && utf8(device) != "cuda"))
    throw Unsupported(BreakCode::UnsupportedValue, fmt::format("torch.autocast for device {}", py_repr(device)));
  // The state outside: this device's as it is now (known under the state guard and the blocks entered so far).
  PyRef now = PyRef::steal(PyObject_CallNoArgs(A->state.get()));
  if (!now) throw Unsupported(BreakCode::UnsupportedValue, "the autocast state cannot be read: " + take_error_message());
  const int at = utf8(device) == "cpu" ? 0 : 2;
  PyRef outside = PyRef::steal(PyTuple_Pack(4, device, PyTuple_GET_ITEM(now.get(), at), PyTuple_GET_ITEM(now.get(), at + 1),
                                            PyTuple_GET_ITEM(now.get(), 4)));
  autocast_read_ = true;
  if (keep_autocast_) {
    add_autocast_node(graph_, A->enter, "fastcomp._autocast.enter", region.get(), user_loc());
    graph_.under_autocast = true;
  }
  // Entered for real either way: what the trace asks of autocast inside the block (its casts, state queries)
  // is what eager sees there.
  if (!call_for_real(A->enter.get(), region.get()))
    throw Unsupported(BreakCode::UnsupportedValue, "entering the torch.autocast block raised");
  autocast_open_.push_back(outside);
  auto exit = std::make_shared<Value>();
  exit->kind = VKind::AutocastExit;
  exit->obj = outside;
  return exit;
}

ValueRef Tracer::leave_autocast(const Value& exit) {
  const AutocastRefs* A = autocast_refs();
  if (autocast_open_.empty() || autocast_open_.back().get() != exit.obj.get())
    throw Unsupported(BreakCode::UnsupportedValue, "torch.autocast blocks left in another order than entered");
  if (keep_autocast_) add_autocast_node(graph_, A->leave, "fastcomp._autocast.leave", exit.obj.get(), user_loc());
  autocast_open_.pop_back();
  call_for_real(A->leave.get(), exit.obj.get());
  return make_const_borrowed(Py_False);  // exceptions propagate, as autocast's __exit__ lets them
}

std::optional<ValueRef> Tracer::call_with_explicit_casts(PyObject* target, const std::string& name,
                                                         const std::vector<ValueRef>& args,
                                                         const std::vector<std::pair<std::string, ValueRef>>& kwargs,
                                                         PyObject* meta_args, PyObject* meta_kwargs, PyObject* device) {
  if (keep_autocast_ || explicit_cast_depth_ > 0 || (!autocast_at_start_ && autocast_open_.empty())) return std::nullopt;
  const AutocastRefs* A = autocast_refs();
  // With dynamic shapes the casts must hold at every size, not only at the traced ones.
  PyRef casts = PyRef::steal(PyObject_CallFunctionObjArgs(A->explicit_casts.get(), target, meta_args, meta_kwargs,
                                                          device, shapes_.active() ? Py_True : Py_False, nullptr));
  auto keep = [&](const std::string& why) { return KeepAutocast(fmt::format("{} at {}: {}", name, user_loc(), why)); };
  if (!casts) {  // the op raises under autocast: the trace that keeps autocast reports it as it does
    const std::string error = take_error_message();
    throw keep("it raises under autocast: " + error.substr(0, 200));
  }
  if (PyUnicode_Check(casts.get())) throw keep(utf8(casts.get()));
  if (PyList_GET_SIZE(casts.get()) == 0) return std::nullopt;
  std::vector<ValueRef> cast_args = args;
  std::vector<std::pair<std::string, ValueRef>> cast_kwargs = kwargs;
  ++explicit_cast_depth_;
  struct Depth {
    int& d;
    ~Depth() { --d; }
  } depth{explicit_cast_depth_};
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(casts.get()); ++i) {
    PyObject* cast = PyList_GET_ITEM(casts.get(), i);  // ((where, key[, item]), dtype)
    PyObject* place = PyTuple_GET_ITEM(cast, 0);
    PyObject* dtype = PyTuple_GET_ITEM(cast, 1);
    const bool positional = utf8(PyTuple_GET_ITEM(place, 0)) == "arg";
    ValueRef* slot = nullptr;
    if (positional) {
      slot = &cast_args.at(PyLong_AsSsize_t(PyTuple_GET_ITEM(place, 1)));
    } else {
      const std::string key = utf8(PyTuple_GET_ITEM(place, 1));
      for (auto& kv : cast_kwargs)
        if (kv.first == key) slot = &kv.second;
    }
    if (!slot) throw keep("a cast of an argument it was not given");
    if (PyTuple_GET_SIZE(place) == 3) {  // item j of a list or tuple argument (torch.cat's tensors)
      if (!(*slot)->is(VKind::List) && !(*slot)->is(VKind::Tuple)) throw keep("a cast of an item of an argument that is no list");
      auto copy = std::make_shared<Value>(**slot);  // the caller's list stays as it is
      *slot = copy;
      slot = &copy->items.at(PyLong_AsSsize_t(PyTuple_GET_ITEM(place, 2)));
    }
    if (!(*slot)->is(VKind::Tensor)) throw keep("a cast of an argument that is no tensor of the graph");
    *slot = call_torch(A->tensor_to.get(), "Tensor.to", {*slot, make_const_borrowed(dtype)}, {});
  }
  return call_torch(target, name, cast_args, cast_kwargs);
}

PyRef Tracer::autocast_meta(PyObject* target, PyObject* meta_args, PyObject* meta_kwargs, PyObject* device,
                            PyObject* meta_out) {
  if (!keep_autocast_) return {};  // every op under autocast was traced with its explicit casts
  if (!autocast_at_start_ && autocast_open_.empty()) return {};
  const AutocastRefs* A = autocast_refs();
  PyRef no_kwargs = meta_kwargs ? PyRef() : PyRef::steal(PyDict_New());
  PyRef out = PyRef::steal(PyObject_CallFunctionObjArgs(A->trace_meta.get(), target, meta_args,
                                                        meta_kwargs ? meta_kwargs : no_kwargs.get(), device, meta_out,
                                                        nullptr));
  if (!out) return {};  // the error stays set: what the op raises under autocast
  return out.get() == Py_None ? PyRef() : out;
}

}  // namespace fastcomp::frontend
