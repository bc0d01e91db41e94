#include "codegen/size.h"

namespace fastcomp::codegen {
namespace {

// Every term's coefficient passes `ok`, and every factor is a symbol (>= 0) rather than a division or remainder.
template <typename Ok>
bool all_terms(const graph::Sym& e, Ok ok) {
  for (const graph::SymTerm& t : e->terms) {
    if (!ok(t.coeff)) return false;
    for (const graph::AtomRef& f : t.factors)
      if (f->kind != graph::SymAtom::Kind::Symbol) return false;
  }
  return true;
}

}  // namespace

Size Size::of(const graph::Sym& e, int64_t hint) {
  if (e->is_const()) return Size(e->const_value());
  Size s(hint);
  s.expr_ = e;
  return s;
}

graph::Sym Size::sym() const { return expr_ ? expr_ : graph::sym_const(hint_); }

std::string Size::to_string() const { return expr_ ? graph::str(expr_) : std::to_string(hint_); }

bool operator==(const Size& a, const Size& b) {
  if (a.is_static() && b.is_static()) return a.hint() == b.hint();
  if (a.is_static() != b.is_static()) return false;  // a non-constant expression never equals a constant
  return graph::same(a.expr(), b.expr());
}

Size operator+(const Size& a, const Size& b) {
  if (a.is_static() && b.is_static()) return a.hint() + b.hint();
  return Size::of(graph::sym_add(a.sym(), b.sym()), a.hint() + b.hint());
}

Size operator-(const Size& a, const Size& b) {
  if (a.is_static() && b.is_static()) return a.hint() - b.hint();
  return Size::of(graph::sym_sub(a.sym(), b.sym()), a.hint() - b.hint());
}

Size operator*(const Size& a, const Size& b) {
  if (a.is_static() && b.is_static()) return a.hint() * b.hint();
  if ((a.is_static() && a.hint() == 0) || (b.is_static() && b.hint() == 0)) return 0;
  return Size::of(graph::sym_mul(a.sym(), b.sym()), a.hint() * b.hint());
}

Size floordiv(const Size& a, const Size& b) {
  if (a.is_static() && b.is_static()) {
    const int64_t q = a.hint() / b.hint();
    return (a.hint() % b.hint() != 0 && (a.hint() < 0) != (b.hint() < 0)) ? q - 1 : q;
  }
  const int64_t h = b.hint() ? a.hint() / b.hint() : 0;
  return Size::of(graph::sym_floordiv(a.sym(), b.sym()), h);
}

bool known_ge(const Size& a, const Size& b) {
  const Size d = a - b;
  if (d.is_static()) return d.hint() >= 0;
  return all_terms(d.expr(), [](int64_t c) { return c >= 0; });
}

bool known_multiple(const Size& a, int64_t m) {
  if (a.is_static()) return a.hint() % m == 0;
  for (const graph::SymTerm& t : a.expr()->terms)  // a term's factors are integers, whatever they are
    if (t.coeff % m != 0) return false;
  return true;
}

Sizes to_sizes(const std::vector<int64_t>& v) { return Sizes(v.begin(), v.end()); }

std::vector<int64_t> hints(const Sizes& v) {
  std::vector<int64_t> out;
  out.reserve(v.size());
  for (const Size& s : v) out.push_back(s.hint());
  return out;
}

bool all_static(const Sizes& v) {
  for (const Size& s : v)
    if (!s.is_static()) return false;
  return true;
}

Size product(const Sizes& v) {
  Size p = 1;
  for (const Size& s : v) p = p * s;
  return p;
}

std::string join_sizes(const Sizes& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i].to_string();
  return out;
}

}  // namespace fastcomp::codegen
