// Frozen values: objects a known-pure library function computed at trace time from constants (inspect.signature of
// a function the trace holds), and everything read from them. Nothing mutates them (they exist only inside the
// trace), so their attributes, items, lengths and iteration are read for real, and a result that is a constant
// stays one. Which functions count as pure is a short list of library functions whose result depends only on
// their arguments' identity and code.
#include <fmt/format.h>

#include "frontend/trace/tracer.h"
#include "support/pystr.h"

namespace fastcomp::frontend {
namespace {

// A real object for an argument of a pure function: constants, objects, and functions the trace knows exactly.
PyRef real_argument(const Value& v) {
  switch (v.kind) {
    case VKind::Const:
    case VKind::Object: return v.obj;
    case VKind::Method: {
      if (!v.obj || !PyFunction_Check(v.obj.get())) return {};
      // A bound method's signature is its function's without the first parameter; any object can stand for self.
      PyObject* self = v.items[0]->is(VKind::Object) ? v.items[0]->obj.get() : Py_None;
      return PyRef::steal(PyMethod_New(v.obj.get(), self));
    }
    case VKind::Function: {
      if (v.closure || v.kwdefaults) return {};
      PyRef fn = PyRef::steal(PyFunction_New(v.obj.get(), v.globals.get()));
      if (fn && v.defaults) {
        PyRef defaults = PyRef::steal(PyTuple_New(v.defaults->items.size()));
        for (size_t i = 0; i < v.defaults->items.size(); ++i) {
          const Value& d = *v.defaults->items[i];
          if (!d.is(VKind::Const)) return {};
          PyTuple_SET_ITEM(defaults.get(), i, d.obj.new_ref());
        }
        PyFunction_SetDefaults(fn.get(), defaults.get());
      }
      return fn;
    }
    default: return {};
  }
}

}  // namespace

bool is_pure_library_call(const std::string& qualified_name) {
  static const char* const kPure[] = {"inspect.signature"};
  for (const char* n : kPure)
    if (qualified_name == n) return true;
  return false;
}

ValueRef Tracer::wrap_frozen(PyObject* o) {
  if (is_constant(o)) return make_const_borrowed(o);
  ValueRef v = make_object(PyRef::borrow(o), -1);
  v->flag = true;
  return v;
}

ValueRef Tracer::call_pure(PyObject* fn, const std::string& name, const std::vector<ValueRef>& args,
                           const std::vector<std::pair<std::string, ValueRef>>& kwargs) {
  PyRef argv = PyRef::steal(PyTuple_New(args.size()));
  for (size_t i = 0; i < args.size(); ++i) {
    PyRef a = real_argument(*args[i]);
    if (!a) throw Unsupported(BreakCode::UnsupportedValue, fmt::format("{}() of {}", name, describe(*args[i])));
    PyTuple_SET_ITEM(argv.get(), i, a.release());
  }
  PyRef kw = PyRef::steal(PyDict_New());
  for (const auto& [k, v] : kwargs) {
    PyRef a = real_argument(*v);
    if (!a) throw Unsupported(BreakCode::UnsupportedValue, fmt::format("{}() of {}", name, describe(*v)));
    PyDict_SetItemString(kw.get(), k.c_str(), a.get());
  }
  PyRef out = PyRef::steal(PyObject_Call(fn, argv.get(), kw.get()));
  if (!out) {
    PyObject* type = PyErr_Occurred();
    PyObject* known = type && PyErr_GivenExceptionMatches(type, PyExc_ValueError) ? PyExc_ValueError
                      : type && PyErr_GivenExceptionMatches(type, PyExc_TypeError) ? PyExc_TypeError : nullptr;
    throw UserCodeError(take_error_message(), known);
  }
  return wrap_frozen(out.get());
}

ValueRef Tracer::frozen_op(const char* what, const ValueRef& v, const std::function<PyObject*(PyObject*)>& op) {
  PyRef out = PyRef::steal(op(v->obj.get()));
  if (!out) {
    PyObject* type = PyErr_Occurred();
    PyObject* known = nullptr;
    for (PyObject* t : {PyExc_AttributeError, PyExc_KeyError, PyExc_IndexError, PyExc_TypeError, PyExc_ValueError})
      if (type && PyErr_GivenExceptionMatches(type, t)) known = t;
    throw UserCodeError(fmt::format("{}: {}", what, take_error_message()), known);
  }
  return wrap_frozen(out.get());
}

}  // namespace fastcomp::frontend
