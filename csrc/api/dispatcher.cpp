#include "api/dispatcher.h"

#include <map>
#include <memory>
#include <string>

#include "cpython/eval_hook.h"
#include "dispatch.h"

namespace fastcomp::api {
namespace {

// Option sets are interned so that a cache lookup compares one integer.
int intern_options(const CompileOptions& o) {
  static std::map<std::string, int> keys;
  auto [it, inserted] = keys.emplace(o.to_string(), static_cast<int>(keys.size()) + 1);
  return it->second;
}

struct Dispatcher {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* fn;        // strong
  PyObject* target;    // strong: the code object compiled
  PyObject* dict;      // __dict__ (functools.update_wrapper writes __wrapped__, __name__, ...)
  PyObject* weakrefs;
  CompileOptions* options;
  bool explain;
};

struct Disabled {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* fn;
  PyObject* dict;
};

PyObject* dispatcher_vectorcall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* d = reinterpret_cast<Dispatcher*>(self);
  DispatchContext ctx;
  ctx.options = d->options;
  ctx.target = reinterpret_cast<PyCodeObject*>(d->target);
  ctx.explain = d->explain;
  ActiveDispatch active(&ctx);
  cpython::HookScope hook;
  return PyObject_Vectorcall(d->fn, args, nargsf, kwnames);
}

PyObject* disabled_vectorcall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  cpython::SuspendHook suspend;
  return PyObject_Vectorcall(reinterpret_cast<Disabled*>(self)->fn, args, nargsf, kwnames);
}

// Binding as a method when stored on a class, like a plain function.
PyObject* bind_get(PyObject* self, PyObject* obj, PyObject*) {
  if (!obj || obj == Py_None) return Py_NewRef(self);
  return PyMethod_New(self, obj);
}

int dispatcher_traverse(PyObject* self, visitproc visit, void* arg) {
  auto* d = reinterpret_cast<Dispatcher*>(self);
  Py_VISIT(d->fn);
  Py_VISIT(d->target);
  Py_VISIT(d->dict);
  return 0;
}

int dispatcher_clear(PyObject* self) {
  auto* d = reinterpret_cast<Dispatcher*>(self);
  Py_CLEAR(d->fn);
  Py_CLEAR(d->target);
  Py_CLEAR(d->dict);
  return 0;
}

void dispatcher_dealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  auto* d = reinterpret_cast<Dispatcher*>(self);
  if (d->weakrefs) PyObject_ClearWeakRefs(self);
  dispatcher_clear(self);
  delete d->options;
  Py_TYPE(self)->tp_free(self);
}

PyObject* dispatcher_repr(PyObject* self) {
  auto* d = reinterpret_cast<Dispatcher*>(self);
  return PyUnicode_FromFormat("<fastcomp compiled %R (%s)>", d->fn, d->options->to_string().c_str());
}

PyObject* dispatcher_get_fn(PyObject* self, void*) { return Py_NewRef(reinterpret_cast<Dispatcher*>(self)->fn); }

// New reference: {"fullgraph", "dynamic", "mode", "backend"} as compiled (mode: the one it runs as).
PyObject* dispatcher_get_options(PyObject* self, void*) {
  const CompileOptions& o = *reinterpret_cast<Dispatcher*>(self)->options;
  PyObject* dynamic = o.dynamic < 0 ? Py_None : o.dynamic ? Py_True : Py_False;
  return Py_BuildValue("{s:O,s:O,s:s,s:s}", "fullgraph", o.fullgraph ? Py_True : Py_False, "dynamic", dynamic, "mode",
                       o.mode.c_str(), "backend", o.backend.c_str());
}

PyGetSetDef dispatcher_getset[] = {
    {"_fn", dispatcher_get_fn, nullptr, "the function or module being compiled", nullptr},
    {"_compile_options", dispatcher_get_options, nullptr, "fullgraph, dynamic, mode and backend as compiled", nullptr},
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

int disabled_traverse(PyObject* self, visitproc visit, void* arg) {
  auto* d = reinterpret_cast<Disabled*>(self);
  Py_VISIT(d->fn);
  Py_VISIT(d->dict);
  return 0;
}

int disabled_clear(PyObject* self) {
  auto* d = reinterpret_cast<Disabled*>(self);
  Py_CLEAR(d->fn);
  Py_CLEAR(d->dict);
  return 0;
}

void disabled_dealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  disabled_clear(self);
  Py_TYPE(self)->tp_free(self);
}

PyObject* disabled_get_fn(PyObject* self, void*) { return Py_NewRef(reinterpret_cast<Disabled*>(self)->fn); }

PyGetSetDef disabled_getset[] = {
    {"_fn", disabled_get_fn, nullptr, "the function that always runs eagerly", nullptr},
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyTypeObject g_dispatcher_type = [] {
  PyTypeObject t{PyVarObject_HEAD_INIT(nullptr, 0)};
  t.tp_name = "fastcomp.CompiledFunction";
  t.tp_basicsize = sizeof(Dispatcher);
  t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL;
  t.tp_vectorcall_offset = offsetof(Dispatcher, vectorcall);
  t.tp_call = PyVectorcall_Call;
  t.tp_dictoffset = offsetof(Dispatcher, dict);
  t.tp_weaklistoffset = offsetof(Dispatcher, weakrefs);
  t.tp_traverse = dispatcher_traverse;
  t.tp_clear = dispatcher_clear;
  t.tp_dealloc = dispatcher_dealloc;
  t.tp_repr = dispatcher_repr;
  t.tp_descr_get = bind_get;
  t.tp_getset = dispatcher_getset;
  t.tp_doc = "A function compiled by fastcomp.compile: call it like the original.";
  return t;
}();

PyTypeObject g_disabled_type = [] {
  PyTypeObject t{PyVarObject_HEAD_INIT(nullptr, 0)};
  t.tp_name = "fastcomp.DisabledFunction";
  t.tp_basicsize = sizeof(Disabled);
  t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL;
  t.tp_vectorcall_offset = offsetof(Disabled, vectorcall);
  t.tp_call = PyVectorcall_Call;
  t.tp_dictoffset = offsetof(Disabled, dict);
  t.tp_traverse = disabled_traverse;
  t.tp_clear = disabled_clear;
  t.tp_dealloc = disabled_dealloc;
  t.tp_descr_get = bind_get;
  t.tp_getset = disabled_getset;
  t.tp_doc = "A function that fastcomp never traces into (fastcomp.disable).";
  return t;
}();

}  // namespace

bool ready_types() { return PyType_Ready(&g_dispatcher_type) == 0 && PyType_Ready(&g_disabled_type) == 0; }

PyTypeObject* dispatcher_type() { return &g_dispatcher_type; }
PyTypeObject* disabled_type() { return &g_disabled_type; }

PyObject* make_dispatcher(PyObject* fn, PyCodeObject* target, CompileOptions options, bool explain) {
  auto* d = PyObject_GC_New(Dispatcher, &g_dispatcher_type);
  if (!d) return nullptr;
  d->vectorcall = dispatcher_vectorcall;
  d->fn = Py_NewRef(fn);
  d->target = Py_NewRef(reinterpret_cast<PyObject*>(target));
  d->dict = nullptr;
  d->weakrefs = nullptr;
  options.key = intern_options(options);
  d->options = new CompileOptions(std::move(options));
  d->explain = explain;
  PyObject_GC_Track(d);
  return reinterpret_cast<PyObject*>(d);
}

PyObject* make_disabled(PyObject* fn) {
  auto* d = PyObject_GC_New(Disabled, &g_disabled_type);
  if (!d) return nullptr;
  d->vectorcall = disabled_vectorcall;
  d->fn = Py_NewRef(fn);
  d->dict = nullptr;
  PyObject_GC_Track(d);
  return reinterpret_cast<PyObject*>(d);
}

}  // namespace fastcomp::api
