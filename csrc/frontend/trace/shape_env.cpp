#include "frontend/trace/shape_env.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_set>

#include "frontend/trace/dynamic_memory.h"
#include "support/log.h"

namespace fastcomp::frontend {
namespace {

thread_local std::unordered_set<std::string>* tl_logged = nullptr;  // the active DecisionLogScope's lines

// Logs one decision, unless the active DecisionLogScope has seen the same line (a second trace of the frame).
void log_decision(log::Topic topic, log::Level level, const std::string& text) {
  if (tl_logged && !tl_logged->insert(fmt::format("{}|{}", static_cast<int>(topic), text)).second) return;
  log::emit(topic, level, text);
}

// FC_LOG for the dynamic topic, through log_decision.
#define FC_DECISION(level, ...)                                                                  \
  do {                                                                                           \
    if (::fastcomp::log::enabled(::fastcomp::log::Topic::dynamic, ::fastcomp::log::Level::level)) \
      log_decision(::fastcomp::log::Topic::dynamic, ::fastcomp::log::Level::level, fmt::format(__VA_ARGS__)); \
  } while (0)

// Integer items of an attribute holding a set/list of dimensions (mark_static, torch's _dynamo_*_indices).
std::vector<int> dims_attr(PyObject* tensor, const char* name) {
  std::vector<int> out;
  PyRef v = PyRef::steal(PyObject_GetAttrString(tensor, name));
  if (!v) {
    PyErr_Clear();
    return out;
  }
  PyRef it = PyRef::steal(PyObject_GetIter(v.get()));
  if (!it) {
    PyErr_Clear();
    return out;
  }
  while (PyRef item = PyRef::steal(PyIter_Next(it.get()))) out.push_back(static_cast<int>(PyLong_AsLong(item.get())));
  PyErr_Clear();
  return out;
}

struct Mark {
  bool dynamic = false, is_static = false;
  int64_t min = 0, max = INT64_MAX;
};

// What mark_dynamic / mark_static (fastcomp's or torch._dynamo's) said about dimension `d` of `tensor`.
std::vector<Mark> read_marks(PyObject* tensor, size_t rank) {
  std::vector<Mark> marks(rank);
  for (int d : dims_attr(tensor, "_dynamo_dynamic_indices"))
    if (d >= 0 && d < static_cast<int>(rank)) marks[d].dynamic = true;
  for (int d : dims_attr(tensor, "_dynamo_static_indices"))
    if (d >= 0 && d < static_cast<int>(rank)) marks[d].is_static = true;
  for (int d : dims_attr(tensor, "_fastcomp_static_dims"))
    if (d >= 0 && d < static_cast<int>(rank)) marks[d].is_static = true;
  // fastcomp.mark_dynamic: {dim: (min, max)} with None for an open end.
  PyRef ranges = PyRef::steal(PyObject_GetAttrString(tensor, "_fastcomp_dynamic_dims"));
  if (!ranges || !PyDict_Check(ranges.get())) {
    PyErr_Clear();
    return marks;
  }
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(ranges.get(), &pos, &key, &value)) {
    long d = PyLong_AsLong(key);
    if (d < 0 || d >= static_cast<long>(rank) || !PyTuple_Check(value) || PyTuple_GET_SIZE(value) != 2) continue;
    marks[d].dynamic = true;
    PyObject* lo = PyTuple_GET_ITEM(value, 0);
    PyObject* hi = PyTuple_GET_ITEM(value, 1);
    if (lo != Py_None) marks[d].min = PyLong_AsLongLong(lo);
    if (hi != Py_None) marks[d].max = PyLong_AsLongLong(hi);
  }
  PyErr_Clear();
  return marks;
}

}  // namespace

std::vector<graph::Sym> dense_strides(const std::vector<graph::Sym>& sizes, const std::vector<int64_t>& size_hints,
                                      const std::vector<int64_t>& strides) {
  const size_t n = sizes.size();
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  // Innermost first: smallest stride, ties broken towards the last dimension (torch's contiguous layout).
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (strides[a] != strides[b]) return strides[a] < strides[b];
    return a > b;
  });
  std::vector<graph::Sym> out(n);
  graph::Sym running = graph::sym_const(1);
  int64_t running_hint = 1;
  for (size_t k = 0; k < n; ++k) {
    size_t d = order[k];
    if (strides[d] != running_hint && size_hints[d] != 1) return {};
    out[d] = strides[d] == running_hint ? running : graph::sym_const(strides[d]);
    running = graph::sym_mul(running, sizes[d]);
    running_hint *= size_hints[d];
  }
  return out;
}

DecisionLogScope::DecisionLogScope() : previous_(tl_logged) { tl_logged = &lines_; }
DecisionLogScope::~DecisionLogScope() { tl_logged = previous_; }

std::vector<int> ShapeEnv::input_dims(PyObject* tensor, const std::string& source, bool parameter,
                                      const std::vector<int64_t>& sizes, int input) {
  std::vector<int> dims(sizes.size(), -1);
  std::vector<Mark> marks = read_marks(tensor, sizes.size());
  std::vector<bool> automatic(sizes.size(), false);
  if (mode_ == DynamicMode::Automatic && !parameter && memory_) {
    std::vector<std::string> became;
    automatic = automatic_dynamic_dims(*memory_, code_key_, source, sizes, &became);
    for (const std::string& line : became) {
      log_decision(log::Topic::dynamic, log::Level::info, line);
      log_decision(log::Topic::recompiles, log::Level::info, line);
    }
  }
  for (size_t d = 0; d < sizes.size(); ++d) {
    const Mark& m = marks[d];
    bool wanted = m.dynamic || (!m.is_static && !parameter &&
                                (mode_ == DynamicMode::Dynamic || (mode_ == DynamicMode::Automatic && automatic[d])));
    if (!wanted) continue;
    if (sizes[d] < 2) {
      FC_DECISION(info, "dimension {} of {} has size {}: specialised (sizes 0 and 1 are never symbolic)", d,
             source, sizes[d]);
      if (m.dynamic)
        FC_DECISION(warning, "fastcomp: mark_dynamic({}, {}) ignored: the dimension has size {} on this call, "
               "and sizes 0 and 1 are always specialised", source, d, sizes[d]);
      continue;
    }
    int s = new_symbol(source, static_cast<int>(d), sizes[d], input);
    if (m.dynamic) {
      symbols_[s].marked = true;
      symbols_[s].min = std::max<int64_t>(symbols_[s].min, m.min);
      symbols_[s].max = m.max;
    }
    dims[d] = s;
  }
  return dims;
}

int ShapeEnv::new_symbol(const std::string& source, int dim, int64_t hint, int input) {
  SymbolInfo info;
  info.where = fmt::format("{}.size()[{}]", source, dim);
  info.hint = hint;
  info.binding = {input, dim};
  symbols_.push_back(std::move(info));
  int s = size() - 1;
  FC_DECISION(info, "dimension {} of {} is dynamic: s{} (size {} while tracing)", dim, source, s, hint);
  return s;
}

SymShape ShapeEnv::input_shape(const std::vector<int>& dims, const graph::TensorMeta& meta) const {
  if (std::all_of(dims.begin(), dims.end(), [](int s) { return s < 0; })) return {};
  SymShape out;
  for (size_t d = 0; d < dims.size(); ++d)
    out.sizes.push_back(dims[d] >= 0 ? graph::sym_symbol(dims[d]) : graph::sym_const(meta.sizes[d]));
  out.strides = dense_strides(out.sizes, meta.sizes, meta.strides);
  if (out.strides.empty())
    for (int64_t st : meta.strides) out.strides.push_back(graph::sym_const(st));
  return out;
}

std::string ShapeEnv::describe(int s) const { return fmt::format("s{} = {}", s, symbols_[s].where); }

std::vector<int64_t> ShapeEnv::hints() const {
  std::vector<int64_t> out;
  out.reserve(symbols_.size());
  for (const SymbolInfo& s : symbols_) out.push_back(s.hint);
  return out;
}

graph::Sym ShapeEnv::resolve(const graph::Sym& e) const {
  if (!replaced_) return e;
  std::vector<graph::Sym> replacement(symbols_.size());
  for (size_t i = 0; i < symbols_.size(); ++i) replacement[i] = symbols_[i].replacement;
  graph::Sym out = e;
  // Replacements may chain (s2 -> s1 -> 8); each pass removes one link.
  for (int pass = 0; pass <= replaced_; ++pass) {
    bool any = false;
    for (int s : graph::sym_symbols(out)) any |= symbols_[s].replacement != nullptr;
    if (!any) break;
    out = graph::sym_substitute(out, replacement);
  }
  return out;
}

SymShape ShapeEnv::resolve(const SymShape& shape) const {
  SymShape out;
  for (const auto& e : shape.sizes) out.sizes.push_back(resolve(e));
  for (const auto& e : shape.strides) out.strides.push_back(resolve(e));
  return out;
}

void ShapeEnv::specialize(int s, const std::string& why) {
  SymbolInfo& info = symbols_[s];
  if (info.replacement) return;
  info.replacement = graph::sym_const(info.hint);
  ++replaced_;
  FC_DECISION(info, "specialised {} to {}: {}", describe(s), info.hint, why);
  if (info.marked)
    FC_DECISION(warning, "fastcomp: {} was marked dynamic, but the trace needs it to be {}: {}", info.where,
           info.hint, why);
}

void ShapeEnv::specialize_all(const graph::Sym& e, const std::string& why) {
  for (int s : free_symbols(e)) specialize(s, why);
}

void ShapeEnv::unify(int keep, int drop, const std::string& why) {
  SymbolInfo& d = symbols_[drop];
  if (d.replacement || keep == drop) return;
  d.replacement = graph::sym_symbol(keep);
  ++replaced_;
  symbols_[keep].min = std::max(symbols_[keep].min, d.min);
  symbols_[keep].max = std::min(symbols_[keep].max, d.max);
  FC_DECISION(info, "{} and {} are one size from now on (guarded equal): {}", describe(drop), describe(keep), why);
}

void ShapeEnv::require_at_least(int s, int64_t n, const std::string& why) {
  if (symbols_[s].min >= n) return;
  symbols_[s].min = n;
  FC_DECISION(info, "{} must be at least {} (smaller sizes are compiled on their own): {}", describe(s), n, why);
}

void ShapeEnv::require_at_most(int s, int64_t n, const std::string& why) {
  if (symbols_[s].max <= n) return;
  symbols_[s].max = n;
  FC_DECISION(info, "{} must be at most {} (larger sizes are compiled on their own): {}", describe(s), n, why);
}

void ShapeEnv::add_relation(const graph::Sym& a, SizeCmp cmp, const graph::Sym& b, bool holds, const std::string& why) {
  Guard g;
  g.kind = GuardKind::SizeRelation;
  g.sym_a = a;
  g.sym_b = b;
  g.cmp = cmp;
  g.expected = PyRef::borrow(holds ? Py_True : Py_False);
  g.what = why;
  FC_DECISION(info, "guard ({} {} {}) == {}: {}", str(a), size_cmp_text(cmp), str(b), holds ? "True" : "False", why);
  relations_.push_back(std::move(g));
}

namespace {

void resolve_arg(const ShapeEnv& env, graph::Arg& a) {
  if (a.kind == graph::Arg::Kind::Sym) {
    a.sym = env.resolve(a.sym);
    if (a.sym->is_const()) a.kind = graph::Arg::Kind::Const;  // `value` already holds it
  }
  for (graph::Arg& item : a.items) resolve_arg(env, item);
}

void resolve_meta(const ShapeEnv& env, graph::TensorMeta& m) {
  if (!m.is_dynamic()) return;
  bool any = false;
  for (auto& e : m.sym_sizes) any |= !(e = env.resolve(e))->is_const();
  for (auto& e : m.sym_strides) any |= !(e = env.resolve(e))->is_const();
  if (!any) {
    m.sym_sizes.clear();
    m.sym_strides.clear();
  }
}

}  // namespace

void ShapeEnv::finalize(graph::Graph& graph, GuardSet& guards) const {
  if (symbols_.empty()) return;
  for (graph::Node& n : graph.nodes) {
    for (graph::Arg& a : n.args) resolve_arg(*this, a);
    for (graph::Arg& a : n.kwargs) resolve_arg(*this, a);
    resolve_meta(*this, n.meta);
  }
  resolve_arg(*this, graph.output);
  bool any_symbol = false;
  for (Guard& g : guards.guards) {
    if (g.kind != GuardKind::TensorMatch || g.tensor.dim_symbols.empty()) continue;
    bool dynamic = false;
    for (int& s : g.tensor.dim_symbols) {
      if (s < 0) continue;
      graph::Sym r = resolve(graph::sym_symbol(s));
      s = r->is_const() ? -1 : graph::sym_symbols(r).front();
      dynamic |= s >= 0;
    }
    resolve_meta(*this, g.tensor.meta);
    if (!dynamic) {
      g.tensor.dim_symbols.clear();
      g.tensor.meta.sym_sizes.clear();
      g.tensor.meta.sym_strides.clear();
    }
    any_symbol |= dynamic;
  }
  if (!any_symbol) {  // every symbol was specialised: the graph is static after all
    for (graph::Node& n : graph.nodes) n.meta.sym_sizes.clear(), n.meta.sym_strides.clear();
    FC_DECISION(info, "every dynamic dimension was specialised: the graph is static");
    return;
  }
  for (const SymbolInfo& s : symbols_) {
    graph.symbols.push_back(s.binding);
    guards.symbols.push_back(SymbolGuard{fmt::format("s{}", guards.symbols.size()), s.where, s.min, s.max});
  }
  for (Guard g : relations_) {
    g.sym_a = resolve(g.sym_a);
    g.sym_b = resolve(g.sym_b);
    if (g.sym_a->is_const() && g.sym_b->is_const()) continue;  // decided by the specialisations' guards
    guards.guards.push_back(std::move(g));
  }
}

}  // namespace fastcomp::frontend
