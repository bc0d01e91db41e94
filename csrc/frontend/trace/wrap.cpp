// Turning real objects read from the frame into Values, and the guards that make that valid on later calls.
#include <fmt/format.h>

#include "frontend/trace/meta.h"
#include "frontend/trace/torch_refs.h"
#include "frontend/trace/tracer.h"

namespace fastcomp::frontend {
namespace {

bool is_namedtuple(PyObject* o) { return PyTuple_Check(o) && !PyTuple_CheckExact(o) && PyObject_HasAttrString(o, "_fields"); }

}  // namespace

bool is_constant(PyObject* o) {
  const auto& T = torch_refs();
  if (o == Py_None || o == Py_Ellipsis || o == Py_NotImplemented) return true;
  if (PyBool_Check(o) || PyLong_CheckExact(o) || PyFloat_CheckExact(o) || PyComplex_CheckExact(o) ||
      PyUnicode_CheckExact(o) || PyBytes_CheckExact(o) || PyRange_Check(o) || PyCode_Check(o))
    return true;
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(o));
  if (type == T.dtype_type.get() || type == T.device_type.get() || type == T.size_type.get()) return true;
  if (PySlice_Check(o)) {
    auto* s = reinterpret_cast<PySliceObject*>(o);
    return is_constant(s->start) && is_constant(s->stop) && is_constant(s->step);
  }
  if (PyTuple_CheckExact(o) || PyFrozenSet_CheckExact(o)) {
    PyRef items = PyRef::steal(PySequence_Tuple(o));
    if (!items) {
      PyErr_Clear();
      return false;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(items.get()); ++i)
      if (!is_constant(PyTuple_GET_ITEM(items.get(), i))) return false;
    return true;
  }
  // torch.memory_format, torch.layout, torch.qscheme and enum members behave like constants.
  const char* tn = Py_TYPE(o)->tp_name;
  return std::string_view(tn) == "torch.memory_format" || std::string_view(tn) == "torch.layout";
}

// nn.Module instances are not among these: what a trace reads of a module (its parameters, buffers, submodules and
// attributes) is guarded through its sources, so one compiled version serves every instance of a class whose state
// passes those guards (the N layers of a model).
bool guard_by_identity(PyObject* o) {
  return PyModule_Check(o) || PyType_Check(o) || PyFunction_Check(o) || PyCFunction_Check(o) ||
         PyMethod_Check(o) || Py_TYPE(o) == &PyMethodDescr_Type || Py_TYPE(o) == &PyWrapperDescr_Type;
}

void Tracer::guard(GuardKind kind, int source, PyObject* expected) {
  if (source < 0) return;
  Guard g;
  g.kind = kind;
  g.source = source;
  g.expected = PyRef::borrow(expected);
  guards_.guards.push_back(std::move(g));
}

void Tracer::guard_length(int source, int64_t n) {
  if (source < 0) return;
  Guard g;
  g.kind = GuardKind::Length;
  g.source = source;
  g.length = n;
  guards_.guards.push_back(std::move(g));
}

void Tracer::guard_same_object(int source, int other_source, bool same) {
  if (source < 0 || other_source < 0) return;
  Guard g;
  g.kind = GuardKind::SameObject;
  g.source = source;
  g.length = other_source;
  g.expected = PyRef::borrow(same ? Py_True : Py_False);
  guards_.guards.push_back(std::move(g));
}

ValueRef Tracer::tensor_input(PyObject* tensor, int source) {
  const auto& T = torch_refs();
  PyTypeObject* type = Py_TYPE(tensor);
  if (type != reinterpret_cast<PyTypeObject*>(T.tensor_type.get()) &&
      type != reinterpret_cast<PyTypeObject*>(T.parameter_type.get()))
    throw Unsupported(BreakCode::UnsupportedValue,
                      fmt::format("{} is a tensor subclass ({}); fastcomp traces plain tensors and parameters",
                                  guards_.sources.name(source), type->tp_name));
  // The same tensor reached through two sources is one graph input; the guard keeps that true.
  auto alias = tensor_by_object_.find(tensor);
  if (alias != tensor_by_object_.end()) {
    guard_same_object(source, alias->second->source, true);
    return alias->second;
  }
  graph::TensorMeta meta = meta_of_tensor(tensor, nullptr);
  note_requires_grad(meta.requires_grad);
  const SourceKind kind = guards_.sources.at(source).kind;
  std::vector<int> dims;
  graph::SymShape shape;
  if (kind != SourceKind::ConstObject) {  // tensors the guard program holds itself keep their sizes
    bool parameter = type == reinterpret_cast<PyTypeObject*>(T.parameter_type.get());
    dims = shapes_.input_dims(tensor, guards_.sources.name(source), parameter, meta.sizes,
                              static_cast<int>(graph_.inputs.size()));
    shape = shapes_.input_shape(dims, meta);
    if (shape.empty()) dims.clear();
    meta.sym_sizes = shape.sizes;
    meta.sym_strides = shape.strides;
  }
  graph::Node node;
  node.kind = graph::NodeKind::Input;
  node.type = graph::ValueType::Tensor;
  node.meta = meta;
  node.input_source = guards_.sources.name(source);
  Guard g;
  g.kind = GuardKind::TensorMatch;
  g.source = source;
  g.tensor.type = type;
  g.tensor.meta = meta;
  g.tensor.dim_symbols = std::move(dims);
  guards_.guards.push_back(std::move(g));
  guards_.input_sources.push_back(source);

  auto v = std::make_shared<Value>();
  v->kind = VKind::Tensor;
  v->source = source;
  v->node = graph_.add(std::move(node));
  v->meta = make_meta_tensor(meta);
  v->device = meta.device;
  v->tensor_type = type;
  v->shape = std::move(shape);
  tensor_by_object_[tensor] = v;
  return v;
}

// Objects whose identity the trace must keep: two sources reaching one of them reach one Value, so a change made
// through one is seen through the other.
static bool has_identity(PyObject* o) {
  return !PyTuple_CheckExact(o) && !torch_refs().is_tensor(o);
}

ValueRef Tracer::wrap(PyObject* obj, int source) {
  auto known = by_source_.find(source);
  if (known != by_source_.end()) return known->second;
  const auto& T = torch_refs();
  ValueRef v;
  if (T.is_tensor(obj)) {
    v = tensor_input(obj, source);
  } else if (is_constant(obj)) {
    guard(GuardKind::ConstEquals, source, obj);
    v = make_const_borrowed(obj);
    v->source = source;
  } else if (auto same = object_by_identity_.find(obj); same != object_by_identity_.end() && has_identity(obj)) {
    v = same->second;
    if (!guard_by_identity(obj)) guard_same_object(source, v->source, true);
  } else if (PyTuple_CheckExact(obj) || PyList_CheckExact(obj)) {
    guard(GuardKind::TypeMatch, source, reinterpret_cast<PyObject*>(Py_TYPE(obj)));
    Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
    guard_length(source, n);
    std::vector<ValueRef> items;
    for (Py_ssize_t i = 0; i < n; ++i)
      items.push_back(wrap(PySequence_Fast_GET_ITEM(obj, i), guards_.sources.seq_item(source, static_cast<int>(i))));
    v = make_seq(PyTuple_CheckExact(obj) ? VKind::Tuple : VKind::List, std::move(items));
    v->source = source;
  } else if (PyDict_CheckExact(obj)) {
    PyRef keys = PyRef::steal(PySequence_Tuple(PyRef::steal(PyDict_Keys(obj)).get()));
    guard(GuardKind::TypeMatch, source, reinterpret_cast<PyObject*>(Py_TYPE(obj)));
    guard(GuardKind::DictKeys, source, keys.get());
    v = make_seq(VKind::Dict, {});
    v->source = source;
    object_by_identity_[obj] = v;  // before the items: a dict may contain itself
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(keys.get()); ++i) {
      PyObject* k = PyTuple_GET_ITEM(keys.get(), i);
      v->keys.push_back(dict_key(k));
      v->items.push_back(wrap(PyDict_GetItem(obj, k), guards_.sources.dict_item(source, k)));
    }
  } else if (is_namedtuple(obj)) {
    guard(GuardKind::TypeMatch, source, reinterpret_cast<PyObject*>(Py_TYPE(obj)));
    PyRef fields = PyRef::steal(PyObject_GetAttrString(obj, "_fields"));
    v = std::make_shared<Value>();
    v->kind = VKind::Record;
    v->obj = PyRef::borrow(reinterpret_cast<PyObject*>(Py_TYPE(obj)));
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields.get()); ++i) {
      v->keys.push_back(make_const_borrowed(PyTuple_GET_ITEM(fields.get(), i)));
      v->items.push_back(wrap(PyTuple_GET_ITEM(obj, i), guards_.sources.seq_item(source, static_cast<int>(i))));
    }
    v->source = source;
  } else {
    guard(guard_by_identity(obj) ? GuardKind::IdMatch : GuardKind::TypeMatch, source,
          guard_by_identity(obj) ? obj : reinterpret_cast<PyObject*>(Py_TYPE(obj)));
    v = make_object(PyRef::borrow(obj), source);
  }
  if (source >= 0) by_source_[source] = v;
  if (has_identity(obj) && !is_constant(obj) && v->source >= 0) object_by_identity_.emplace(obj, v);
  return v;
}

// A call the trace makes for real (a builtin or a method of constants, a memoised function) returns either a new
// object, which the program makes afresh on every call, or one that something else holds (a memoised function's
// cached result, a class's table). Only this reference holding a list, dict or set (or a tuple of them) means it is
// new: it is traced as a container made in the frame, so a graph break rebuilds it per call and the trace's changes
// to it are not replayed onto the trace-time object (which would leak them into the next call).
ValueRef Tracer::wrap_call_result(PyObject* obj) {
  if (Py_REFCNT(obj) != 1 || is_constant(obj)) return wrap_untracked(obj);
  // Items held only by `obj` are new as well.
  if (PyList_CheckExact(obj) || PyTuple_CheckExact(obj)) {
    std::vector<ValueRef> items;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(obj); ++i)
      items.push_back(wrap_call_result(PySequence_Fast_ITEMS(obj)[i]));
    return make_seq(PyList_CheckExact(obj) ? VKind::List : VKind::Tuple, std::move(items));
  }
  if (PyDict_CheckExact(obj)) {
    ValueRef d = make_dict();
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(obj, &pos, &k, &v)) {
      d->keys.push_back(dict_key(k));
      d->items.push_back(wrap_call_result(v));
    }
    return d;
  }
  if (PyAnySet_CheckExact(obj)) {
    PyRef items = PyRef::steal(PySequence_Tuple(obj));
    if (!items) {
      PyErr_Clear();
      return wrap_untracked(obj);
    }
    std::vector<ValueRef> out;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(items.get()); ++i) out.push_back(wrap_untracked(PyTuple_GET_ITEM(items.get(), i)));
    ValueRef s = make_seq(VKind::Set, std::move(out));
    s->flag = PyFrozenSet_CheckExact(obj);
    s->set_order = PyRef::borrow(obj);  // nothing else holds it: the object itself keeps CPython's order
    return s;
  }
  return wrap_untracked(obj);
}

ValueRef Tracer::dict_key(PyObject* k) {
  // Keys are compared with the real objects' own == and hash; the guard on the dict's keys keeps them the same.
  if (is_constant(k)) return make_const_borrowed(k);
  if (torch_refs().is_tensor(k)) throw Unsupported(BreakCode::UnsupportedValue, "a dict from the frame with tensor keys");
  return make_object(PyRef::borrow(k), -1);
}

ValueRef Tracer::wrap_untracked(PyObject* obj) {
  const auto& T = torch_refs();
  if (T.is_tensor(obj)) {
    // A tensor reachable only through objects we do not guard (e.g. a module-level constant): the guard
    // program holds it and passes it in as an input on every call.
    return tensor_input(obj, guards_.sources.const_object(obj, fmt::format("<tensor at {}>", static_cast<void*>(obj))));
  }
  if (is_constant(obj)) return make_const_borrowed(obj);
  if (auto same = object_by_identity_.find(obj); same != object_by_identity_.end()) return same->second;
  if (PyTuple_CheckExact(obj)) {
    std::vector<ValueRef> items;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(obj); ++i) items.push_back(wrap_untracked(PyTuple_GET_ITEM(obj, i)));
    return make_seq(VKind::Tuple, std::move(items));
  }
  if (PyList_CheckExact(obj) || PyDict_CheckExact(obj)) {
    // Read without guards (a library's module-level table); held by the guard program so that a change the trace
    // makes to it can be replayed on the object itself.
    int source = guards_.sources.const_object(obj, fmt::format("<{} at {}>", Py_TYPE(obj)->tp_name, static_cast<void*>(obj)));
    ValueRef v;
    if (PyList_CheckExact(obj)) {
      std::vector<ValueRef> items;
      for (Py_ssize_t i = 0; i < PyList_GET_SIZE(obj); ++i) items.push_back(wrap_untracked(PyList_GET_ITEM(obj, i)));
      v = make_seq(VKind::List, std::move(items));
    } else {
      v = make_dict();
      PyObject *k, *item;
      Py_ssize_t pos = 0;
      while (PyDict_Next(obj, &pos, &k, &item)) {
        v->keys.push_back(dict_key(k));
        v->items.push_back(wrap_untracked(item));
      }
    }
    v->source = source;
    object_by_identity_.emplace(obj, v);
    return v;
  }
  ValueRef v = make_object(PyRef::borrow(obj), -1);
  return v;
}

}  // namespace fastcomp::frontend
