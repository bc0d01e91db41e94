#include "graph/sym.h"

#include <algorithm>
#include <map>
#include <stdexcept>

namespace fastcomp::graph {
namespace {

int64_t floordiv_int(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t mod_int(int64_t a, int64_t b) { return a - floordiv_int(a, b) * b; }

std::string term_key(const std::vector<AtomRef>& factors) {
  std::string key;
  for (size_t i = 0; i < factors.size(); ++i) key += (i ? "*" : "") + factors[i]->key;
  return key;
}

// Whether an atom's text needs parentheses as a factor or operand (sums do).
std::string operand_text(const Sym& e) {
  bool sum = e->terms.size() > 1 || (e->terms.size() == 1 && e->terms[0].coeff < 0);
  return sum ? "(" + e->text + ")" : e->text;
}

// Builds the canonical expression from terms keyed by their factors (merging like terms).
Sym make(std::map<std::string, SymTerm> by_key) {
  auto out = std::make_shared<SymExpr>();
  for (auto& [key, term] : by_key)
    if (term.coeff != 0) out->terms.push_back(std::move(term));
  // Text: variable terms in key order, the constant last ("s0 + 1", "2*s0*s1 - s1").
  std::string text;
  const SymTerm* constant = nullptr;
  auto append = [&](int64_t coeff, const std::string& body) {
    bool neg = coeff < 0;
    int64_t mag = neg ? -coeff : coeff;
    std::string part = body.empty() ? std::to_string(mag) : (mag == 1 ? body : std::to_string(mag) + "*" + body);
    if (text.empty()) text = (neg ? "-" : "") + part;
    else text += (neg ? " - " : " + ") + part;
  };
  for (const SymTerm& t : out->terms) {
    if (t.factors.empty()) constant = &t;
    else append(t.coeff, t.key);
  }
  if (constant) append(constant->coeff, "");
  out->text = text.empty() ? "0" : text;
  return out;
}

std::map<std::string, SymTerm> terms_of(const Sym& e) {
  std::map<std::string, SymTerm> m;
  for (const SymTerm& t : e->terms) m[t.key] = t;
  return m;
}

Sym atom_expr(AtomRef atom) {
  SymTerm t;
  t.coeff = 1;
  t.factors = {atom};
  t.key = atom->key;
  std::map<std::string, SymTerm> m;
  m[t.key] = std::move(t);
  return make(std::move(m));
}

// a / b as a polynomial when b is a single term dividing every term of a; null otherwise.
Sym exact_quotient(const Sym& a, const Sym& b) {
  if (b->terms.size() != 1) return nullptr;
  const SymTerm& d = b->terms[0];
  std::map<std::string, SymTerm> out;
  for (const SymTerm& t : a->terms) {
    if (t.coeff % d.coeff != 0) return nullptr;
    std::vector<AtomRef> rest = t.factors;
    for (const AtomRef& f : d.factors) {
      auto it = std::find_if(rest.begin(), rest.end(), [&](const AtomRef& r) { return r->key == f->key; });
      if (it == rest.end()) return nullptr;
      rest.erase(it);
    }
    SymTerm q;
    q.coeff = t.coeff / d.coeff;
    q.factors = std::move(rest);
    q.key = term_key(q.factors);
    out[q.key] = std::move(q);
  }
  return make(std::move(out));
}

Sym opaque(SymAtom::Kind kind, const Sym& a, const Sym& b) {
  auto atom = std::make_shared<SymAtom>();
  atom->kind = kind;
  atom->a = a;
  atom->b = b;
  // Parenthesised so that it reads unambiguously as a factor: "2*(s0//3)".
  atom->key = "(" + operand_text(a) + (kind == SymAtom::Kind::FloorDiv ? "//" : "%") + operand_text(b) + ")";
  return atom_expr(atom);
}

}  // namespace

Sym sym_const(int64_t v) {
  std::map<std::string, SymTerm> m;
  if (v != 0) m[""] = SymTerm{v, {}, ""};
  return make(std::move(m));
}

Sym sym_symbol(int id) {
  auto atom = std::make_shared<SymAtom>();
  atom->kind = SymAtom::Kind::Symbol;
  atom->symbol = id;
  atom->key = "s" + std::to_string(id);
  return atom_expr(atom);
}

Sym sym_add(const Sym& a, const Sym& b) {
  auto m = terms_of(a);
  for (const SymTerm& t : b->terms) {
    auto [it, inserted] = m.emplace(t.key, t);
    if (!inserted) it->second.coeff += t.coeff;
  }
  return make(std::move(m));
}

Sym sym_sub(const Sym& a, const Sym& b) { return sym_add(a, sym_mul(b, sym_const(-1))); }

Sym sym_mul(const Sym& a, const Sym& b) {
  std::map<std::string, SymTerm> m;
  for (const SymTerm& x : a->terms)
    for (const SymTerm& y : b->terms) {
      SymTerm t;
      t.coeff = x.coeff * y.coeff;
      t.factors = x.factors;
      t.factors.insert(t.factors.end(), y.factors.begin(), y.factors.end());
      std::sort(t.factors.begin(), t.factors.end(), [](const AtomRef& p, const AtomRef& q) { return p->key < q->key; });
      t.key = term_key(t.factors);
      auto [it, inserted] = m.emplace(t.key, t);
      if (!inserted) it->second.coeff += t.coeff;
    }
  return make(std::move(m));
}

Sym sym_floordiv(const Sym& a, const Sym& b) {
  if (b->is_const() && b->const_value() == 0) throw std::invalid_argument("symbolic size divided by zero");
  if (a->is_const() && b->is_const()) return sym_const(floordiv_int(a->const_value(), b->const_value()));
  if (Sym q = exact_quotient(a, b)) return q;
  return opaque(SymAtom::Kind::FloorDiv, a, b);
}

Sym sym_mod(const Sym& a, const Sym& b) {
  if (b->is_const() && b->const_value() == 0) throw std::invalid_argument("symbolic size modulo zero");
  if (a->is_const() && b->is_const()) return sym_const(mod_int(a->const_value(), b->const_value()));
  if (exact_quotient(a, b)) return sym_const(0);
  return opaque(SymAtom::Kind::Mod, a, b);
}

namespace {

int64_t eval_atom(const SymAtom& atom, const std::vector<int64_t>& values) {
  switch (atom.kind) {
    case SymAtom::Kind::Symbol: return values.at(atom.symbol);
    case SymAtom::Kind::FloorDiv:
    case SymAtom::Kind::Mod: {
      int64_t a = sym_eval(atom.a, values), b = sym_eval(atom.b, values);
      if (b == 0) throw std::invalid_argument("symbolic size divided by zero");
      return atom.kind == SymAtom::Kind::FloorDiv ? floordiv_int(a, b) : mod_int(a, b);
    }
  }
  return 0;
}

void collect_symbols(const Sym& e, std::vector<int>& out) {
  for (const SymTerm& t : e->terms)
    for (const AtomRef& f : t.factors) {
      if (f->kind == SymAtom::Kind::Symbol) out.push_back(f->symbol);
      else {
        collect_symbols(f->a, out);
        collect_symbols(f->b, out);
      }
    }
}

}  // namespace

int64_t sym_eval(const Sym& e, const std::vector<int64_t>& values) {
  int64_t sum = 0;
  for (const SymTerm& t : e->terms) {
    int64_t p = t.coeff;
    for (const AtomRef& f : t.factors) p *= eval_atom(*f, values);
    sum += p;
  }
  return sum;
}

std::optional<int64_t> sym_try_eval(const Sym& e, const std::vector<int64_t>& values) {
  try {
    return sym_eval(e, values);
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
}

std::vector<int> sym_symbols(const Sym& e) {
  std::vector<int> out;
  collect_symbols(e, out);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Sym sym_substitute(const Sym& e, const std::vector<Sym>& replacement) {
  Sym out = sym_const(0);
  for (const SymTerm& t : e->terms) {
    Sym p = sym_const(t.coeff);
    for (const AtomRef& f : t.factors) {
      Sym factor;
      if (f->kind == SymAtom::Kind::Symbol)
        factor = f->symbol < static_cast<int>(replacement.size()) && replacement[f->symbol] ? replacement[f->symbol]
                                                                                              : atom_expr(f);
      else if (f->kind == SymAtom::Kind::FloorDiv)
        factor = sym_floordiv(sym_substitute(f->a, replacement), sym_substitute(f->b, replacement));
      else
        factor = sym_mod(sym_substitute(f->a, replacement), sym_substitute(f->b, replacement));
      p = sym_mul(p, factor);
    }
    out = sym_add(out, p);
  }
  return out;
}

}  // namespace fastcomp::graph
