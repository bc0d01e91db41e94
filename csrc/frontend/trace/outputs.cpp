// Values as graph outputs: what the compiled code hands back to Python (the function's result, the values live at
// a graph break, the new contents side effects write). Tensors and constants are themselves; objects from the frame
// are passed through the graph unchanged, so the caller gets the very same object; containers become Python
// containers, and objects the trace made (instances of user classes, functions, cells) are rebuilt by rebuild.h's
// functions from their final state. A mutable Value reached twice is built once, so aliases stay aliases.
#include <fmt/format.h>

#include "frontend/trace/rebuild.h"
#include "frontend/trace/torch_refs.h"
#include "cpython/gil_once.h"
#include "frontend/trace/tracer.h"
#include "support/pystr.h"

namespace fastcomp::frontend {
namespace {

bool is_mutable_container(const Value& v) {
  return v.is(VKind::List) || v.is(VKind::Dict);
}

}  // namespace

graph::NodeId Tracer::object_input(int source) {
  auto it = object_inputs_.find(source);
  if (it != object_inputs_.end()) return it->second;
  graph::Node node;
  node.kind = graph::NodeKind::Input;
  node.type = graph::ValueType::Other;
  node.input_source = guards_.sources.name(source);
  graph::NodeId id = graph_.add(std::move(node));
  guards_.input_sources.push_back(source);
  object_inputs_.emplace(source, id);
  return id;
}

void Tracer::begin_outputs(const std::vector<ValueRef>& roots) {
  output_refs_.clear();
  output_memo_.clear();
  std::function<void(const ValueRef&)> count = [&](const ValueRef& v) {
    if (!v) return;
    if (v->source >= 0) return;  // passed through as the object itself
    if (is_mutable_container(*v) || v->is(VKind::UserObject) || v->is(VKind::Function) || v->is(VKind::Cell) ||
        v->is(VKind::Set)) {
      if (output_refs_[v.get()]++ > 0) return;
    }
    for (const ValueRef& item : v->items) count(item);
    if (v->is(VKind::Dict) || v->is(VKind::UserObject)) for (const ValueRef& k : v->keys) count(k);
    if (v->inst_dict) count(v->inst_dict);
    count(v->defaults);
    count(v->kwdefaults);
    count(v->closure);
  };
  for (const ValueRef& r : roots) count(r);
}

graph::Arg Tracer::rebuild_node(PyObject* target, const char* name, std::vector<graph::Arg> args) {
  graph::Node node;
  node.kind = graph::NodeKind::Call;
  node.target = PyRef::borrow(target);
  node.target_name = name;
  node.args = std::move(args);
  node.rebuilds = true;
  return graph::Arg::of_node(graph_.add(std::move(node)));
}

graph::Arg Tracer::to_output_arg(const ValueRef& v) {
  if (v->source >= 0 && !v->is(VKind::Tensor) && !v->is(VKind::Const))
    return graph::Arg::of_node(object_input(v->source));  // the object (a cell too) itself
  // Only Values reachable from the roots are remembered: they outlive the conversion, so their addresses are theirs.
  const bool counted = output_refs_.count(v.get()) > 0;
  auto memo = counted ? output_memo_.find(v.get()) : output_memo_.end();
  if (memo != output_memo_.end()) return memo->second;
  if (!building_.insert(v.get()).second)
    throw Unsupported(BreakCode::UnsupportedValue, "returning " + describe(*v) + ", which contains itself");
  struct Done {
    std::unordered_set<const Value*>& s;
    const Value* v;
    ~Done() { s.erase(v); }
  } done{building_, v.get()};
  graph::Arg out = convert_output(v);
  // Mutable Values reached more than once (and objects the trace made, which are nodes anyway) are built once.
  auto refs = output_refs_.find(v.get());
  if (refs != output_refs_.end() && refs->second > 1 && is_mutable_container(*v) && out.kind != graph::Arg::Kind::Node) {
    const RebuildFunctions& R = rebuild_functions();
    if (v->is(VKind::List)) {
      out = rebuild_node(R.list, "fastcomp.rebuild_list", std::move(out.items));
    } else {
      PyRef keys = PyRef::steal(PyTuple_New(out.keys.size()));
      for (size_t i = 0; i < out.keys.size(); ++i) PyTuple_SET_ITEM(keys.get(), i, out.keys[i].new_ref());
      std::vector<graph::Arg> args{graph::Arg::of_const(keys)};
      for (auto& item : out.items) args.push_back(std::move(item));
      out = rebuild_node(R.dict, "fastcomp.rebuild_dict", std::move(args));
    }
  }
  if (counted) output_memo_.emplace(v.get(), out);
  return out;
}

graph::Arg Tracer::dict_output(const Value& d) {
  graph::Arg a;
  a.kind = graph::Arg::Kind::Dict;
  for (size_t i = 0; i < d.items.size(); ++i) {
    if (d.keys[i]->is(VKind::Const) && d.keys[i]->flag)
      throw Unsupported(BreakCode::UnsupportedValue, "the id() of an object the compiled code makes leaves it");
    PyRef key = as_python_constant(d.keys[i]);
    if (!key) throw Unsupported(BreakCode::UnsupportedValue, "returning a dict whose key is " + describe(*d.keys[i]));
    a.keys.push_back(key);
    a.items.push_back(to_output_arg(d.items[i]));
  }
  return a;
}

graph::Arg Tracer::convert_output(const ValueRef& v) {
  const RebuildFunctions& R = rebuild_functions();
  switch (v->kind) {
    case VKind::Tensor: return graph::Arg::of_node(v->node);
    case VKind::SymInt: return graph::Arg::of_sym(shapes_.resolve(v->sym), PyLong_AsLongLong(v->obj.get()));
    case VKind::Tuple:
    case VKind::List: {
      graph::Arg a;
      a.kind = v->kind == VKind::Tuple ? graph::Arg::Kind::Tuple : graph::Arg::Kind::List;
      for (auto& item : v->items) a.items.push_back(to_output_arg(item));
      if (!v->is(VKind::Tuple) || !v->obj) return a;
      // A torch.Size of sizes read on each call: made by a call at run time.
      return rebuild_node(v->obj.get(), "torch.Size", {std::move(a)});
    }
    case VKind::Dict: return dict_output(*v);
    case VKind::Set: {
      std::vector<graph::Arg> args{graph::Arg::of_const(PyRef::borrow(v->flag ? Py_True : Py_False))};
      for (auto& item : v->items) args.push_back(to_output_arg(item));
      return rebuild_node(R.set, "fastcomp.rebuild_set", std::move(args));
    }
    case VKind::Record: {
      // Rebuilt at run time by calling the class with the fields as keyword arguments (namedtuples accept that;
      // torch.return_types take one sequence).
      graph::Node node;
      node.kind = graph::NodeKind::Call;
      node.target = v->obj;
      node.target_name = utf8(PyRef::steal(PyObject_GetAttrString(v->obj.get(), "__qualname__")).get());
      node.rebuilds = true;
      bool structseq = PyType_Check(v->obj.get()) &&
                       PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(v->obj.get()), &PyTuple_Type) &&
                       !PyObject_HasAttrString(v->obj.get(), "_fields");
      if (structseq) {
        graph::Arg seq;
        seq.kind = graph::Arg::Kind::Tuple;
        for (auto& item : v->items) seq.items.push_back(to_output_arg(item));
        node.args.push_back(std::move(seq));
      } else {
        PyRef names = PyRef::steal(PyTuple_New(v->keys.size()));
        for (size_t i = 0; i < v->keys.size(); ++i) {
          PyTuple_SET_ITEM(names.get(), i, v->keys[i]->obj.new_ref());
          node.kwargs.push_back(to_output_arg(v->items[i]));
        }
        node.kwnames = names;
      }
      return graph::Arg::of_node(graph_.add(std::move(node)));
    }
    case VKind::UserObject: {
      graph::Arg attrs = v->inst_dict ? dict_output(*v->inst_dict) : dict_output(Value{VKind::Dict});
      graph::Arg items = graph::Arg::of_const(PyRef::borrow(Py_None));
      if (PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(v->obj.get()), &PyDict_Type)) items = dict_output(*v);
      return rebuild_node(R.object, "fastcomp.rebuild_object",
                          {graph::Arg::of_const(v->obj), std::move(attrs), std::move(items)});
    }
    case VKind::Cell: {
      if (!v->items[0]) return rebuild_node(R.cell, "fastcomp.rebuild_cell", {});
      return rebuild_node(R.cell, "fastcomp.rebuild_cell", {to_output_arg(v->items[0])});
    }
    case VKind::Function: {
      auto none = [] { return graph::Arg::of_const(PyRef::borrow(Py_None)); };
      std::vector<graph::Arg> args{graph::Arg::of_const(v->obj), graph::Arg::of_const(v->globals),
                                   v->defaults ? to_output_arg(v->defaults) : none(),
                                   v->kwdefaults ? to_output_arg(v->kwdefaults) : none(),
                                   v->closure ? to_output_arg(v->closure) : none(),
                                   v->inst_dict ? dict_output(*v->inst_dict) : dict_output(Value{VKind::Dict})};
      return rebuild_node(R.function, "fastcomp.rebuild_function", std::move(args));
    }
    case VKind::Method: {
      const ValueRef& self = v->items[0];
      if (v->obj) {
        // The function the trace bound (through super() or a descriptor, maybe not what getattr finds), bound again.
        static PyObject* method_type = reinterpret_cast<PyObject*>(&PyMethod_Type);
        return rebuild_node(method_type, "types.MethodType", {graph::Arg::of_const(v->obj), to_output_arg(self)});
      }
      // A container's method, looked up by name: getattr(self, name) at run time.
      std::string name = v->name.substr(v->name.rfind('.') + 1);  // Method names may be qualified (Tensor.item)
      return rebuild_node(torch_refs().builtin_getattr.get(), "getattr",
                          {to_output_arg(self), graph::Arg::of_const(PyRef::steal(PyUnicode_FromString(name.c_str())))});
    }
    case VKind::Partial: {
      static cpython::GilOnce<PyObject> partial_type;
      PyObject* partial = partial_type.get([] { return cpython::import_attr("functools", "partial"); });
      if (!partial) throw Unsupported(BreakCode::Other, "fastcomp internal error: functools.partial is missing");
      graph::Node node;
      node.kind = graph::NodeKind::Call;
      node.target = PyRef::borrow(partial);
      node.target_name = "functools.partial";
      node.rebuilds = true;
      node.args.push_back(to_output_arg(v->items[0]));
      for (auto& a : v->items[1]->items) node.args.push_back(to_output_arg(a));
      const Value& kw = *v->items[2];
      PyRef names = PyRef::steal(PyTuple_New(kw.keys.size()));
      for (size_t i = 0; i < kw.keys.size(); ++i) {
        PyTuple_SET_ITEM(names.get(), i, kw.keys[i]->obj.new_ref());
        node.kwargs.push_back(to_output_arg(kw.items[i]));
      }
      if (!kw.keys.empty()) node.kwnames = names;
      return graph::Arg::of_node(graph_.add(std::move(node)));
    }
    case VKind::DictView: {
      PyObject* method = _PyType_Lookup(&PyDict_Type, PyRef::steal(PyUnicode_FromString(v->name.c_str())).get());
      return rebuild_node(method, "dict views", {to_output_arg(v->items[0])});
    }
    case VKind::Iterator: return iterator_output(v);
    case VKind::Exception: {
      std::vector<graph::Arg> args;
      for (auto& a : v->items) args.push_back(to_output_arg(a));
      return rebuild_node(v->obj.get(), "exception", std::move(args));
    }
    default: {
      if (v->is(VKind::Const) && v->flag)
        throw Unsupported(BreakCode::UnsupportedValue, "the id() of an object the compiled code makes leaves it");
      if (v->made_in_trace)
        throw Unsupported(BreakCode::UnsupportedValue, describe(*v) + ", made inside the function, leaves the compiled code "
                                                       "(returned, stored, or live across a graph break)");
      PyRef c = as_python_constant(v);
      if (!c) throw Unsupported(BreakCode::UnsupportedValue, "cannot return " + describe(*v) + " from a compiled function");
      return graph::Arg::of_const(c);
    }
  }
}

// An iterator where the trace left it: the same iterator over the same (or rebuilt) container, advanced as far.
graph::Arg Tracer::iterator_output(const ValueRef& it) {
  const RebuildFunctions& R = rebuild_functions();
  auto integer = [](size_t n) { return graph::Arg::of_const(PyRef::steal(PyLong_FromSize_t(n))); };
  auto builtin = [](const char* name) {
    return PyDict_GetItemString(PyEval_GetBuiltins(), name);  // borrowed, lives as long as builtins
  };
  auto subs = [&](size_t from) {
    std::vector<graph::Arg> out;
    for (size_t i = from; i < it->items.size(); ++i) out.push_back(to_output_arg(it->items[i]));
    return out;
  };
  switch (it->iter) {
    case IterKind::Snapshot: {
      graph::Arg rest;
      rest.kind = graph::Arg::Kind::Tuple;
      for (size_t i = it->pos; i < it->items.size(); ++i) rest.items.push_back(to_output_arg(it->items[i]));
      return rebuild_node(R.iter_at, "fastcomp.rebuild_iter_at", {std::move(rest), integer(0)});
    }
    case IterKind::Live: {
      const ValueRef& c = it->items[0];
      if (c->is(VKind::DictView)) {  // iter(d.items()) advanced: the view of the rebuilt dict
        return rebuild_node(R.iter_at, "fastcomp.rebuild_iter_at", {to_output_arg(c), integer(it->pos)});
      }
      return rebuild_node(R.iter_at, "fastcomp.rebuild_iter_at", {to_output_arg(c), integer(it->pos)});
    }
    case IterKind::Map: return rebuild_node(builtin("map"), "map", subs(0));
    case IterKind::Filter: return rebuild_node(builtin("filter"), "filter", subs(0));
    case IterKind::Zip:
      if (it->flag) throw Unsupported(BreakCode::UnsupportedValue, "a zip(strict=True) iterator that outlives the trace");
      return rebuild_node(builtin("zip"), "zip", subs(0));
    case IterKind::Enumerate: return rebuild_node(builtin("enumerate"), "enumerate", {to_output_arg(it->items[0]), integer(it->pos)});
    case IterKind::Chain: {
      static cpython::GilOnce<PyObject> chain_type;
      PyObject* chain = chain_type.get([] { return cpython::import_attr("itertools", "chain"); });
      return rebuild_node(chain, "itertools.chain", subs(it->pos));
    }
    case IterKind::Generator: break;
  }
  throw Unsupported(BreakCode::UnsupportedValue, "a generator paused by the trace (it has no Python form)");
}

}  // namespace fastcomp::frontend
