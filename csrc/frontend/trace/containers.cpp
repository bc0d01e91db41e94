// Methods of lists, tuples, dicts (and instances of dict subclasses made in the trace), sets and dict views, as
// CPython implements them, over Values. Changes to a container from outside the trace are recorded as side effects.
#include <fmt/format.h>

#include "frontend/trace/tracer.h"
#include "support/pystr.h"

namespace fastcomp::frontend {
namespace {

using Kwargs = std::vector<std::pair<std::string, ValueRef>>;

ValueRef none() { return make_const_borrowed(Py_None); }
ValueRef boolean(bool b) { return make_const_borrowed(b ? Py_True : Py_False); }
ValueRef integer(Py_ssize_t n) { return make_const(PyRef::steal(PyLong_FromSsize_t(n))); }

bool dict_like(const Value& v) {
  return v.is(VKind::Dict) ||
         (v.is(VKind::UserObject) && PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(v.obj.get()), &PyDict_Type));
}

void expect_args(const std::string& name, const std::vector<ValueRef>& args, size_t lo, size_t hi) {
  if (args.size() < lo || args.size() > hi)
    throw type_error(fmt::format("{}() takes {} arguments ({} given)", name, lo == hi ? std::to_string(lo)
                                                                          : fmt::format("{} to {}", lo, hi), args.size()));
}

}  // namespace

void Tracer::set_add(const ValueRef& set, const ValueRef& item) {
  if (!set->is(VKind::Set)) throw Unsupported(BreakCode::UnsupportedValue, "add to " + describe(*set));
  if (item->is(VKind::List) || item->is(VKind::Dict) || item->is(VKind::Set))
    throw type_error(fmt::format("unhashable type: '{}'", python_type(*item)->tp_name));
  for (const ValueRef& have : set->items)
    if (same_key(*have, *item)) return;
  set->items.push_back(item);
  if (set->set_order && (!item->is(VKind::Const) || PySet_Add(set->set_order.get(), item->obj.get()) < 0)) {
    PyErr_Clear();
    set->set_order = PyRef();  // an object's or a tensor's hash is its address: no order known at trace time
  }
  note_mutation(set);
}

std::vector<ValueRef> Tracer::members(const ValueRef& v) {
  return v->is(VKind::Set) ? v->items : unpack(v, "combine a set with");  // a set's own: no order needed
}

ValueRef Tracer::new_set(bool frozen) {
  ValueRef s = make_seq(VKind::Set, {});
  s->flag = frozen;
  s->set_order = PyRef::steal(PySet_New(nullptr));
  if (!s->set_order) PyErr_Clear();
  return s;
}

void Tracer::set_update(const ValueRef& set, const ValueRef& items) {
  // From another set CPython merges table to table (set_merge), which can size the table, and so order the items,
  // otherwise than adding them one by one; from any other iterable it adds them one by one.
  PyObject* real = items->is(VKind::Set) ? items->set_order.get()
                   : items->is(VKind::Const) && PyAnySet_Check(items->obj.get()) ? items->obj.get() : nullptr;
  PyRef merged = real ? std::move(set->set_order) : PyRef();  // set aside while the items go in one by one
  for (const ValueRef& item : members(items)) set_add(set, item);
  if (!merged) return;
  if (PyRef r = PyRef::steal(PyObject_CallMethod(merged.get(), "update", "O", real)))
    set->set_order = std::move(merged);
  PyErr_Clear();
}

std::vector<ValueRef> Tracer::set_in_order(const Value& set) {
  if (set.items.size() <= 1) return set.items;
  if (!set.set_order)
    throw Unsupported(BreakCode::UnsupportedValue,
                      "iterating a set of objects or tensors (its order follows their addresses at run time)");
  std::vector<ValueRef> out;
  PyRef it = PyRef::steal(PyObject_GetIter(set.set_order.get()));
  while (PyRef e = it ? PyRef::steal(PyIter_Next(it.get())) : PyRef()) {
    for (const ValueRef& item : set.items)
      if (item->obj.get() == e.get() || same_key(*item, *make_const_borrowed(e.get()))) {
        out.push_back(item);
        break;
      }
  }
  PyErr_Clear();
  if (out.size() != set.items.size())
    throw Unsupported(BreakCode::Other, "fastcomp internal error: a set's order disagrees with its items");
  return out;
}

ValueRef Tracer::container_method(const ValueRef& self, const std::string& name, std::vector<ValueRef>& args,
                                  Kwargs& kwargs) {
  auto mutate = [&] { note_mutation(self); };
  auto no_kwargs = [&] {
    if (!kwargs.empty()) throw type_error(fmt::format("{}() takes no keyword arguments", name));
  };
  const PyTypeObject* type = python_type(*self);
  const std::string owner = type ? type->tp_name : "?";

  if (name == "__len__") {
    expect_args(name, args, 0, 0);
    if (self->is(VKind::DictView)) return integer(self->items[0]->keys.size());
    return integer(dict_like(*self) ? self->keys.size() : self->items.size());
  }
  if (name == "__contains__") {
    expect_args(name, args, 1, 1);
    return compare(-3, args[0], self);
  }
  if (name == "__iter__") {
    expect_args(name, args, 0, 0);
    return make_iter(self, "iterate over");
  }
  // The C-level item methods work on the storage itself: a subclass's Python __getitem__/__setitem__ (which may be
  // what called them, through super()) must not run again.
  if (name == "__getitem__") {
    expect_args(name, args, 1, 1);
    return raw_getitem(self, args[0]);
  }
  if (name == "__setitem__" || name == "__delitem__") {
    expect_args(name, args, name == "__setitem__" ? 2 : 1, name == "__setitem__" ? 2 : 1);
    raw_setitem(self, args[0], name == "__setitem__" ? args[1] : nullptr);
    return none();
  }

  if (self->is(VKind::List)) {
    no_kwargs();
    if (name == "append") {
      expect_args(name, args, 1, 1);
      self->items.push_back(args[0]);
      mutate();
      return none();
    }
    if (name == "extend") {
      expect_args(name, args, 1, 1);
      // Items are taken one by one, so an iterator that reads this list sees the ones appended before it.
      ValueRef it = make_iter(args[0], "extend with");
      while (ValueRef v = iter_next(it)) {
        self->items.push_back(v);
        mutate();
      }
      return none();
    }
    if (name == "insert") {
      expect_args(name, args, 2, 2);
      PyRef i = as_python_constant(args[0]);
      Py_ssize_t n = self->items.size(), at = i ? PyNumber_AsSsize_t(i.get(), nullptr) : 0;
      if (at < 0) at = std::max<Py_ssize_t>(0, at + n);
      self->items.insert(self->items.begin() + std::min(at, n), args[1]);
      mutate();
      return none();
    }
    if (name == "pop") {
      expect_args(name, args, 0, 1);
      if (self->items.empty()) throw index_error("pop from empty list");
      Py_ssize_t n = self->items.size();
      Py_ssize_t at = args.empty() ? -1 : PyNumber_AsSsize_t(as_python_constant(args[0]).get(), nullptr);
      if (at < 0) at += n;
      if (at < 0 || at >= n) throw index_error("pop index out of range");
      ValueRef v = self->items[at];
      self->items.erase(self->items.begin() + at);
      mutate();
      return v;
    }
    if (name == "remove") {
      expect_args(name, args, 1, 1);
      for (size_t i = 0; i < self->items.size(); ++i)
        if (truthiness(compare(static_cast<int>(CompareKind::Eq), self->items[i], args[0]))) {
          self->items.erase(self->items.begin() + i);
          mutate();
          return none();
        }
      throw value_error("list.remove(x): x not in list");
    }
    if (name == "clear") {
      self->items.clear();
      mutate();
      return none();
    }
    if (name == "reverse") {
      std::reverse(self->items.begin(), self->items.end());
      mutate();
      return none();
    }
    if (name == "copy") return make_seq(VKind::List, self->items);
  }

  if (dict_like(*self)) {
    auto find = [&](const ValueRef& key) { return dict_find(*self, *key); };
    if (name == "keys" || name == "values" || name == "items") {
      no_kwargs();
      expect_args(name, args, 0, 0);
      auto view = make_seq(VKind::DictView, {self});
      view->name = name;
      return view;
    }
    if (name == "get") {
      no_kwargs();
      expect_args(name, args, 1, 2);
      int i = find(args[0]);
      return i >= 0 ? self->items[i] : (args.size() > 1 ? args[1] : none());
    }
    if (name == "copy") {
      ValueRef d = make_dict();
      d->keys = self->keys;
      d->items = self->items;
      return d;
    }
    if (name == "pop" || name == "setdefault") {
      no_kwargs();
      expect_args(name, args, 1, 2);
      int i = find(args[0]);
      if (i >= 0) {
        ValueRef v = self->items[i];
        if (name == "pop") {
          self->keys.erase(self->keys.begin() + i);
          self->items.erase(self->items.begin() + i);
          mutate();
        }
        return v;
      }
      if (args.size() < 2 && name == "pop") throw key_error(describe(*args[0]));
      ValueRef dflt = args.size() > 1 ? args[1] : none();
      if (name == "setdefault") {
        self->keys.push_back(args[0]);
        self->items.push_back(dflt);
        mutate();
      }
      return dflt;
    }
    if (name == "popitem") {
      if (self->keys.empty()) throw key_error("popitem(): dictionary is empty");
      ValueRef pair = make_seq(VKind::Tuple, {self->keys.back(), self->items.back()});
      self->keys.pop_back();
      self->items.pop_back();
      mutate();
      return pair;
    }
    if (name == "update") {
      expect_args(name, args, 0, 1);
      auto put = [&](const ValueRef& k, const ValueRef& v) {
        int i = find(k);
        if (i >= 0) self->items[i] = v;
        else {
          self->keys.push_back(k);
          self->items.push_back(v);
        }
      };
      if (!args.empty()) {
        if (dict_like(*args[0])) {
          for (size_t i = 0; i < args[0]->keys.size(); ++i) put(args[0]->keys[i], args[0]->items[i]);
        } else {
          for (const ValueRef& pair : unpack(args[0], "update a dict with")) {
            std::vector<ValueRef> kv = unpack(pair, "unpack");
            if (kv.size() != 2) throw value_error("dictionary update sequence element has length != 2");
            put(kv[0], kv[1]);
          }
        }
      }
      for (auto& [k, v] : kwargs) put(make_const(PyRef::steal(PyUnicode_FromString(k.c_str()))), v);
      mutate();
      return none();
    }
    if (name == "clear") {
      self->keys.clear();
      self->items.clear();
      mutate();
      return none();
    }
    if (name == "move_to_end" && type && PyType_IsSubtype(const_cast<PyTypeObject*>(type), &PyDict_Type) &&
        type != &PyDict_Type) {
      expect_args(name, args, 1, 2);
      int i = find(args[0]);
      if (i < 0) throw key_error(describe(*args[0]));
      bool last = args.size() < 2 || truthiness(args[1]);
      for (auto& [k, v] : kwargs)
        if (k == "last") last = truthiness(v);
      ValueRef k = self->keys[i], v = self->items[i];
      self->keys.erase(self->keys.begin() + i);
      self->items.erase(self->items.begin() + i);
      self->keys.insert(last ? self->keys.end() : self->keys.begin(), k);
      self->items.insert(last ? self->items.end() : self->items.begin(), v);
      mutate();
      return none();
    }
  }

  if (self->is(VKind::Set)) {
    no_kwargs();
    if (name == "add" && !self->flag) {
      expect_args(name, args, 1, 1);
      set_add(self, args[0]);
      return none();
    }
    if ((name == "discard" || name == "remove") && !self->flag) {
      expect_args(name, args, 1, 1);
      for (size_t i = 0; i < self->items.size(); ++i)
        if (same_key(*self->items[i], *args[0])) {
          // CPython leaves a dummy slot: the order after a removal is the real set's after the same removal.
          if (self->set_order && PySet_Discard(self->set_order.get(), self->items[i]->obj.get()) < 0) {
            PyErr_Clear();
            self->set_order = PyRef();
          }
          self->items.erase(self->items.begin() + i);
          mutate();
          return none();
        }
      if (name == "remove") throw key_error(describe(*args[0]));
      return none();
    }
    if (name == "update" && !self->flag) {
      for (const ValueRef& a : args) set_update(self, a);
      return none();
    }
    if (name == "copy") {
      ValueRef s = make_seq(VKind::Set, self->items);
      s->flag = self->flag;
      if (self->set_order) s->set_order = PyRef::steal(PySet_New(self->set_order.get()));  // a copy is a merge
      PyErr_Clear();
      return s;
    }
    auto member = [&](const std::vector<ValueRef>& pool, const ValueRef& item) {
      for (const ValueRef& p : pool)
        if (same_key(*p, *item)) return true;
      return false;
    };
    if (name == "union" || name == "intersection" || name == "difference" || name == "issubset" ||
        name == "issuperset" || name == "isdisjoint") {
      std::vector<ValueRef> out = self->items;
      for (const ValueRef& a : args) {
        std::vector<ValueRef> other = members(a);
        if (name == "issubset" || name == "issuperset" || name == "isdisjoint") {
          const auto& small = name == "issuperset" ? other : self->items;
          const auto& big = name == "issuperset" ? self->items : other;
          bool result = true;
          for (const ValueRef& item : small) {
            bool in = member(big, item);
            if (name == "isdisjoint" ? in : !in) result = false;
          }
          return boolean(result);
        }
        std::vector<ValueRef> next;
        if (name == "union") {
          next = out;
          for (const ValueRef& item : other)
            if (!member(next, item)) next.push_back(item);
        } else {
          for (const ValueRef& item : out)
            if (member(other, item) == (name == "intersection")) next.push_back(item);
        }
        out = std::move(next);
      }
      ValueRef s = make_seq(VKind::Set, std::move(out));
      s->flag = self->flag;
      // The same method on the real sets orders the result as CPython does (other arguments as constants).
      PyRef order = self->set_order ? PyRef::steal(PyObject_GetAttrString(self->set_order.get(), name.c_str())) : PyRef();
      PyRef real_args = PyRef::steal(PyTuple_New(args.size()));
      for (size_t i = 0; order && i < args.size(); ++i) {
        PyRef r = args[i]->is(VKind::Set) ? args[i]->set_order : as_python_constant(args[i]);
        if (!r) order = PyRef();
        else PyTuple_SET_ITEM(real_args.get(), i, r.release());
      }
      if (order) s->set_order = PyRef::steal(PyObject_Call(order.get(), real_args.get(), nullptr));
      if (s->set_order && !PySet_Check(s->set_order.get())) {  // a frozenset's method gives a frozenset
        s->set_order = PyRef::steal(PySet_New(s->set_order.get()));
      }
      PyErr_Clear();
      return s;
    }
  }

  if (self->is(VKind::Tuple) || self->is(VKind::List)) {
    if (name == "index" || name == "count") {
      no_kwargs();
      expect_args(name, args, 1, 3);
      Py_ssize_t count = 0;
      for (size_t i = 0; i < self->items.size(); ++i) {
        const ValueRef& item = self->items[i];
        bool eq = item->is(VKind::Tensor) || args[0]->is(VKind::Tensor)
                      ? item.get() == args[0].get()
                      : truthiness(compare(static_cast<int>(CompareKind::Eq), item, args[0]));
        if (!eq) continue;
        if (name == "index") return integer(static_cast<Py_ssize_t>(i));
        ++count;
      }
      if (name == "index") throw value_error(fmt::format("{}.index(x): x not in {}", owner, owner));
      return integer(count);
    }
  }

  if (self->is(VKind::DictView)) {
    if (name == "isdisjoint") {
      std::vector<ValueRef> mine = unpack(self, "iterate over");
      for (const ValueRef& other : unpack(args.at(0), "iterate over"))
        for (const ValueRef& m : mine)
          if (same_key(*m, *other)) return boolean(false);
      return boolean(true);
    }
  }
  throw Unsupported(BreakCode::UnsupportedCall, fmt::format("method {}() of {}", name, describe(*self)));
}

}  // namespace fastcomp::frontend
