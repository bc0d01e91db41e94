#include "frontend/trace/side_effects.h"

#include <fmt/format.h>

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

void Tracer::note_mutation(const ValueRef& v) {
  if (v->source < 0 || v->mutated) return;
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
  return effects;
}

}  // namespace fastcomp::frontend
