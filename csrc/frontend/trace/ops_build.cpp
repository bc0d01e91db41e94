// Containers: building, unpacking, indexing and the instructions that mutate them.
#include <fmt/format.h>

#include <unordered_map>

#include "frontend/trace/torch_refs.h"
#include "frontend/trace/tracer.h"

namespace fastcomp::frontend {
namespace {

std::vector<ValueRef> module_children(Tracer& t, const ValueRef& module) {
  PyObject** dictptr = _PyObject_GetDictPtr(module->obj.get());
  PyObject* children = dictptr && *dictptr ? PyDict_GetItemString(*dictptr, "_modules") : nullptr;
  if (!children || !PyDict_Check(children)) throw Unsupported(BreakCode::UnsupportedValue, "module without _modules");
  if (module->source >= 0) {
    int slot = t.guards().sources.inst_dict(module->source, PyRef::steal(PyUnicode_FromString("_modules")).get());
    t.guard_length(slot, PyDict_GET_SIZE(children));
  }
  std::vector<ValueRef> out;
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(children, &pos, &key, &value)) {
    if (value == Py_None) continue;
    out.push_back(module->source >= 0
                      ? t.wrap(value, t.guards().sources.module_slot(SourceKind::ModuleChild, module->source, key))
                      : t.wrap_untracked(value));
  }
  return out;
}

// `cls` is one of torch.nn's container classes; looked up once per process (they live forever).
bool is_module_container(PyObject* o, const char* cls) {
  static auto* types = new std::unordered_map<std::string, PyRef>();
  auto it = types->find(cls);
  if (it == types->end()) {
    PyRef nn = PyRef::steal(PyImport_ImportModule("torch.nn"));
    PyRef type = PyRef::steal(nn ? PyObject_GetAttrString(nn.get(), cls) : nullptr);
    if (!type) PyErr_Clear();
    it = types->emplace(cls, type).first;
  }
  return it->second && PyObject_IsInstance(o, it->second.get()) == 1;
}

}  // namespace

std::vector<ValueRef> Tracer::unpack(const ValueRef& v, const char* what) {
  switch (v->kind) {
    case VKind::Tuple:
    case VKind::List:
    case VKind::Record: return v->items;
    case VKind::Dict: return v->keys;
    case VKind::Iterator: {
      std::vector<ValueRef> rest(v->items.begin() + v->pos, v->items.end());
      v->pos = v->items.size();
      return rest;
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
        throw UserCodeError(fmt::format("cannot {} {}", what, describe(*v)));
      }
      std::vector<ValueRef> out;
      while (PyObject* item = PyIter_Next(it.get())) out.push_back(make_const(PyRef::steal(item)));
      if (PyErr_Occurred()) {
        PyErr_Clear();
        throw UserCodeError("iteration raised");
      }
      return out;
    }
    case VKind::Object:
      if (is_module_container(v->obj.get(), "ModuleList") || is_module_container(v->obj.get(), "Sequential"))
        return module_children(*this, v);
      if (is_module_container(v->obj.get(), "ModuleDict")) {
        std::vector<ValueRef> keys;
        PyObject** dictptr = _PyObject_GetDictPtr(v->obj.get());
        PyObject* children = PyDict_GetItemString(*dictptr, "_modules");
        module_children(*this, v);  // guards the length
        PyObject *key, *value;
        Py_ssize_t pos = 0;
        while (PyDict_Next(children, &pos, &key, &value)) keys.push_back(make_const_borrowed(key));
        return keys;
      }
      break;
    default: break;
  }
  throw Unsupported(BreakCode::UnsupportedValue, fmt::format("cannot {} {}", what, describe(*v)));
}

ValueRef Tracer::subscript(const ValueRef& obj, const ValueRef& key) {
  const auto& T = torch_refs();
  if (obj->is(VKind::Tensor)) {
    PyObject* getitem = PyObject_GetAttrString(T.tensor_type.get(), "__getitem__");
    PyRef keep = PyRef::steal(getitem);
    ValueRef k = key;
    if (key->is(VKind::Slice)) {
      PyRef s = as_python_constant(key);
      if (!s) throw Unsupported(BreakCode::UnsupportedValue, "a slice with a tensor bound");
      k = make_const(s);
    }
    return call_torch(getitem, "Tensor.__getitem__", {obj, k}, {});
  }
  PyRef k = as_python_constant(key);
  if (!k) throw Unsupported(BreakCode::UnsupportedValue, "indexing with " + describe(*key));
  switch (obj->kind) {
    case VKind::Tuple:
    case VKind::List:
    case VKind::Record: {
      Py_ssize_t n = obj->items.size();
      if (PySlice_Check(k.get())) {
        Py_ssize_t start, stop, step, len;
        if (PySlice_GetIndicesEx(k.get(), n, &start, &stop, &step, &len) < 0) {
          PyErr_Clear();
          throw UserCodeError("invalid slice");
        }
        std::vector<ValueRef> items;
        for (Py_ssize_t i = 0, j = start; i < len; ++i, j += step) items.push_back(obj->items[j]);
        ValueRef out = make_seq(obj->is(VKind::List) ? VKind::List : VKind::Tuple, std::move(items));
        if (obj->is(VKind::Tuple)) out->obj = obj->obj;  // a slice of a torch.Size is a torch.Size
        return out;
      }
      Py_ssize_t i = PyNumber_AsSsize_t(k.get(), PyExc_IndexError);
      if (i == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        throw UserCodeError("sequence index is not an integer");
      }
      if (i < 0) i += n;
      if (i < 0 || i >= n) throw UserCodeError("index out of range");
      return obj->items[i];
    }
    case VKind::Dict:
      for (size_t i = 0; i < obj->keys.size(); ++i) {
        int eq = PyObject_RichCompareBool(obj->keys[i]->obj.get(), k.get(), Py_EQ);
        if (eq < 0) PyErr_Clear();
        if (eq == 1) return obj->items[i];
      }
      throw UserCodeError("KeyError");
    case VKind::Const: {
      PyRef out = PyRef::steal(PyObject_GetItem(obj->obj.get(), k.get()));
      if (!out) {
        PyErr_Clear();
        throw UserCodeError("indexing raised");
      }
      return make_const(out);
    }
    case VKind::Object: {
      PyObject* o = obj->obj.get();
      if (is_module_container(o, "ModuleList") || is_module_container(o, "Sequential")) {
        std::vector<ValueRef> children = module_children(*this, obj);
        if (PySlice_Check(k.get())) throw Unsupported(BreakCode::UnsupportedValue, "slicing a module container");
        Py_ssize_t i = PyNumber_AsSsize_t(k.get(), PyExc_IndexError);
        if (i < 0) i += children.size();
        if (i < 0 || i >= static_cast<Py_ssize_t>(children.size())) throw UserCodeError("module index out of range");
        return children[i];
      }
      if (is_module_container(o, "ModuleDict")) {
        module_children(*this, obj);
        return get_attr(obj, k.get());
      }
      break;
    }
    default: break;
  }
  throw Unsupported(BreakCode::UnsupportedValue, "indexing " + describe(*obj));
}

void step_build_or_call(Tracer& t, TraceFrame& f, const Instr& in);
void step_call(Tracer& t, TraceFrame& f, const Instr& in);

void step_build_or_call(Tracer& t, TraceFrame& f, const Instr& in) {
  PyCodeObject* code = reinterpret_cast<PyCodeObject*>(f.code.get());
  switch (in.op) {
    case Op::BUILD_TUPLE: t.push(make_seq(VKind::Tuple, t.pop_n(in.arg))); return;
    case Op::BUILD_LIST: t.push(make_seq(VKind::List, t.pop_n(in.arg))); return;
    case Op::LIST_TO_TUPLE: t.push(make_seq(VKind::Tuple, t.pop()->items)); return;
    case Op::BUILD_MAP: {
      std::vector<ValueRef> flat = t.pop_n(2 * in.arg);
      ValueRef d = make_seq(VKind::Dict, {});
      for (int i = 0; i < in.arg; ++i) {
        d->keys.push_back(flat[2 * i]);
        d->items.push_back(flat[2 * i + 1]);
      }
      t.push(d);
      return;
    }
    case Op::BUILD_CONST_KEY_MAP: {
      ValueRef keys = t.pop();
      std::vector<ValueRef> values = t.pop_n(in.arg);
      ValueRef d = make_seq(VKind::Dict, std::move(values));
      d->keys = t.unpack(keys, "unpack");
      t.push(d);
      return;
    }
    case Op::BUILD_SLICE: {
      std::vector<ValueRef> parts = t.pop_n(in.arg);
      if (parts.size() == 2) parts.push_back(make_const_borrowed(Py_None));
      ValueRef s = make_seq(VKind::Slice, parts);
      PyRef c = t.as_python_constant(s);
      t.push(c ? make_const(c) : s);
      return;
    }
    case Op::BUILD_STRING: {
      std::vector<ValueRef> parts = t.pop_n(in.arg);
      PyRef out = PyRef::steal(PyUnicode_FromString(""));
      for (auto& p : parts) {
        if (!p->is(VKind::Const) || !PyUnicode_Check(p->obj.get()))
          throw Unsupported(BreakCode::UnsupportedValue, "string building with " + describe(*p));
        out = PyRef::steal(PyUnicode_Concat(out.get(), p->obj.get()));
      }
      t.push(make_const(out));
      return;
    }
    case Op::FORMAT_VALUE: {
      ValueRef spec = (in.arg & 0x04) ? t.pop() : nullptr;
      ValueRef v = t.pop();
      PyRef c = t.as_python_constant(v);
      if (!c || v->is(VKind::Object)) throw Unsupported(BreakCode::UnsupportedValue, "formatting " + describe(*v));
      int conv = in.arg & 0x03;
      if (conv == 1) c = PyRef::steal(PyObject_Str(c.get()));
      else if (conv == 2) c = PyRef::steal(PyObject_Repr(c.get()));
      else if (conv == 3) c = PyRef::steal(PyObject_ASCII(c.get()));
      PyRef out = PyRef::steal(PyObject_Format(c.get(), spec ? spec->obj.get() : nullptr));
      if (!out) {
        PyErr_Clear();
        throw UserCodeError("formatting raised");
      }
      t.push(make_const(out));
      return;
    }
    case Op::LIST_APPEND: {
      ValueRef v = t.pop();
      t.top(in.arg)->items.push_back(v);
      return;
    }
    case Op::LIST_EXTEND: {
      ValueRef seq = t.pop();
      std::vector<ValueRef> items = t.unpack(seq, "unpack");
      auto& list = t.top(in.arg)->items;
      list.insert(list.end(), items.begin(), items.end());
      return;
    }
    case Op::MAP_ADD: {
      ValueRef value = t.pop();
      ValueRef key = t.pop();
      ValueRef d = t.top(in.arg);
      d->keys.push_back(key);
      d->items.push_back(value);
      return;
    }
    case Op::DICT_UPDATE:
    case Op::DICT_MERGE: {
      ValueRef src = t.pop();
      if (!src->is(VKind::Dict)) throw Unsupported(BreakCode::UnsupportedValue, "** of " + describe(*src));
      ValueRef d = t.top(in.arg);
      d->keys.insert(d->keys.end(), src->keys.begin(), src->keys.end());
      d->items.insert(d->items.end(), src->items.begin(), src->items.end());
      return;
    }
    case Op::UNPACK_SEQUENCE: {
      std::vector<ValueRef> items = t.unpack(t.pop(), "unpack");
      if (static_cast<int>(items.size()) != in.arg)
        throw UserCodeError(fmt::format("expected {} values to unpack, got {}", in.arg, items.size()));
      for (auto it = items.rbegin(); it != items.rend(); ++it) t.push(*it);
      return;
    }
    case Op::UNPACK_EX: {
      int before = in.arg & 0xff, after = in.arg >> 8;
      std::vector<ValueRef> items = t.unpack(t.pop(), "unpack");
      if (static_cast<int>(items.size()) < before + after) throw UserCodeError("not enough values to unpack");
      std::vector<ValueRef> middle(items.begin() + before, items.end() - after);
      for (int i = 0; i < after; ++i) t.push(items[items.size() - 1 - i]);
      t.push(make_seq(VKind::List, std::move(middle)));
      for (int i = before - 1; i >= 0; --i) t.push(items[i]);
      return;
    }
    case Op::STORE_SUBSCR: {
      ValueRef key = t.pop();
      ValueRef container = t.pop();
      ValueRef value = t.pop();
      if (container->is(VKind::Tensor)) {
        PyRef k = key->is(VKind::Slice) ? t.as_python_constant(key) : PyRef();
        t.call_torch(torch_refs().setitem.get(), "operator.setitem", {container, k ? make_const(k) : key, value}, {});
        return;
      }
      if (container->source >= 0)
        throw Unsupported(BreakCode::SideEffect, "item assignment into a container passed to the function");
      if (container->is(VKind::Dict)) {
        PyRef k = t.as_python_constant(key);
        for (size_t i = 0; i < container->keys.size(); ++i)
          if (PyObject_RichCompareBool(container->keys[i]->obj.get(), k.get(), Py_EQ) == 1) {
            container->items[i] = value;
            return;
          }
        container->keys.push_back(key);
        container->items.push_back(value);
        return;
      }
      if (container->is(VKind::List)) {
        PyRef k = t.as_python_constant(key);
        Py_ssize_t i = k ? PyNumber_AsSsize_t(k.get(), nullptr) : -1;
        if (i < 0) i += container->items.size();
        if (i < 0 || i >= static_cast<Py_ssize_t>(container->items.size())) throw UserCodeError("index out of range");
        container->items[i] = value;
        return;
      }
      throw Unsupported(BreakCode::UnsupportedValue, "item assignment into " + describe(*container));
    }
    case Op::CALL_INTRINSIC_1:
    case Op::UNSUPPORTED:
    case Op::SET_ADD:
    case Op::SET_UPDATE:
    case Op::BUILD_SET:
      throw Unsupported(BreakCode::UnsupportedOpcode, fmt::format("instruction {} (opcode {})", op_name(in.op), in.raw_opcode));
    default: step_call(t, f, in);
  }
  (void)code;
}

}  // namespace fastcomp::frontend
