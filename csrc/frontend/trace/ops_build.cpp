// Containers: building, unpacking, indexing and the instructions that mutate them.
#include <fmt/format.h>

#include <algorithm>

#include <unordered_map>

#include "frontend/trace/torch_refs.h"
#include "frontend/trace/tracer.h"
#include "support/pystr.h"

namespace fastcomp::frontend {
namespace {

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

// The Python method `name` of `type` when it is written in Python (borrowed), else null.
PyObject* python_method(PyTypeObject* type, const char* name) {
  PyObject* fn = _PyType_Lookup(type, PyRef::steal(PyUnicode_InternFromString(name)).get());
  return fn && PyFunction_Check(fn) ? fn : nullptr;
}

bool dict_storage(const Value& v) {
  return v.is(VKind::Dict) ||
         (v.is(VKind::UserObject) && PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(v.obj.get()), &PyDict_Type));
}

// A sequence index as CPython normalises it; throws IndexError/TypeError as CPython would.
Py_ssize_t seq_index(PyObject* k, Py_ssize_t n, const char* what) {
  Py_ssize_t i = PyNumber_AsSsize_t(k, PyExc_IndexError);
  if (i == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    throw type_error(fmt::format("{} indices must be integers or slices", what));
  }
  if (i < 0) i += n;
  if (i < 0 || i >= n) throw index_error(fmt::format("{} index out of range", what));
  return i;
}

}  // namespace

bool Tracer::module_container_items(const ValueRef& module, std::vector<ValueRef>* out) {
  if (!module->is(VKind::Object)) return false;
  PyObject* o = module->obj.get();
  bool keys = is_module_container(o, "ModuleDict");
  if (!keys && !is_module_container(o, "ModuleList") && !is_module_container(o, "Sequential")) return false;
  PyObject** dictptr = _PyObject_GetDictPtr(o);
  PyObject* children = dictptr && *dictptr ? PyDict_GetItemString(*dictptr, "_modules") : nullptr;
  if (!children || !PyDict_Check(children)) throw Unsupported(BreakCode::UnsupportedValue, "module without _modules");
  if (module->source >= 0) {
    int slot = guards_.sources.inst_dict(module->source, PyRef::steal(PyUnicode_FromString("_modules")).get());
    guard(GuardKind::DictKeys, slot, PyRef::steal(PySequence_Tuple(PyRef::steal(PyDict_Keys(children)).get())).get());
  }
  out->clear();
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(children, &pos, &key, &value)) {
    if (value == Py_None) continue;
    if (keys) {
      out->push_back(make_const_borrowed(key));
      continue;
    }
    out->push_back(module->source >= 0 ? wrap(value, guards_.sources.module_slot(SourceKind::ModuleChild, module->source, key))
                                       : wrap_untracked(value));
  }
  return true;
}

ValueRef Tracer::subscript(const ValueRef& obj, const ValueRef& key) {
  const auto& T = torch_refs();
  if (obj->is(VKind::Tensor)) {
    PyObject* getitem = PyObject_GetAttrString(T.tensor_type.get(), "__getitem__");
    PyRef keep = PyRef::steal(getitem);
    return call_torch(getitem, "Tensor.__getitem__", {obj, key}, {});
  }
  if (dict_storage(*obj)) {
    if (obj->is(VKind::UserObject)) {
      PyTypeObject* type = python_type(*obj);
      note_class_read(type);
      if (PyObject* fn = python_method(type, "__getitem__")) return inline_function(fn, nullptr, {obj, key}, {});
    }
    return raw_getitem(obj, key);
  }
  if (is_frozen(*obj)) {
    PyRef k = as_python_constant(key);
    if (!k || !(key->is(VKind::Const) || is_frozen(*key)))
      throw Unsupported(BreakCode::UnsupportedValue, "indexing a frozen value with " + describe(*key));
    return frozen_op("getitem", obj, [&](PyObject* x) { return PyObject_GetItem(x, k.get()); });
  }
  if (obj->is(VKind::UserObject) || (obj->is(VKind::Object) && !PyType_Check(obj->obj.get()))) {
    std::vector<ValueRef> children;
    if (module_container_items(obj, &children)) {
      PyRef k = as_python_constant(key);
      if (!k) throw Unsupported(BreakCode::UnsupportedValue, "indexing a module container with " + describe(*key));
      if (is_module_container(obj->obj.get(), "ModuleDict")) return get_attr(obj, k.get());
      if (PySlice_Check(k.get())) return subscript(make_seq(VKind::List, std::move(children)), key);
      return children[seq_index(k.get(), children.size(), "module")];
    }
    PyTypeObject* type = python_type(*obj);
    note_class_read(type);
    if (PyObject* fn = python_method(type, "__getitem__")) return inline_function(fn, nullptr, {obj, key}, {});
    if (obj->is(VKind::Object) && PyDict_Check(obj->obj.get())) return raw_getitem(obj, key);
    throw Unsupported(BreakCode::UnsupportedValue, "indexing " + describe(*obj));
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
          throw type_error("slice indices must be integers or None or have an __index__ method");
        }
        std::vector<ValueRef> items;
        for (Py_ssize_t i = 0, j = start; i < len; ++i, j += step) items.push_back(obj->items[j]);
        ValueRef out = make_seq(obj->is(VKind::List) ? VKind::List : VKind::Tuple, std::move(items));
        if (obj->is(VKind::Tuple)) out->obj = obj->obj;  // a slice of a torch.Size is a torch.Size
        return out;
      }
      return obj->items[seq_index(k.get(), n, obj->is(VKind::List) ? "list" : "tuple")];
    }
    case VKind::Const:
    case VKind::Object: {
      // Constants (str, bytes, tuples of constants) and classes (typing's Optional[int], tuple[int, ...]).
      PyRef out = PyRef::steal(PyObject_GetItem(obj->obj.get(), k.get()));
      if (!out) {
        PyObject* type = PyErr_Occurred();
        PyObject* known = type && PyErr_GivenExceptionMatches(type, PyExc_IndexError) ? PyExc_IndexError
                          : type && PyErr_GivenExceptionMatches(type, PyExc_KeyError) ? PyExc_KeyError
                          : type && PyErr_GivenExceptionMatches(type, PyExc_TypeError) ? PyExc_TypeError : nullptr;
        throw UserCodeError(take_error_message(), known);
      }
      return wrap_call_result(out.get());
    }
    default: break;
  }
  throw Unsupported(BreakCode::UnsupportedValue, "indexing " + describe(*obj));
}

ValueRef Tracer::raw_getitem(const ValueRef& obj, const ValueRef& key) {
  if (dict_storage(*obj)) {
    int i = dict_find(*obj, *key);
    if (i >= 0) return obj->items[i];
    if (obj->is(VKind::UserObject))  // dict.__getitem__ asks a subclass's __missing__
      if (PyObject* fn = python_method(python_type(*obj), "__missing__")) return inline_function(fn, nullptr, {obj, key}, {});
    throw key_error(describe(*key));
  }
  if (obj->is(VKind::Object) && PyDict_Check(obj->obj.get())) return raw_getitem(dict_contents(obj), key);
  return subscript(obj, key);
}

void Tracer::raw_setitem(const ValueRef& container, const ValueRef& key, const ValueRef& value) {
  if (container->is(VKind::Object) && PyDict_Check(container->obj.get())) return raw_setitem(dict_contents(container), key, value);
  if (!dict_storage(*container) && !container->is(VKind::List))
    throw Unsupported(BreakCode::UnsupportedValue, "item assignment into " + describe(*container));
  if (dict_storage(*container)) {
    int i = dict_find(*container, *key);
    if (value) {
      if (i >= 0) {
        container->items[i] = value;
      } else {
        container->keys.push_back(key);
        container->items.push_back(value);
      }
    } else {
      if (i < 0) throw key_error(describe(*key));
      container->keys.erase(container->keys.begin() + i);
      container->items.erase(container->items.begin() + i);
    }
    note_mutation(container);
    return;
  }
  store_subscript(container, key, value);
}

// A dict subclass instance from the frame (an OrderedDict, a registry class) seen through dict's own methods: its
// items as a Dict Value, read once with its keys guarded; changes to it are written back into the object.
ValueRef Tracer::dict_contents(const ValueRef& obj) {
  auto known = dict_contents_.find(obj.get());
  if (known != dict_contents_.end()) return known->second;
  PyObject* o = obj->obj.get();
  int source = obj->source >= 0 ? obj->source
                                : guards_.sources.const_object(o, fmt::format("<{} at {}>", Py_TYPE(o)->tp_name, static_cast<void*>(o)));
  PyRef keys = PyRef::steal(PySequence_Tuple(PyRef::steal(PyDict_Keys(o)).get()));
  if (obj->source >= 0) guard(GuardKind::DictKeys, source, keys.get());
  ValueRef d = make_dict();
  d->source = source;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(keys.get()); ++i) {
    PyObject* k = PyTuple_GET_ITEM(keys.get(), i);
    d->keys.push_back(dict_key(k));
    PyObject* item = PyDict_GetItem(o, k);
    d->items.push_back(obj->source >= 0 ? wrap(item, guards_.sources.dict_item(source, k)) : wrap_untracked(item));
  }
  dict_contents_.emplace(obj.get(), d);
  return d;
}

void Tracer::store_subscript(const ValueRef& container, const ValueRef& key, const ValueRef& value) {
  if (container->is(VKind::Tensor)) {
    if (!value) throw Unsupported(BreakCode::UnsupportedValue, "deleting items of a tensor");
    PyRef k = key->is(VKind::Slice) ? as_python_constant(key) : PyRef();
    call_torch(torch_refs().setitem.get(), "operator.setitem", {container, k ? make_const(k) : key, value}, {});
    return;
  }
  if (container->is(VKind::UserObject) || container->is(VKind::Object)) {
    PyTypeObject* type = python_type(*container);
    note_class_read(type);
    if (PyObject* fn = python_method(type, value ? "__setitem__" : "__delitem__")) {
      std::vector<ValueRef> args{container, key};
      if (value) args.push_back(value);
      inline_function(fn, nullptr, std::move(args), {});
      return;
    }
  }
  if (dict_storage(*container) || (container->is(VKind::Object) && PyDict_Check(container->obj.get())))
    return raw_setitem(container, key, value);
  if (container->is(VKind::List)) {
    PyRef k = as_python_constant(key);
    if (!k) throw Unsupported(BreakCode::UnsupportedValue, "list index " + describe(*key));
    auto& items = container->items;
    if (PySlice_Check(k.get())) {
      Py_ssize_t start, stop, step, len;
      if (PySlice_GetIndicesEx(k.get(), items.size(), &start, &stop, &step, &len) < 0) {
        PyErr_Clear();
        throw type_error("slice indices must be integers or None or have an __index__ method");
      }
      std::vector<ValueRef> repl = value ? unpack(value, "assign") : std::vector<ValueRef>{};
      if (step == 1) {
        items.erase(items.begin() + start, items.begin() + std::max(start, stop));
        items.insert(items.begin() + start, repl.begin(), repl.end());
      } else {
        if (value && static_cast<Py_ssize_t>(repl.size()) != len)
          throw value_error(fmt::format("attempt to assign sequence of size {} to extended slice of size {}", repl.size(), len));
        if (!value) throw Unsupported(BreakCode::UnsupportedValue, "deleting an extended slice of a list");
        for (Py_ssize_t i = 0, j = start; i < len; ++i, j += step) items[j] = repl[i];
      }
    } else {
      Py_ssize_t i = seq_index(k.get(), items.size(), "list assignment");
      if (value) items[i] = value;
      else items.erase(items.begin() + i);
    }
    note_mutation(container);
    return;
  }
  throw Unsupported(BreakCode::UnsupportedValue, "item assignment into " + describe(*container));
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
      for (int i = 0; i < in.arg; ++i) dict_put(*d, flat[2 * i], flat[2 * i + 1]);  // {"a": 1, "a": 2}: one key
      t.push(d);
      return;
    }
    case Op::BUILD_CONST_KEY_MAP: {
      ValueRef keys = t.pop();
      std::vector<ValueRef> values = t.pop_n(in.arg);
      std::vector<ValueRef> names = t.unpack(keys, "unpack");
      ValueRef d = make_seq(VKind::Dict, {});
      for (size_t i = 0; i < names.size() && i < values.size(); ++i) dict_put(*d, names[i], values[i]);
      t.push(d);
      return;
    }
    case Op::BUILD_SLICE: {
      std::vector<ValueRef> parts = t.pop_n(in.arg);
      if (parts.size() == 2) parts.push_back(make_const_borrowed(Py_None));
      ValueRef s = make_seq(VKind::Slice, parts);
      // A bound computed from sizes stays symbolic until a use needs its value (a tensor slice never does).
      const bool constant = std::all_of(parts.begin(), parts.end(), [](const ValueRef& p) { return p->is(VKind::Const); });
      PyRef c = constant ? t.as_python_constant(s) : PyRef();
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
      dict_put(*t.top(in.arg), key, value);  // a comprehension's repeated key keeps its first place
      return;
    }
    case Op::DICT_UPDATE:
    case Op::DICT_MERGE: {
      ValueRef src = t.pop();
      if (!src->is(VKind::Dict)) throw Unsupported(BreakCode::UnsupportedValue, "** of " + describe(*src));
      ValueRef d = t.top(in.arg);
      for (size_t i = 0; i < src->keys.size(); ++i) {
        // DICT_MERGE builds a call's **kwargs: a keyword given twice is an error there, not an override.
        if (in.op == Op::DICT_MERGE && dict_find(*d, *src->keys[i]) >= 0) {
          PyRef k = t.as_python_constant(src->keys[i]);
          const std::string who = callable_name(*t.top(in.arg + 2));  // the stack is [..., fn, args, kwargs]
          throw type_error(fmt::format("{}{}got multiple values for keyword argument '{}'", who, who.empty() ? "" : "() ",
                                       k ? py_str(k.get()) : "?"));
        }
        dict_put(*d, src->keys[i], src->items[i]);
      }
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
      t.store_subscript(container, key, value);
      return;
    }
    case Op::DELETE_SUBSCR: {
      ValueRef key = t.pop();
      ValueRef container = t.pop();
      t.store_subscript(container, key, nullptr);
      return;
    }
    case Op::STORE_SLICE: {
      ValueRef stop = t.pop();
      ValueRef start = t.pop();
      ValueRef container = t.pop();
      ValueRef value = t.pop();
      t.store_subscript(container, make_seq(VKind::Slice, {start, stop, make_const_borrowed(Py_None)}), value);
      return;
    }
    case Op::BUILD_SET: {
      ValueRef set = t.new_set();
      for (ValueRef& item : t.pop_n(in.arg)) t.set_add(set, item);
      t.push(set);
      return;
    }
    case Op::SET_ADD: {
      ValueRef item = t.pop();
      t.set_add(t.top(in.arg), item);
      return;
    }
    case Op::SET_UPDATE: {
      ValueRef items = t.pop();
      t.set_update(t.top(in.arg), items);
      return;
    }
    case Op::CALL_INTRINSIC_1:
    case Op::UNSUPPORTED:
      throw Unsupported(BreakCode::UnsupportedOpcode, fmt::format("instruction {} (opcode {})", op_name(in.op), in.raw_opcode));
    default: step_call(t, f, in);
  }
  (void)code;
}

}  // namespace fastcomp::frontend
