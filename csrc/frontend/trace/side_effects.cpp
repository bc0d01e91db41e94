#include "frontend/trace/side_effects.h"

#include <fmt/format.h>

#include "cpython/gil_once.h"
#include "frontend/trace/tracer.h"
#include "support/pystr.h"

namespace fastcomp::frontend {

std::string describe(const SideEffect& e, const std::string& target) {
  switch (e.kind) {
    case SideEffect::Kind::ReplaceList: return fmt::format("{}[:] = <output {}>", target, e.value);
    case SideEffect::Kind::ReplaceDict: return fmt::format("{} = <output {}> (same dict)", target, e.value);
    case SideEffect::Kind::SetAttr: return fmt::format("{}.{} = <output {}>", target, py_str(e.name.get()), e.value);
    case SideEffect::Kind::DelAttr: return fmt::format("del {}.{}", target, py_str(e.name.get()));
    case SideEffect::Kind::SetCell: return fmt::format("{} (cell) = <output {}>", target, e.value);
    case SideEffect::Kind::Call: return fmt::format("{}(...) after the graph", py_str(e.fn.get()));
  }
  return "?";
}

namespace {

// Empties `target` and fills it from `items` with the C-level methods of its first builtin base, so that an OrderedDict
// keeps its order bookkeeping and a subclass's overrides (which the trace already ran) do not run again.
bool replace_dict(PyObject* target, PyObject* items) {
  if (PyDict_CheckExact(target)) {
    PyDict_Clear(target);
    return PyDict_Update(target, items) == 0;
  }
  PyTypeObject* base = Py_TYPE(target);
  while (base->tp_flags & Py_TPFLAGS_HEAPTYPE) base = base->tp_base;
  PyRef clear = PyRef::steal(PyObject_GetAttrString(reinterpret_cast<PyObject*>(base), "clear"));
  PyRef setitem = PyRef::steal(PyObject_GetAttrString(reinterpret_cast<PyObject*>(base), "__setitem__"));
  if (!clear || !setitem) return false;
  PyRef r = PyRef::steal(PyObject_CallOneArg(clear.get(), target));
  if (!r) return false;
  PyObject *k, *v;
  Py_ssize_t pos = 0;
  while (PyDict_Next(items, &pos, &k, &v)) {
    PyObject* args[] = {target, k, v};
    r = PyRef::steal(PyObject_Vectorcall(setitem.get(), args, 3, nullptr));
    if (!r) return false;
  }
  return true;
}

}  // namespace

bool apply_side_effects(const std::vector<SideEffect>& effects, PyObject* outs, const std::vector<PyObject*>& sources) {
  for (const SideEffect& e : effects) {
    if (e.kind == SideEffect::Kind::Call) {
      std::vector<PyObject*> argv;
      for (int i : e.args) argv.push_back(PyTuple_GET_ITEM(outs, i));
      const size_t nkw = e.kwnames ? PyTuple_GET_SIZE(e.kwnames.get()) : 0;
      PyRef r = PyRef::steal(PyObject_Vectorcall(e.fn.get(), argv.data(), argv.size() - nkw, e.kwnames.get()));
      if (!r) return false;
      continue;
    }
    PyObject* target = sources.at(e.target);
    PyObject* value = e.value >= 0 ? PyTuple_GET_ITEM(outs, e.value) : nullptr;
    if (!target) {
      PyErr_SetString(PyExc_SystemError, "fastcomp: the object a side effect writes to is missing");
      return false;
    }
    switch (e.kind) {
      case SideEffect::Kind::ReplaceList:
        if (PyList_SetSlice(target, 0, PyList_GET_SIZE(target), value) < 0) return false;
        break;
      case SideEffect::Kind::ReplaceDict:
        if (!replace_dict(target, value)) return false;
        break;
      case SideEffect::Kind::SetAttr:
        if (PyObject_GenericSetAttr(target, e.name.get(), value) < 0) return false;
        break;
      case SideEffect::Kind::DelAttr:
        if (PyObject_GenericSetAttr(target, e.name.get(), nullptr) < 0) return false;
        break;
      case SideEffect::Kind::SetCell:
        if (PyCell_Set(target, value) < 0) return false;
        break;
    }
  }
  return true;
}

// warnings.warn and the logging methods of a Logger: their calls cost no graph; they run after it, in program order,
// with the arguments they had (the README's "Logging inside compiled code").
bool Tracer::defer_if_logging(PyObject* fn, const ValueRef& self, const std::string& name, const std::vector<ValueRef>& args,
                              const std::vector<std::pair<std::string, ValueRef>>& kwargs, ValueRef* result) {
  static cpython::GilOnce<PyObject> warn_fn;
  PyObject* warn = warn_fn.get([] { return cpython::import_attr("warnings", "warn"); });
  static cpython::GilOnce<PyObject> logger_cls;
  PyObject* logger_type = logger_cls.get([] { return cpython::import_attr("logging", "Logger"); });
  DeferredCall call;
  if (fn && fn == warn) {
    call.fn = PyRef::borrow(fn);
  } else if (self && self->is(VKind::Object) && logger_type &&
             PyObject_TypeCheck(self->obj.get(), reinterpret_cast<PyTypeObject*>(logger_type))) {
    static const char* const kMethods[] = {"debug", "info", "warning", "warn", "error", "exception", "critical", "log"};
    bool logging_method = false;
    for (const char* m : kMethods) logging_method |= name == m;
    if (!logging_method) return false;
    call.fn = PyRef::steal(PyObject_GetAttrString(self->obj.get(), name.c_str()));  // bound to the logger
    if (!call.fn) return PyErr_Clear(), false;
  } else {
    return false;
  }
  call.args = args;
  call.kwargs = kwargs;
  deferred_calls_.push_back(std::move(call));
  *result = make_const_borrowed(Py_None);
  return true;
}

void Tracer::note_mutation(const ValueRef& v) {
  if (v->source < 0 || v->mutated) return;
  if ((v->is(VKind::List) || v->is(VKind::Dict)) && guards_.sources.at(v->source).kind == SourceKind::ConstObject)
    // Its contents were read without guards (wrap_untracked: a library's table, a memoised function's result), so
    // the next call could find them changed; writing this trace's final contents back would undo that change.
    throw Unsupported(BreakCode::UnsupportedValue,
                      fmt::format("changes {}, a {} the trace read without guards on its contents",
                                  guards_.sources.name(v->source), v->is(VKind::List) ? "list" : "dict"));
  v->mutated = true;
  mutated_.push_back(v);
}

std::vector<SideEffect> Tracer::plan_side_effects(graph::Arg* outputs) {
  std::vector<SideEffect> effects;
  auto push = [&](graph::Arg a) {
    outputs->items.push_back(std::move(a));
    return static_cast<int>(outputs->items.size()) - 1;
  };
  auto output = [&](const ValueRef& v) { return push(to_output_arg(v)); };
  for (const ValueRef& v : mutated_) {
    switch (v->kind) {
      case VKind::List: {  // the new items (the object itself is an input of the graph)
        graph::Arg items;
        items.kind = graph::Arg::Kind::List;
        for (const ValueRef& item : v->items) items.items.push_back(to_output_arg(item));
        effects.push_back({SideEffect::Kind::ReplaceList, v->source, {}, push(std::move(items))});
        break;
      }
      case VKind::Dict:
        effects.push_back({SideEffect::Kind::ReplaceDict, v->source, {}, push(dict_output(*v))});
        break;
      case VKind::Object: {
        if (!v->inst_dict || v->inst_dict_complete) break;  // a complete __dict__ is a Dict of its own
        const Value& d = *v->inst_dict;
        for (size_t i = 0; i < d.keys.size(); ++i) {
          if (d.items[i]->is(VKind::Null)) effects.push_back({SideEffect::Kind::DelAttr, v->source, d.keys[i]->obj, -1});
          else effects.push_back({SideEffect::Kind::SetAttr, v->source, d.keys[i]->obj, output(d.items[i])});
        }
        break;
      }
      case VKind::Cell:
        effects.push_back({SideEffect::Kind::SetCell, v->source, {}, output(v->items[0])});
        break;
      default:
        throw Unsupported(BreakCode::SideEffect, "a change to " + describe(*v) + " that fastcomp cannot replay");
    }
  }
  for (const DeferredCall& c : deferred_calls_) {
    SideEffect e;
    e.kind = SideEffect::Kind::Call;
    e.fn = c.fn;
    for (const ValueRef& a : c.args) e.args.push_back(output(a));
    if (!c.kwargs.empty()) {
      e.kwnames = PyRef::steal(PyTuple_New(c.kwargs.size()));
      for (size_t i = 0; i < c.kwargs.size(); ++i) {
        PyTuple_SET_ITEM(e.kwnames.get(), i, PyUnicode_FromString(c.kwargs[i].first.c_str()));
        e.args.push_back(output(c.kwargs[i].second));
      }
    }
    effects.push_back(std::move(e));
  }
  return effects;
}

}  // namespace fastcomp::frontend
