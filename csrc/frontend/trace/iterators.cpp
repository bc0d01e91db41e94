// The iterator protocol over Values. Iterators are lazy, as in Python: map() calls its function, a generator runs
// its frame, a list iterator reads the list, only when the next item is asked for, so side effects happen in
// program order (`y.extend(map(lambda i: y[-1] + i, r))` sees each appended item).
#include <fmt/format.h>

#include "frontend/trace/torch_refs.h"
#include "frontend/trace/tracer.h"

namespace fastcomp::frontend {
namespace {

ValueRef make_iterator(IterKind kind, std::vector<ValueRef> items) {
  ValueRef it = make_seq(VKind::Iterator, std::move(items));
  it->iter = kind;
  return it;
}

bool is_dict_like(const Value& v) {
  return v.is(VKind::Dict) ||
         (v.is(VKind::UserObject) && PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(v.obj.get()), &PyDict_Type));
}

}  // namespace

ValueRef Tracer::start_generator(std::shared_ptr<TraceFrame> frame) {
  frame->generator = true;
  ValueRef it = make_iterator(IterKind::Generator, {});
  it->frame = std::move(frame);
  return it;
}

ValueRef Tracer::make_iter(const ValueRef& v, const char* what) {
  switch (v->kind) {
    case VKind::Iterator: return v;
    case VKind::Set: return make_iterator(IterKind::Snapshot, set_in_order(*v));
    case VKind::List:
    case VKind::Tuple:
    case VKind::DictView: return make_iterator(IterKind::Live, {v});
    case VKind::Dict: return make_iterator(IterKind::Live, {v});
    case VKind::Record: return make_iterator(IterKind::Snapshot, v->items);
    case VKind::UserObject:
    case VKind::Object: {
      if (std::vector<ValueRef> children; module_container_items(v, &children))
        return make_iterator(IterKind::Snapshot, std::move(children));
      PyTypeObject* type = python_type(*v);
      PyObject* iter_fn = _PyType_Lookup(type, PyRef::steal(PyUnicode_InternFromString("__iter__")).get());
      if (iter_fn && PyFunction_Check(iter_fn)) {
        note_class_read(type);
        return make_iter(inline_function(iter_fn, nullptr, {v}, {}), what);
      }
      if (is_dict_like(*v)) return make_iterator(IterKind::Live, {v});
      if (v->is(VKind::Object) && PyDict_Check(v->obj.get())) return make_iterator(IterKind::Live, {dict_contents(v)});
      break;
    }
    default: break;
  }
  return make_iterator(IterKind::Snapshot, unpack(v, what));
}

// zip(strict=True) as CPython's zip_next: argument `ended` (0-based) ran out. A later one running out first means it
// is shorter than those before it; the first running out, every other must be exhausted too (each is asked once more,
// as CPython does, so their side effects happen).
void Tracer::check_strict_zip_ended(const Value& zip, size_t ended) {
  auto before = [](size_t i) { return i == 1 ? std::string(" 1") : fmt::format("s 1-{}", i); };
  if (ended > 0)
    throw value_error(fmt::format("zip() argument {} is shorter than argument{}", ended + 1, before(ended)));
  for (size_t i = 1; i < zip.items.size(); ++i)
    if (iter_next(zip.items[i]))
      throw value_error(fmt::format("zip() argument {} is longer than argument{}", i + 1, before(i)));
}

ValueRef Tracer::iter_next(const ValueRef& it) {
  if (!it->is(VKind::Iterator)) throw Unsupported(BreakCode::UnsupportedValue, "next() of " + describe(*it));
  switch (it->iter) {
    case IterKind::Snapshot: return it->pos < it->items.size() ? it->items[it->pos++] : nullptr;
    case IterKind::Live: {
      const ValueRef& c = it->items[0];
      if (c->is(VKind::DictView)) {
        const Value& d = *c->items[0];
        if (it->pos >= d.keys.size()) return nullptr;
        size_t i = it->pos++;
        if (c->name == "keys") return d.keys[i];
        if (c->name == "values") return d.items[i];
        return make_seq(VKind::Tuple, {d.keys[i], d.items[i]});
      }
      const std::vector<ValueRef>& pool = is_dict_like(*c) ? c->keys : c->items;
      return it->pos < pool.size() ? pool[it->pos++] : nullptr;
    }
    case IterKind::Generator: {
      if (!it->frame) return nullptr;
      TraceFrame& f = *it->frame;
      if (f.suspended) {
        f.suspended = false;
        f.stack.push_back(make_const_borrowed(Py_None));  // what the paused `yield` evaluates to
      }
      ValueRef v = run_frame(f);
      if (!f.suspended) {  // it returned: exhausted
        it->frame.reset();
        return nullptr;
      }
      return v;
    }
    case IterKind::Map: {
      std::vector<ValueRef> args;
      for (size_t i = 1; i < it->items.size(); ++i) {
        ValueRef v = iter_next(it->items[i]);
        if (!v) return nullptr;
        args.push_back(std::move(v));
      }
      return call(it->items[0], std::move(args), {});
    }
    case IterKind::Filter:
      while (ValueRef v = iter_next(it->items[1])) {
        const ValueRef& fn = it->items[0];
        bool keep = fn->is(VKind::Const) && fn->obj.get() == Py_None ? truthiness(v) : truthiness(call(fn, {v}, {}));
        if (keep) return v;
      }
      return nullptr;
    case IterKind::Zip: {
      if (it->items.empty()) return nullptr;
      std::vector<ValueRef> row;
      for (size_t i = 0; i < it->items.size(); ++i) {
        ValueRef v = iter_next(it->items[i]);
        if (!v) {
          if (it->flag) check_strict_zip_ended(*it, i);
          return nullptr;
        }
        row.push_back(std::move(v));
      }
      return make_seq(VKind::Tuple, std::move(row));
    }
    case IterKind::Enumerate: {
      ValueRef v = iter_next(it->items[0]);
      if (!v) return nullptr;
      ValueRef count = make_const(PyRef::steal(PyLong_FromSize_t(it->pos++)));
      return make_seq(VKind::Tuple, {count, v});
    }
    case IterKind::Chain:
      while (it->pos < it->items.size()) {
        if (ValueRef v = iter_next(it->items[it->pos])) return v;
        ++it->pos;
      }
      return nullptr;
  }
  return nullptr;
}

std::vector<ValueRef> Tracer::unpack(const ValueRef& v, const char* what) {
  switch (v->kind) {
    case VKind::Tuple:
    case VKind::List:
    case VKind::Record: return v->items;
    case VKind::Set: return set_in_order(*v);
    case VKind::Dict: return v->keys;
    case VKind::Iterator:
    case VKind::DictView:
    case VKind::UserObject: {
      ValueRef it = make_iter(v, what);
      std::vector<ValueRef> out;
      while (ValueRef item = iter_next(it)) out.push_back(std::move(item));
      return out;
    }
    case VKind::Tensor: {
      PyObject* unbind = PyObject_GetAttrString(torch_refs().tensor_type.get(), "unbind");
      PyRef keep = PyRef::steal(unbind);
      return call_torch(unbind, "Tensor.unbind", {v}, {})->items;
    }
    case VKind::Const: {
      PyRef it = PyRef::steal(PyObject_GetIter(v->obj.get()));
      if (!it) {
        PyErr_Clear();
        throw type_error(fmt::format("cannot {} {}", what, describe(*v)));
      }
      std::vector<ValueRef> out;
      while (PyObject* item = PyIter_Next(it.get())) out.push_back(make_const(PyRef::steal(item)));
      if (PyErr_Occurred()) {
        PyErr_Clear();
        throw UserCodeError("iteration raised");
      }
      return out;
    }
    case VKind::Object: {
      if (is_frozen(*v)) {
        ValueRef items = frozen_op("iterate", v, [](PyObject* x) { return PySequence_Tuple(x); });
        std::vector<ValueRef> out;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(items->obj.get()); ++i)
          out.push_back(wrap_frozen(PyTuple_GET_ITEM(items->obj.get(), i)));
        return out;
      }
      if (std::vector<ValueRef> children; module_container_items(v, &children)) return children;
      PyTypeObject* type = python_type(*v);
      PyObject* iter_fn = _PyType_Lookup(type, PyRef::steal(PyUnicode_InternFromString("__iter__")).get());
      if (iter_fn && PyFunction_Check(iter_fn)) {
        ValueRef it = make_iter(v, what);
        std::vector<ValueRef> out;
        while (ValueRef item = iter_next(it)) out.push_back(std::move(item));
        return out;
      }
      break;
    }
    default: break;
  }
  throw Unsupported(BreakCode::UnsupportedValue, fmt::format("cannot {} {}", what, describe(*v)));
}

}  // namespace fastcomp::frontend
