#include "frontend/guards/guards.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "cpython/type_dict.h"
#include "cpython/weakref.h"
#include "frontend/guards/guard_memo.h"
#include "runtime/torch_shim.h"
#include "runtime/torch_state.h"
#include "support/pystr.h"

namespace fastcomp::frontend {
namespace {

PyObject* interned(const char* s) {  // borrowed, immortal for the process
  PyObject* o = PyUnicode_InternFromString(s);
  return o;
}

// Borrowed item of a dict stored in an object's __dict__ under `slot_name` (e.g. "_parameters").
PyObject* module_dict_item(PyObject* module, PyObject* slot_name, PyObject* key) {
  PyObject** dictptr = _PyObject_GetDictPtr(module);
  if (!dictptr || !*dictptr) return nullptr;
  PyObject* slot = PyDict_GetItemWithError(*dictptr, slot_name);
  if (!slot || !PyDict_Check(slot)) return nullptr;
  return PyDict_GetItemWithError(slot, key);
}

// Reads source `s` given its base's value. Returns borrowed or (if `owned` is set) new reference.
PyObject* read_source(const Source& s, PyObject* base, const cpython::FrameView& frame, PyRef* owned) {
  static PyObject* kParameters = interned("_parameters");
  static PyObject* kBuffers = interned("_buffers");
  static PyObject* kModules = interned("_modules");
  switch (s.kind) {
    case SourceKind::Local: return frame.local(s.index);
    case SourceKind::Closure: return frame.local(s.index);
    case SourceKind::ClosureCell: return frame.free_cell(s.index);
    case SourceKind::Global: {
      PyObject* v = PyDict_GetItemWithError(frame.globals(), s.key.get());
      if (!v && !PyErr_Occurred() && PyDict_Check(frame.builtins()))
        v = PyDict_GetItemWithError(frame.builtins(), s.key.get());
      return v;
    }
    case SourceKind::ConstObject: return s.key.get();
    case SourceKind::DictItem:
      return PyDict_Check(base) ? PyDict_GetItemWithError(base, s.key.get()) : nullptr;
    case SourceKind::Attr:
      *owned = PyRef::steal(PyObject_GetAttr(base, s.key.get()));
      return owned->get();
    case SourceKind::InstDict: {
      PyObject** dictptr = _PyObject_GetDictPtr(base);
      return dictptr && *dictptr ? PyDict_GetItemWithError(*dictptr, s.key.get()) : nullptr;
    }
    case SourceKind::ModuleParam: return module_dict_item(base, kParameters, s.key.get());
    case SourceKind::ModuleBuffer: return module_dict_item(base, kBuffers, s.key.get());
    case SourceKind::ModuleChild: return module_dict_item(base, kModules, s.key.get());
    case SourceKind::ClassDictItem: {
      PyObject* dict = PyType_Check(base) ? cpython::type_dict(reinterpret_cast<PyTypeObject*>(base)) : nullptr;
      return dict ? PyDict_GetItemWithError(dict, s.key.get()) : nullptr;
    }
    case SourceKind::CellContents: return PyCell_Check(base) ? PyCell_GET(base) : nullptr;
    case SourceKind::WeakrefReferent: return PyWeakref_CheckRefExact(base) ? cpython::weakref_referent(base) : nullptr;
    case SourceKind::ObjDict: {
      PyObject** dictptr = _PyObject_GetDictPtr(base);
      return dictptr ? *dictptr : nullptr;
    }
    case SourceKind::SeqItem:
      // Tuple subclasses too: the tracer reads a namedtuple's fields from its tuple storage, as this does.
      if (PyTuple_Check(base) && s.index < PyTuple_GET_SIZE(base)) return PyTuple_GET_ITEM(base, s.index);
      if (PyList_CheckExact(base) && s.index < PyList_GET_SIZE(base)) return PyList_GET_ITEM(base, s.index);
      return nullptr;
  }
  return nullptr;
}

// Compares a tuple of Python ints with expected values; returns the first differing index or -1.
int first_mismatch(PyObject* seq, const std::vector<int64_t>& expected, bool* rank_mismatch) {
  Py_ssize_t n = PyTuple_GET_SIZE(seq);
  if (n != static_cast<Py_ssize_t>(expected.size())) {
    *rank_mismatch = true;
    return 0;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    int overflow = 0;
    if (PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(seq, i), &overflow) != expected[i]) return static_cast<int>(i);
  }
  return -1;
}

std::vector<int64_t> to_ints(PyObject* seq) {
  std::vector<int64_t> out;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(seq); ++i) out.push_back(PyLong_AsLongLong(PyTuple_GET_ITEM(seq, i)));
  return out;
}

// Reads tensor metadata through TensorBase's own getset and method descriptors, skipping instance-dict and
// MRO lookups: the type guard has already established that the object is a plain Tensor or Parameter.
struct TensorReader {
  getter dtype = nullptr, shape = nullptr, device = nullptr, requires_grad = nullptr;
  void *dtype_closure = nullptr, *shape_closure = nullptr, *device_closure = nullptr, *requires_grad_closure = nullptr;
  PyObject* stride = nullptr;  // method descriptor, called with the tensor as self

  static const TensorReader& get(PyTypeObject* tensor_type) {
    static TensorReader* r = [&] {
      auto* reader = new TensorReader();
      auto getset = [&](const char* name, getter* fn, void** closure) {
        PyObject* d = _PyType_Lookup(tensor_type, PyRef::steal(PyUnicode_FromString(name)).get());
        if (d && Py_TYPE(d) == &PyGetSetDescr_Type) {
          *fn = reinterpret_cast<PyGetSetDescrObject*>(d)->d_getset->get;
          *closure = reinterpret_cast<PyGetSetDescrObject*>(d)->d_getset->closure;
        }
      };
      getset("dtype", &reader->dtype, &reader->dtype_closure);
      getset("shape", &reader->shape, &reader->shape_closure);
      getset("device", &reader->device, &reader->device_closure);
      getset("requires_grad", &reader->requires_grad, &reader->requires_grad_closure);
      reader->stride = _PyType_Lookup(tensor_type, PyRef::steal(PyUnicode_FromString("stride")).get());
      Py_XINCREF(reader->stride);
      return reader;
    }();
    return *r;
  }
  static PyObject* read(PyObject* t, getter fn, void* closure, const char* name) {  // new reference
    return fn ? fn(t, closure) : PyObject_GetAttrString(t, name);
  }
  PyObject* strides(PyObject* t) const {  // new reference
    return stride ? PyObject_Vectorcall(stride, &t, 1, nullptr) : PyObject_CallMethod(t, "stride", nullptr);
  }
};

// check_tensor's test for a tensor of the guarded type, read through torch's C shim (no torch.Size, stride tuple
// or torch.device made): 1 when it matches, 0 when it does not, -1 when this torch, this guard or this tensor
// cannot be read so. Its answer must be check_tensor's: a tensor it rejects is checked again for the reason.
int shim_tensor_match(PyObject* t, const TensorGuard& g) {
  const runtime::TorchShim* shim = runtime::TorchShim::get();
  if (!shim) return -1;
  if (g.shim_state == 0) {
    g.shim_dtype = shim->dtype_code(g.meta.dtype.get());
    bool known = g.shim_dtype >= 0 && g.meta.strides.size() == g.meta.sizes.size() &&
                 shim->device_code(g.meta.device.get(), &g.shim_device_type, &g.shim_device_index);
    g.shim_state = known ? 1 : -1;
  }
  runtime::ShimTensorMeta m;
  if (g.shim_state < 0 || !shim->read(t, &m) || m.layout != shim->strided_layout()) return -1;
  const auto rank = static_cast<int64_t>(g.meta.sizes.size());
  if (m.ndim != rank || !std::equal(m.sizes, m.sizes + rank, g.meta.sizes.begin()) || m.dtype != g.shim_dtype)
    return 0;
  const TensorReader& r = TensorReader::get(g.type);
  PyRef requires_grad = PyRef::steal(TensorReader::read(t, r.requires_grad, r.requires_grad_closure, "requires_grad"));
  if (!requires_grad) return PyErr_Clear(), -1;
  if ((requires_grad.get() == Py_True) != g.meta.requires_grad) return 0;
  return std::equal(m.strides, m.strides + rank, g.meta.strides.begin()) && m.device_type == g.shim_device_type &&
         m.device_index == g.shim_device_index;
}

// Dynamic shapes: binds the symbols of `g`'s dynamic dimensions to the sizes in `shape` (a tuple of the guard's
// rank), checking their ranges, the sizes seen for the same symbol before, and the static dimensions.
bool bind_sizes(PyObject* shape, const TensorGuard& g, const std::string& name, const GuardSet& set,
                GuardScratch& scratch, std::string* reason) {
  for (size_t d = 0; d < g.dim_symbols.size(); ++d) {
    int overflow = 0;
    int64_t size = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(shape, d), &overflow);
    int s = g.dim_symbols[d];
    if (s < 0) {
      if (size == g.meta.sizes[d]) continue;
      if (reason)
        *reason = fmt::format("tensor '{}' size mismatch at index {}. expected {}, actual {}", name, d, g.meta.sizes[d], size);
      return false;
    }
    const SymbolGuard& sg = set.symbols[s];
    if (scratch.sym_bound[s]) {
      if (size == scratch.sym_values[s]) continue;
      if (reason)
        *reason = fmt::format("tensor '{}' size mismatch at index {}. expected {} (= {} = {}), actual {}", name, d,
                              sg.name, sg.where, scratch.sym_values[s], size);
      return false;
    }
    if (size < sg.min || size > sg.max) {
      if (reason)
        *reason = fmt::format("tensor '{}' size at index {} is {}, outside the range [{}, {}] of {}", name, d, size,
                              sg.min, sg.max == INT64_MAX ? "inf" : std::to_string(sg.max), sg.name);
      return false;
    }
    scratch.sym_values[s] = size;
    scratch.sym_bound[s] = 1;
  }
  return true;
}

// Checks a tensor against its guard, cheapest and likeliest-to-fail properties first. `reason` (nullable) gets
// Dynamo's wording on failure.
bool check_tensor(PyObject* t, const TensorGuard& g, const std::string& name, const GuardSet& set,
                  GuardScratch& scratch, std::string* reason) {
  // The per-call path for static shapes; a failure is checked again below when its reason is asked for.
  if (!reason && g.dim_symbols.empty() && Py_TYPE(t) == g.type) {
    int match = shim_tensor_match(t, g);
    if (match >= 0) return match == 1;
  }
  auto fail = [&](const std::string& what) {
    if (reason) *reason = fmt::format("tensor '{}' {}", name, what);
    return false;
  };
  if (Py_TYPE(t) != g.type)
    return fail(fmt::format("type mismatch. expected {}, actual {}", g.type->tp_name, Py_TYPE(t)->tp_name));
  const TensorReader& r = TensorReader::get(g.type);
  PyRef shape = PyRef::steal(TensorReader::read(t, r.shape, r.shape_closure, "shape"));
  if (!shape || !PyTuple_Check(shape.get())) return fail("has no shape");
  bool rank_mismatch = false;
  int i = -1;
  if (g.dim_symbols.empty()) {
    i = first_mismatch(shape.get(), g.meta.sizes, &rank_mismatch);
  } else if (PyTuple_GET_SIZE(shape.get()) != static_cast<Py_ssize_t>(g.meta.sizes.size())) {
    rank_mismatch = true;
  } else if (!bind_sizes(shape.get(), g, name, set, scratch, reason)) {
    return false;
  }
  if (rank_mismatch)
    return fail(fmt::format("rank mismatch. expected {}, actual {}", g.meta.sizes.size(), PyTuple_GET_SIZE(shape.get())));
  if (i >= 0)
    return fail(fmt::format("size mismatch at index {}. expected {}, actual {}", i, g.meta.sizes[i],
                            to_ints(shape.get())[i]));
  PyRef dtype = PyRef::steal(TensorReader::read(t, r.dtype, r.dtype_closure, "dtype"));
  if (dtype.get() != g.meta.dtype.get())
    return fail(fmt::format("dtype mismatch. expected {}, actual {}", py_str(g.meta.dtype.get()),
                            dtype ? py_str(dtype.get()) : "?"));
  PyRef requires_grad = PyRef::steal(TensorReader::read(t, r.requires_grad, r.requires_grad_closure, "requires_grad"));
  if ((requires_grad.get() == Py_True) != g.meta.requires_grad)
    return fail(fmt::format("requires_grad mismatch. expected requires_grad={}", int(g.meta.requires_grad)));
  PyRef strides = PyRef::steal(r.strides(t));
  if (!strides || !PyTuple_Check(strides.get())) return fail("has no strides");
  std::vector<int64_t> expected_strides;
  if (!g.dim_symbols.empty())
    for (const graph::Sym& e : g.meta.sym_strides) expected_strides.push_back(graph::sym_eval(e, scratch.sym_values));
  const std::vector<int64_t>& want = g.dim_symbols.empty() ? g.meta.strides : expected_strides;
  i = first_mismatch(strides.get(), want, &rank_mismatch);
  if (i >= 0)
    return fail(fmt::format("stride mismatch at index {}. expected {}, actual {}", i, want[i],
                            to_ints(strides.get())[i]));
  PyRef device = PyRef::steal(TensorReader::read(t, r.device, r.device_closure, "device"));
  int same_device = device ? PyObject_RichCompareBool(device.get(), g.meta.device.get(), Py_EQ) : -1;
  if (same_device != 1)
    return fail(fmt::format("device mismatch. expected {}, actual {}", py_str(g.meta.device.get()),
                            device ? py_str(device.get()) : "?"));
  return true;
}

bool check_one(const GuardSet& set, const Guard& g, PyObject* v, GuardScratch& scratch, std::string* reason) {
  const std::string& name = g.source >= 0 ? set.sources.name(g.source) : g.what;
  auto fail = [&](const std::string& text) {
    if (reason) *reason = text;
    return false;
  };
  switch (g.kind) {
    case GuardKind::TypeMatch:
      if (reinterpret_cast<PyObject*>(Py_TYPE(v)) == g.expected.get()) return true;
      return fail(fmt::format("type({}) is {} (expected {})", name, Py_TYPE(v)->tp_name,
                              reinterpret_cast<PyTypeObject*>(g.expected.get())->tp_name));
    case GuardKind::IdMatch:
      if (v == g.expected.get()) return true;
      return fail(fmt::format("{} is not the object seen at compile time (expected {}, got {})", name,
                              py_repr(g.expected.get()), py_repr(v)));
    case GuardKind::ConstEquals: {
      if (v == g.expected.get()) return true;
      int eq = Py_TYPE(v) == Py_TYPE(g.expected.get()) ? PyObject_RichCompareBool(v, g.expected.get(), Py_EQ) : 0;
      if (eq == 1) return true;
      if (eq < 0) PyErr_Clear();
      return fail(fmt::format("{} == {}", name, py_repr(g.expected.get())) +
                  (reason ? fmt::format(" (actual {})", py_repr(v)) : ""));
    }
    case GuardKind::TensorMatch: return check_tensor(v, g.tensor, name, set, scratch, reason);
    case GuardKind::SizeRelation: {
      int64_t a = graph::sym_eval(g.sym_a, scratch.sym_values), b = graph::sym_eval(g.sym_b, scratch.sym_values);
      if (size_cmp_holds(g.cmp, a, b) == (g.expected.get() == Py_True)) return true;
      return fail(fmt::format("size relation {} {} {} is {} (it was {} when traced: {}), with {} = {} and {} = {}",
                              str(g.sym_a), size_cmp_text(g.cmp), str(g.sym_b), size_cmp_holds(g.cmp, a, b) ? "True" : "False",
                              g.expected.get() == Py_True ? "True" : "False", g.what, str(g.sym_a), a, str(g.sym_b), b));
    }
    case GuardKind::Length: {
      Py_ssize_t n = PyDict_CheckExact(v)   ? PyDict_GET_SIZE(v)
                     : PyList_CheckExact(v) ? PyList_GET_SIZE(v)
                     : PyTuple_CheckExact(v) ? PyTuple_GET_SIZE(v)
                                             : PyObject_Length(v);
      if (n == g.length) return true;
      if (n < 0) PyErr_Clear();
      return fail(fmt::format("len({}) == {} (actual {})", name, g.length, n));
    }
    case GuardKind::DictKeys: {
      if (!PyDict_Check(v)) return fail(fmt::format("{} is not a dict", name));
      PyRef keys = PyRef::steal(PySequence_Tuple(PyRef::steal(PyDict_Keys(v)).get()));
      int eq = keys ? PyObject_RichCompareBool(keys.get(), g.expected.get(), Py_EQ) : -1;
      if (eq == 1) return true;
      if (eq < 0) PyErr_Clear();
      return fail(fmt::format("keys of {} == {}", name, py_repr(g.expected.get())));
    }
    case GuardKind::SameObject: {
      bool same = v == scratch.values[g.length];
      if (same == (g.expected.get() == Py_True)) return true;
      return fail(fmt::format("{} {} {}", name, same ? "is now" : "is no longer", set.sources.name(g.length)));
    }
    case GuardKind::TypeVersion: {
      auto* type = reinterpret_cast<PyTypeObject*>(g.expected.get());
      if (type->tp_version_tag == static_cast<unsigned int>(g.length)) return true;
      return fail(fmt::format("class {} changed since it was traced", type->tp_name));
    }
    case GuardKind::DictLacks: {
      if (!PyDict_Check(v)) return fail(fmt::format("{} is not a dict", name));
      int has = PyDict_Contains(v, g.expected.get());
      if (has == 0) return true;
      if (has < 0) PyErr_Clear();
      return fail(fmt::format("{} now has key {}", name, py_repr(g.expected.get())));
    }
    case GuardKind::SetHas: {
      if (!PyAnySet_CheckExact(v)) return fail(fmt::format("{} is not a set", name));
      int has = PySet_Contains(v, g.expected.get());
      if (has >= 0 && has == (g.length != 0)) return true;
      if (has < 0) PyErr_Clear();
      return fail(fmt::format("({} in {}) == {}", py_repr(g.expected.get()), name, g.length != 0 ? "True" : "False"));
    }
    case GuardKind::GlobalState: {
      ProbeState now_state;
      if (g.probe != StateProbe::None && read_state_probe(g.probe, &now_state) && now_state == g.probe_state)
        return true;
      PyRef now = PyRef::steal(PyObject_CallNoArgs(g.call.get()));
      if (!now) {
        PyErr_Clear();
        return fail(fmt::format("{} raised", g.what));
      }
      if (now.get() == g.expected.get()) return true;
      int eq = PyObject_RichCompareBool(now.get(), g.expected.get(), Py_EQ);
      if (eq == 1) return true;
      if (eq < 0) PyErr_Clear();
      return fail(fmt::format("global state changed: {} == {} (actual {})", g.what, py_repr(g.expected.get()),
                              py_repr(now.get())));
    }
  }
  return false;
}

}  // namespace

bool check_guard(const GuardSet& set, const Guard& g, GuardScratch& scratch, std::string* reason) {
  PyObject* v = g.source >= 0 ? scratch.values[g.source] : nullptr;
  if (g.source >= 0 && !v) {
    // An object whose __dict__ does not exist yet lacks every key.
    if (g.kind == GuardKind::DictLacks && set.sources.at(g.source).kind == SourceKind::ObjDict) return true;
    if (reason) *reason = fmt::format("{} is missing", set.sources.name(g.source));
    return false;
  }
  return check_one(set, g, v, scratch, reason);
}

void load_source(const GuardSet& set, const cpython::FrameView& frame, GuardScratch& scratch, int i) {
  const Source& s = set.sources.at(i);
  PyObject* base = s.base >= 0 ? scratch.values[s.base] : nullptr;
  if (s.base >= 0 && !base) {  // base missing: the guard on it reports the failure
    scratch.values[i] = nullptr;
    return;
  }
  PyRef owned;
  PyObject* v = read_source(s, base, frame, &owned);
  if (!v) PyErr_Clear();
  if (owned) scratch.owned.push_back(std::move(owned));
  scratch.values[i] = v;
}

bool make_global_state_guard(PyObject* fn, const char* what, StateProbe probe, Guard* out) {
  Guard g;
  if (read_state_probe(probe, &g.probe_state)) g.probe = probe;
  g.kind = GuardKind::GlobalState;
  g.call = PyRef::borrow(fn);
  g.expected = PyRef::steal(PyObject_CallNoArgs(fn));
  g.what = what;
  if (!g.expected) return PyErr_Clear(), false;
  *out = std::move(g);
  return true;
}

bool read_state_probe(StateProbe probe, ProbeState* out) {
  *out = {};
  if (probe == StateProbe::GradMode) {
    const runtime::TorchShim* shim = runtime::TorchShim::get();
    if (shim) (*out)[0] = shim->grad_mode_enabled();
    return shim != nullptr;
  }
  const runtime::TorchState* state = runtime::TorchState::get();
  if (!state) return false;
  switch (probe) {
    case StateProbe::DefaultDtype: (*out)[0] = static_cast<uint64_t>(state->default_dtype()); return true;
    case StateProbe::LocalDispatchKeys: {
      const runtime::LocalDispatchKeys keys = state->local_dispatch_keys();
      *out = {keys.included, keys.excluded};
      return true;
    }
    case StateProbe::GradMode:
    case StateProbe::None: break;
  }
  return false;
}

void GuardScratch::reset(int nsources, int nsymbols) {
  values.assign(nsources, nullptr);
  sym_values.assign(nsymbols, 0);
  sym_bound.assign(nsymbols, 0);
  owned.clear();
  inputs.clear();
}

bool identity_guards_hold(const GuardSet& set, const cpython::FrameView& frame) {
  for (const Guard& g : set.guards) {
    if (g.kind != GuardKind::IdMatch || g.source < 0) continue;
    const Source& s = set.sources.at(g.source);
    if (s.kind != SourceKind::Local && s.kind != SourceKind::Closure) continue;
    if (frame.local(s.index) != g.expected.get()) return false;
  }
  return true;
}

namespace {

bool check_all(const GuardSet& set, const cpython::FrameView& frame, GuardScratch& scratch,
               std::string* failure_reason) {
  const bool memo = !failure_reason && GuardMemo::worthwhile(set);
  if (memo) {
    const GuardMemo::Verdict verdict = set.memo.get().check(set, frame, scratch);
    if (verdict != GuardMemo::Verdict::Unknown) return verdict == GuardMemo::Verdict::Pass;
  }
  const int n = set.sources.size();
  scratch.reset(n, static_cast<int>(set.symbols.size()));
  // Sources are in dependency order, so one forward pass loads each exactly once.
  for (int i = 0; i < n; ++i) load_source(set, frame, scratch, i);
  for (const Guard& g : set.guards)
    if (!check_guard(set, g, scratch, failure_reason)) return false;
  for (int src : set.input_sources) scratch.inputs.push_back(scratch.values[src]);
  if (memo) set.memo.get().record(set, frame, scratch);
  return true;
}

}  // namespace

bool check_guards(const GuardSet& set, const cpython::FrameView& frame, GuardScratch& scratch,
                  std::string* failure_reason) {
  GuardCheckStats& stats = guard_check_stats();
  if (failure_reason) return check_all(set, frame, scratch, failure_reason);
  ++stats.checks;
  if (!stats.timed) return check_all(set, frame, scratch, nullptr);
  const auto start = std::chrono::steady_clock::now();
  const bool passed = check_all(set, frame, scratch, nullptr);
  stats.check_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
  return passed;
}

std::string GuardSet::describe(const Guard& g) const {
  const std::string name = g.source >= 0 ? sources.name(g.source) : g.what;
  switch (g.kind) {
    case GuardKind::TypeMatch:
      return fmt::format("TYPE_MATCH: type({}) is {}", name, reinterpret_cast<PyTypeObject*>(g.expected.get())->tp_name);
    case GuardKind::IdMatch: return fmt::format("ID_MATCH: {} is {}", name, py_repr(g.expected.get()));
    case GuardKind::ConstEquals: return fmt::format("EQUALS_MATCH: {} == {}", name, py_repr(g.expected.get()));
    case GuardKind::TensorMatch:
      return fmt::format("TENSOR_MATCH: {} is {} {}", name, g.tensor.type->tp_name, g.tensor.meta.to_string());
    case GuardKind::Length: return fmt::format("LENGTH_CHECK: len({}) == {}", name, g.length);
    case GuardKind::DictKeys: return fmt::format("DICT_KEYS: keys of {} == {}", name, py_repr(g.expected.get()));
    case GuardKind::SameObject:
      return fmt::format("ALIASING: ({} is {}) == {}", name, sources.name(g.length), g.expected.get() == Py_True);
    case GuardKind::GlobalState: return fmt::format("GLOBAL_STATE: {} == {}", g.what, py_repr(g.expected.get()));
    case GuardKind::TypeVersion:
      return fmt::format("TYPE_VERSION: class {} unchanged", reinterpret_cast<PyTypeObject*>(g.expected.get())->tp_name);
    case GuardKind::DictLacks: return fmt::format("DICT_LACKS: {} not in {}", py_repr(g.expected.get()), name);
    case GuardKind::SetHas:
      return fmt::format("SET_CONTAINS: ({} in {}) == {}", py_repr(g.expected.get()), name, g.length != 0 ? "True" : "False");
    case GuardKind::SizeRelation:
      return fmt::format("SIZE_RELATION: ({} {} {}) == {}  # {}", str(g.sym_a), size_cmp_text(g.cmp), str(g.sym_b),
                         g.expected.get() == Py_True ? "True" : "False", g.what);
  }
  return "?";
}

const char* size_cmp_text(SizeCmp c) {
  static const char* kText[] = {"<", "<=", "==", "!=", ">", ">="};
  return kText[static_cast<int>(c)];
}

bool size_cmp_holds(SizeCmp c, int64_t a, int64_t b) {
  switch (c) {
    case SizeCmp::Lt: return a < b;
    case SizeCmp::Le: return a <= b;
    case SizeCmp::Eq: return a == b;
    case SizeCmp::Ne: return a != b;
    case SizeCmp::Gt: return a > b;
    case SizeCmp::Ge: return a >= b;
  }
  return false;
}

std::string GuardSet::to_string() const {
  std::string out;
  for (const SymbolGuard& s : symbols)
    out += fmt::format("SYMBOL: {} = {} in [{}, {}]\n", s.name, s.where, s.min, s.max == INT64_MAX ? "inf" : std::to_string(s.max));
  for (const Guard& g : guards) out += describe(g) + "\n";
  return out;
}

}  // namespace fastcomp::frontend
