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
  if (contains_tensor(a) || contains_tensor(b)) {
    if (!(a->is(VKind::Tensor) || b->is(VKind::Tensor)))
      throw Unsupported(BreakCode::UnsupportedValue, fmt::format("{} on {} and {}", name, describe(*a), describe(*b)));
    return call_torch(fn, name, {a, b}, {});
  }
  if (auto sym = sym_binary(kind, a, b)) return *sym;
  bool inplace = kind >= static_cast<int>(BinaryOpKind::InplaceAdd);
  int plain = inplace ? kind - static_cast<int>(BinaryOpKind::InplaceAdd) : kind;
  // Sequence arithmetic builds new containers (lists are mutated in place by +=, as in Python).
  bool seq_a = a->is(VKind::Tuple) || a->is(VKind::List);
  if (seq_a && plain == static_cast<int>(BinaryOpKind::Add) && (b->is(VKind::Tuple) || b->is(VKind::List))) {
    if (inplace && a->is(VKind::List)) {
      if (a->source >= 0) throw Unsupported(BreakCode::SideEffect, "in-place change of a list passed to the function");
      a->items.insert(a->items.end(), b->items.begin(), b->items.end());
      return a;
    }
    std::vector<ValueRef> items = a->items;
    items.insert(items.end(), b->items.begin(), b->items.end());
    ValueRef out = make_seq(a->kind, std::move(items));
    out->obj = a->is(VKind::Tuple) ? a->obj : PyRef();  // torch.Size + tuple is a torch.Size
    return out;
  }
  if (seq_a && plain == static_cast<int>(BinaryOpKind::Multiply) && b->is(VKind::Const) && PyLong_Check(b->obj.get())) {
    std::vector<ValueRef> items;
    for (long r = PyLong_AsLong(b->obj.get()); r > 0; --r) items.insert(items.end(), a->items.begin(), a->items.end());
    ValueRef out = make_seq(a->kind, std::move(items));
    out->obj = a->is(VKind::Tuple) ? a->obj : PyRef();
    return out;
  }
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
  if (cmp == -3 || cmp == -4) {  // in / not in: `a in b`
    bool found = false;
    if (b->is(VKind::Tuple) || b->is(VKind::List) || b->is(VKind::Dict)) {
      const auto& pool = b->is(VKind::Dict) ? b->keys : b->items;
      PyRef needle = as_python_constant(a);
      if (!needle) throw Unsupported(BreakCode::UnsupportedValue, "`in` test of " + describe(*a));
      for (const auto& item : pool) {
        PyRef c = as_python_constant(item);
        if (!c) continue;  // a tensor never equals a constant key
        int eq = PyObject_RichCompareBool(c.get(), needle.get(), Py_EQ);
        if (eq < 0) PyErr_Clear();
        if (eq == 1) found = true;
      }
    } else {
      PyRef container = as_python_constant(b), needle = as_python_constant(a);
      if (!container || !needle || b->is(VKind::Object))
        throw Unsupported(BreakCode::UnsupportedValue, "`in` test on " + describe(*b));
      int r = PySequence_Contains(container.get(), needle.get());
      if (r < 0) {
        PyErr_Clear();
        throw UserCodeError("`in` test raised");
      }
      found = r == 1;
    }
    return boolean(found == (cmp == -3));
  }
  static const char* kNames[] = {"lt", "le", "eq", "ne", "gt", "ge"};
  if (a->is(VKind::Tensor) || b->is(VKind::Tensor))
    return call_torch(operator_fn(kNames[cmp]), std::string("operator.") + kNames[cmp], {a, b}, {});
  if (auto sym = sym_compare(cmp, a, b)) return *sym;
  PyRef ca = as_python_constant(a), cb = as_python_constant(b);
  if (!ca || !cb)
    throw Unsupported(BreakCode::UnsupportedValue, fmt::format("comparison of {} and {}", describe(*a), describe(*b)));
  return fold(operator_fn(kNames[cmp]), {ca.get(), cb.get()}, "comparison");
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
