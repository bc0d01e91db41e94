// Autocast while tracing. A `with torch.autocast(...)` block becomes two calls of the graph, fastcomp._autocast.enter
// and .leave, with the states inside and outside the block as constants: the graph's ops then run under autocast
// as eager runs them, so their values are eager's. What the trace needs is each result's dtype, which autocast
// changes: ops on a device under autocast are also run on stand-ins of that device (python/fastcomp/_autocast.py).
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
    if (!r->autocast_type || !r->state || !r->only_known_devices || !r->enter || !r->leave || !r->trace_meta) {
      delete r;
      return nullptr;
    }
    return r;
  });
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
  graph_.under_autocast = autocast_at_start_;
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
  graph::Node node;
  node.kind = graph::NodeKind::Call;
  node.target = A->enter;
  node.target_name = "fastcomp._autocast.enter";
  for (int i = 0; i < 4; ++i) node.args.push_back(graph::Arg::of_const(PyRef::borrow(PyTuple_GET_ITEM(region.get(), i))));
  node.user_loc = user_loc();
  graph_.add(std::move(node));
  if (!call_for_real(A->enter.get(), region.get()))
    throw Unsupported(BreakCode::UnsupportedValue, "entering the torch.autocast block raised");
  autocast_open_.push_back(outside);
  graph_.under_autocast = true;
  auto exit = std::make_shared<Value>();
  exit->kind = VKind::AutocastExit;
  exit->obj = outside;
  return exit;
}

ValueRef Tracer::leave_autocast(const Value& exit) {
  const AutocastRefs* A = autocast_refs();
  if (autocast_open_.empty() || autocast_open_.back().get() != exit.obj.get())
    throw Unsupported(BreakCode::UnsupportedValue, "torch.autocast blocks left in another order than entered");
  graph::Node node;
  node.kind = graph::NodeKind::Call;
  node.target = A->leave;
  node.target_name = "fastcomp._autocast.leave";
  for (int i = 0; i < 4; ++i) node.args.push_back(graph::Arg::of_const(PyRef::borrow(PyTuple_GET_ITEM(exit.obj.get(), i))));
  node.user_loc = user_loc();
  graph_.add(std::move(node));
  autocast_open_.pop_back();
  call_for_real(A->leave.get(), exit.obj.get());
  return make_const_borrowed(Py_False);  // exceptions propagate, as autocast's __exit__ lets them
}

PyRef Tracer::autocast_meta(PyObject* target, PyObject* meta_args, PyObject* meta_kwargs, PyObject* device,
                            PyObject* meta_out) {
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
