// Arithmetic, comparisons and truth values: folded on constants, recorded as graph nodes on tensors.
#include <fmt/format.h>

#include "cpython/gil_once.h"
#include "frontend/trace/torch_refs.h"
#include "frontend/trace/tracer.h"
#include "support/pystr.h"

namespace fastcomp::frontend {
namespace {

PyObject* operator_module() {  // borrowed, kept for the process
  static cpython::GilOnce<PyObject> module;
  return module.get([] { return PyImport_ImportModule("operator"); });
}

// operator-module functions per NB_* kind (BinaryOpKind order).
PyObject* binary_operator(int kind, std::string* name) {
  static const char* kNames[] = {"add",      "and_",     "floordiv",  "lshift",    "matmul",   "mul",
                                 "mod",      "or_",      "pow",       "rshift",    "sub",      "truediv",
                                 "xor",      "iadd",     "iand",      "ifloordiv", "ilshift",  "imatmul",
                                 "imul",     "imod",     "ior",       "ipow",      "irshift",  "isub",
                                 "itruediv", "ixor"};
  static PyObject* kFns[26] = {};
  if (kind < 0 || kind >= 26) return nullptr;
  if (!kFns[kind]) kFns[kind] = PyObject_GetAttrString(operator_module(), kNames[kind]);
  *name = std::string("operator.") + kNames[kind];
  return kFns[kind];
}

PyObject* operator_fn(const char* fn) {  // borrowed, cached for the process
  PyObject* f = PyObject_GetAttrString(operator_module(), fn);
  Py_XDECREF(f);  // the operator module keeps it alive
  return f;
}

bool contains_tensor(const ValueRef& v) {
  if (v->is(VKind::Tensor)) return true;
  for (const auto& item : v->items)
    if (item && contains_tensor(item)) return true;
  return false;
}

// Calls a Python function on fully-known arguments; a raised exception is the user's error.
ValueRef fold(PyObject* fn, std::initializer_list<PyObject*> args, const char* what) {
  PyRef tuple = PyRef::steal(PyTuple_New(args.size()));
  size_t i = 0;
  for (PyObject* a : args) PyTuple_SET_ITEM(tuple.get(), i++, Py_NewRef(a));
  PyRef out = PyRef::steal(PyObject_Call(fn, tuple.get(), nullptr));
  if (!out) {
    throw UserCodeError(std::string(what) + " raised " + take_error_message());
  }
  return make_const(out);
}

}  // namespace

PyRef Tracer::as_python_constant(const ValueRef& v) {
  switch (v->kind) {
    case VKind::Const:
    case VKind::Object: return v->obj;
    case VKind::SymInt: return specialize_symint(v);
    case VKind::Tuple:
    case VKind::List: {
      PyRef out = PyRef::steal(v->kind == VKind::Tuple ? PyTuple_New(v->items.size()) : PyList_New(v->items.size()));
      for (size_t i = 0; i < v->items.size(); ++i) {
        PyRef item = as_python_constant(v->items[i]);
        if (!item) return {};
        if (v->kind == VKind::Tuple) PyTuple_SET_ITEM(out.get(), i, item.release());
        else PyList_SET_ITEM(out.get(), i, item.release());
      }
      if (v->is(VKind::Tuple) && v->obj) return PyRef::steal(PyObject_CallOneArg(v->obj.get(), out.get()));
      return out;
    }
    case VKind::Dict: {
      PyRef out = PyRef::steal(PyDict_New());
      for (size_t i = 0; i < v->items.size(); ++i) {
        PyRef item = as_python_constant(v->items[i]);
        if (!item) return {};
        PyDict_SetItem(out.get(), v->keys[i]->obj.get(), item.get());
      }
      return out;
    }
    case VKind::Slice: {
      PyRef a = as_python_constant(v->items[0]), b = as_python_constant(v->items[1]),
            c = as_python_constant(v->items[2]);
      if (!a || !b || !c) return {};
      return PyRef::steal(PySlice_New(a.get(), b.get(), c.get()));
    }
    case VKind::Function:
    case VKind::Method:
    case VKind::Record:
    default: return {};
  }
}

ValueRef Tracer::binary_op(int kind, const ValueRef& a, const ValueRef& b) {
  std::string name;
  PyObject* fn = binary_operator(kind, &name);
  if (!fn) throw Unsupported(BreakCode::UnsupportedOpcode, fmt::format("BINARY_OP {}", kind));
  bool inplace = kind >= static_cast<int>(BinaryOpKind::InplaceAdd);
  int plain = inplace ? kind - static_cast<int>(BinaryOpKind::InplaceAdd) : kind;
  // A constant tuple joined with a tuple of sizes or tensors, `(-1,) + x.shape[1:]`, is a tuple of Values.
  auto as_tuple = [](const ValueRef& v) {
    if (!v->is(VKind::Const) || !PyTuple_CheckExact(v->obj.get())) return v;
    std::vector<ValueRef> items;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(v->obj.get()); ++i) items.push_back(make_const_borrowed(PyTuple_GET_ITEM(v->obj.get(), i)));
    return make_seq(VKind::Tuple, std::move(items));
  };
  auto const_tuple = [](const ValueRef& v) { return v->is(VKind::Const) && PyTuple_CheckExact(v->obj.get()); };
  if (plain == static_cast<int>(BinaryOpKind::Add) &&
      ((a->is(VKind::Tuple) && const_tuple(b)) || (b->is(VKind::Tuple) && const_tuple(a))))
    return binary_op(kind, as_tuple(a), as_tuple(b));
  // Sequence arithmetic builds new containers whatever they hold (lists are extended in place by +=, as in Python).
  bool seq_a = a->is(VKind::Tuple) || a->is(VKind::List);
  if (seq_a && plain == static_cast<int>(BinaryOpKind::Add) && b->kind == a->kind) {
    if (inplace && a->is(VKind::List)) {
      a->items.insert(a->items.end(), b->items.begin(), b->items.end());
      note_mutation(a);
      return a;
    }
    std::vector<ValueRef> items = a->items;
    items.insert(items.end(), b->items.begin(), b->items.end());
    ValueRef out = make_seq(a->kind, std::move(items));
    out->obj = a->is(VKind::Tuple) ? a->obj : PyRef();  // torch.Size + tuple is a torch.Size
    return out;
  }
  if (seq_a && inplace && plain == static_cast<int>(BinaryOpKind::Add) && a->is(VKind::List)) {  // list += iterable
    ValueRef it = make_iter(b, "extend a list with");
    while (ValueRef v = iter_next(it)) a->items.push_back(v);
    note_mutation(a);
    return a;
  }
  if (seq_a && plain == static_cast<int>(BinaryOpKind::Multiply) && (b->is(VKind::Const) || b->is(VKind::SymInt))) {
    PyRef n = as_python_constant(b);
    if (!n || !PyLong_Check(n.get())) throw type_error(fmt::format("can't multiply sequence by non-int"));
    std::vector<ValueRef> items;
    for (long r = PyLong_AsLong(n.get()); r > 0; --r) items.insert(items.end(), a->items.begin(), a->items.end());
    if (inplace && a->is(VKind::List)) {
      a->items = std::move(items);
      note_mutation(a);
      return a;
    }
    ValueRef out = make_seq(a->kind, std::move(items));
    out->obj = a->is(VKind::Tuple) ? a->obj : PyRef();  // torch.Size * n is a torch.Size
    return out;
  }
  if (contains_tensor(a) || contains_tensor(b)) {
    if (!(a->is(VKind::Tensor) || b->is(VKind::Tensor)))
      throw Unsupported(BreakCode::UnsupportedValue, fmt::format("{} on {} and {}", name, describe(*a), describe(*b)));
    return call_torch(fn, name, {a, b}, {});
  }
  if (auto sym = sym_binary(kind, a, b)) return *sym;
  PyRef ca = as_python_constant(a), cb = as_python_constant(b);
  if (!ca || !cb)
    throw Unsupported(BreakCode::UnsupportedValue, fmt::format("{} on {} and {}", name, describe(*a), describe(*b)));
  if (a->is(VKind::Object) && !PyType_Check(ca.get()))
    throw Unsupported(BreakCode::UnsupportedValue, fmt::format("{} on {}", name, describe(*a)));
  return fold(fn, {ca.get(), cb.get()}, name.c_str());
}

ValueRef Tracer::compare(int cmp, const ValueRef& a, const ValueRef& b) {
  auto boolean = [](bool x) { return make_const_borrowed(x ? Py_True : Py_False); };
  if (cmp == -1 || cmp == -2) {  // is / is not
    bool same;
    if (a->is(VKind::Tensor) && b->is(VKind::Tensor)) {
      same = a->node == b->node;
      guard_same_object(a->source, b->source, same);
    } else if (a->is(VKind::Tensor) || b->is(VKind::Tensor)) {
      same = false;
    } else if ((a->is(VKind::Const) || a->is(VKind::Object)) && (b->is(VKind::Const) || b->is(VKind::Object))) {
      same = a->obj.get() == b->obj.get();
    } else {
      same = a.get() == b.get();
    }
    return boolean(same == (cmp == -1));
  }
  if (cmp == -3 || cmp == -4) return boolean(contains(b, a) == (cmp == -3));  // `a in b` / `a not in b`
  static const char* kNames[] = {"lt", "le", "eq", "ne", "gt", "ge"};
  if (a->is(VKind::Tensor) || b->is(VKind::Tensor))
    return call_torch(operator_fn(kNames[cmp]), std::string("operator.") + kNames[cmp], {a, b}, {});
  if (auto sym = sym_compare(cmp, a, b)) return *sym;
  PyRef ca = as_python_constant(a), cb = as_python_constant(b);
  if (!ca || !cb)
    throw Unsupported(BreakCode::UnsupportedValue, fmt::format("comparison of {} and {}", describe(*a), describe(*b)));
  return fold(operator_fn(kNames[cmp]), {ca.get(), cb.get()}, "comparison");
}

bool Tracer::contains(const ValueRef& container, const ValueRef& needle) {
  const ValueRef& b = container;
  auto dict_like = [](const Value& v) {
    return v.is(VKind::Dict) ||
           (v.is(VKind::UserObject) && PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(v.obj.get()), &PyDict_Type));
  };
  if (b->is(VKind::UserObject) || (b->is(VKind::Object) && !PyType_Check(b->obj.get()))) {
    PyTypeObject* type = python_type(*b);
    PyObject* fn = _PyType_Lookup(type, PyRef::steal(PyUnicode_InternFromString("__contains__")).get());
    if (fn && PyFunction_Check(fn)) {
      note_class_read(type);
      return truthiness(inline_function(fn, nullptr, {b, needle}, {}));
    }
  }
  if (is_frozen(*b)) {
    PyRef n = as_python_constant(needle);
    if (!n || !(needle->is(VKind::Const) || is_frozen(*needle)))
      throw Unsupported(BreakCode::UnsupportedValue, "`in` test of " + describe(*needle) + " in a frozen value");
    return frozen_op("in", b, [&](PyObject* x) {
             int r = PySequence_Contains(x, n.get());
             return r < 0 ? nullptr : PyBool_FromLong(r);
           })->obj.get() == Py_True;
  }
  if (b->is(VKind::Object) && PyDict_Check(b->obj.get())) return dict_find(*dict_contents(b), *needle) >= 0;
  if (dict_like(*b)) return dict_find(*b, *needle) >= 0;
  if (b->is(VKind::Set)) {
    for (const ValueRef& item : b->items)
      if (same_key(*item, *needle)) return true;
    return false;
  }
  if (b->is(VKind::DictView) && b->name == "keys") return dict_find(*b->items[0], *needle) >= 0;
  if (b->is(VKind::Tuple) || b->is(VKind::List) || b->is(VKind::DictView) || b->is(VKind::Iterator) ||
      b->is(VKind::Record)) {
    // Python's `x in seq`: identity first, then ==, element by element.
    for (const ValueRef& item : unpack(b, "search")) {
      if (item.get() == needle.get()) return true;
      if ((item->is(VKind::Const) || item->is(VKind::Object)) && (needle->is(VKind::Const) || needle->is(VKind::Object))) {
        if (item->obj.get() == needle->obj.get()) return true;
      }
      if (item->is(VKind::Tensor) && needle->is(VKind::Tensor) && item->node == needle->node) return true;
      if (item->is(VKind::Tensor) || needle->is(VKind::Tensor)) {
        if (item->is(VKind::Tensor) && needle->is(VKind::Tensor))
          throw Unsupported(BreakCode::DataDependentBranch, "`in` test of a tensor among tensors (compares values)");
        continue;  // a tensor never equals a non-tensor element without its values deciding
      }
      if (truthiness(compare(static_cast<int>(CompareKind::Eq), item, needle))) return true;
    }
    return false;
  }
  if (b->is(VKind::Tensor)) throw Unsupported(BreakCode::DataDependentBranch, "`in` test on a tensor's values");
  PyRef c = as_python_constant(b), n = as_python_constant(needle);
  auto answer = [&](int r) {  // r from PySequence_Contains: an error (an unhashable key) is eager's
    if (r < 0) {
      bool te = PyErr_ExceptionMatches(PyExc_TypeError);
      std::string msg = take_error_message();
      throw UserCodeError(msg, te ? PyExc_TypeError : nullptr);
    }
    return r == 1;
  };
  if (b->is(VKind::Object) && PyAnySet_CheckExact(b->obj.get()) && b->source >= 0 && n && needle->is(VKind::Const)) {
    // A set read from the frame (a module's _non_persistent_buffers_set): the answer is guarded, not its contents,
    // and the guard is checked on every call (a set changes without any dict version changing: guard_memo.h).
    bool has = answer(PySet_Contains(b->obj.get(), n.get()));
    guard(GuardKind::SetHas, b->source, n.get());
    guards_.guards.back().length = has;
    return has;
  }
  if (!c || !n || b->is(VKind::Object) || needle->is(VKind::Tensor))
    throw Unsupported(BreakCode::UnsupportedValue, "`in` test on " + describe(*b));
  return answer(PySequence_Contains(c.get(), n.get()));
}

ValueRef Tracer::unary(Op op, const ValueRef& a) {
  if (op == Op::UNARY_NOT) return make_const_borrowed(truthiness(a) ? Py_False : Py_True);
  const char* fn = op == Op::UNARY_NEGATIVE ? "neg" : op == Op::UNARY_POSITIVE ? "pos" : "invert";
  if (a->is(VKind::SymInt) && op != Op::UNARY_INVERT)
    return op == Op::UNARY_NEGATIVE ? symint(graph::sym_mul(a->sym, graph::sym_const(-1))) : a;
  if (a->is(VKind::Tensor)) return call_torch(operator_fn(fn), std::string("operator.") + fn, {a}, {});
  PyRef c = as_python_constant(a);
  if (!c || a->is(VKind::Object)) throw Unsupported(BreakCode::UnsupportedValue, std::string("unary ") + fn + " on " + describe(*a));
  return fold(operator_fn(fn), {c.get()}, fn);
}

bool Tracer::truthiness(const ValueRef& v) {
  switch (v->kind) {
    case VKind::Tensor:
      throw Unsupported(BreakCode::DataDependentBranch,
                        "a branch or `and`/`or`/`not` on a tensor's value (bool(tensor))");
    case VKind::Tuple:
    case VKind::List:
    case VKind::Dict: return !v->items.empty();
    case VKind::Const:
    case VKind::Object: {
      int r = PyObject_IsTrue(v->obj.get());
      if (r < 0) {
        PyErr_Clear();
        throw UserCodeError("truth value test raised");
      }
      return r == 1;
    }
    case VKind::Null: throw Unsupported(BreakCode::Other, "fastcomp internal error: truth value of NULL");
    case VKind::SymInt: return sym_truthiness(v);
    default: return true;
  }
}

}  // namespace fastcomp::frontend
