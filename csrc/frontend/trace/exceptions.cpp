// Exceptions inside traced code: `raise`, `try`/`except`/`finally` and `with` blocks that an exception leaves, as
// CPython 3.11+ runs them from the code's exception table. An exception the trace raises (a KeyError from a dict,
// an AttributeError behind getattr's default, a `raise` statement) jumps to the handler that covers the raising
// instruction; only exceptions whose class the trace knows exactly may be caught, so an `except` clause never
// decides on a guess (an exception of unknown class inside a `try` ends the trace there instead).
#include <fmt/format.h>

#include <algorithm>

#include "frontend/trace/tracer.h"
#include "support/pystr.h"

namespace fastcomp::frontend {
namespace {

const ExceptionEntry* handler_for(const InstrStream& s, int instr) {
  for (const ExceptionEntry& e : s.exception_table)
    if (e.start <= instr && instr < e.end) return &e;
  return nullptr;
}

ValueRef exception_value(const UserCodeError& e) {
  if (e.value) return e.value;
  auto v = make_seq(VKind::Exception, {make_const(PyRef::steal(PyUnicode_FromString(e.what())))});
  v->obj = PyRef::borrow(e.type);
  return v;
}

}  // namespace

bool Tracer::inside_catching_try() const {
  for (const TraceFrame* f : frames_) {
    const ExceptionEntry* h = handler_for(*f->instrs, f->pc - 1);
    if (!h || h->target >= static_cast<int>(f->instrs->instrs.size())) continue;
    // A handler that catches starts with PUSH_EXC_INFO; a `with` block's cleanup then calls __exit__
    // (WITH_EXCEPT_START), which is taken not to swallow the error; other handlers (re-raising cleanups) start
    // otherwise.
    const auto& code = f->instrs->instrs;
    if (code[h->target].op != Op::PUSH_EXC_INFO) continue;
    bool with_cleanup = false;
    for (int i = h->target + 1; i < std::min<int>(h->target + 4, code.size()); ++i)
      with_cleanup |= code[i].op == Op::WITH_EXCEPT_START;
    if (!with_cleanup) return true;
  }
  return false;
}

bool Tracer::handle_exception(TraceFrame& f, const UserCodeError& e) {
  const int raising = f.pc - 1;
  const ExceptionEntry* h = handler_for(*f.instrs, raising);
  if (!h) return false;
  if (!e.type)
    throw Unsupported(BreakCode::UnsupportedValue,
                      fmt::format("an exception fastcomp cannot type ({}) inside a try block", e.what()));
  if (f.stack.size() < static_cast<size_t>(h->depth))
    throw Unsupported(BreakCode::Other, "fastcomp internal error: stack below the exception handler's depth");
  f.stack.resize(h->depth);
  if (h->push_lasti) push(make_const(PyRef::steal(PyLong_FromLong(f.instrs->instrs[raising].offset / 2))));
  push(exception_value(e));
  f.pc = h->target;
  return true;
}

[[noreturn]] void Tracer::raise_value(const ValueRef& exc) {
  ValueRef e = exc;
  if (e->is(VKind::Object) && PyType_Check(e->obj.get()) &&
      PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(e->obj.get()), reinterpret_cast<PyTypeObject*>(PyExc_BaseException)))
    e = construct(e, {}, {});
  if (!e->is(VKind::Exception)) throw type_error("exceptions must derive from BaseException");
  std::string message = fmt::format("{}", reinterpret_cast<PyTypeObject*>(e->obj.get())->tp_name);
  if (!e->items.empty()) {
    PyRef first = as_python_constant(e->items[0]);
    if (first) message += ": " + py_str(first.get());
  }
  UserCodeError err(message, e->obj.get());
  err.value = e;
  throw err;
}

void Tracer::step_exception(TraceFrame& f, const Instr& in) {
  switch (in.op) {
    case Op::PUSH_EXC_INFO: {
      ValueRef exc = pop();
      push(f.handling.empty() ? make_const_borrowed(Py_None) : f.handling.back());
      f.handling.push_back(exc);
      push(exc);
      return;
    }
    case Op::POP_EXCEPT:
      pop();  // the exception that was being handled before, restored as sys.exc_info()
      if (!f.handling.empty()) f.handling.pop_back();
      return;
    case Op::CHECK_EXC_MATCH: {
      ValueRef cls = pop();
      const ValueRef& exc = top();
      PyRef c = as_python_constant(cls);
      if (!c || !exc->is(VKind::Exception)) throw Unsupported(BreakCode::UnsupportedValue, "`except` of " + describe(*cls));
      int r = PyObject_IsSubclass(exc->obj.get(), c.get());
      if (r < 0) {
        PyErr_Clear();
        throw type_error("catching classes that do not inherit from BaseException is not allowed");
      }
      push(make_const_borrowed(r ? Py_True : Py_False));
      return;
    }
    case Op::RERAISE: raise_value(pop());
    case Op::RAISE_VARARGS:
      if (in.arg == 0) {
        if (f.handling.empty()) throw UserCodeError("No active exception to reraise", PyExc_RuntimeError);
        raise_value(f.handling.back());
      }
      if (in.arg == 2) pop();  // `raise X from Y`: the cause does not change what is caught
      raise_value(pop());
    case Op::WITH_EXCEPT_START: {
      // __exit__(type, value, traceback) of the `with` block the exception leaves; its result says whether to swallow.
      ValueRef exc = top(1);
      ValueRef exit = top(4);
      ValueRef type = make_object(exc->obj, -1);
      push(call(exit, {type, exc, make_const_borrowed(Py_None)}, {}));
      return;
    }
    default:
      throw Unsupported(BreakCode::UnsupportedOpcode, fmt::format("instruction {}", op_name(in.op)));
  }
}

}  // namespace fastcomp::frontend
