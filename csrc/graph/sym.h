// Symbolic sizes: integer expressions over the symbols s0, s1, ... that stand for dynamic dimensions of a graph's
// inputs. An expression is a polynomial with integer coefficients whose variables ("atoms") are symbols or
// floor divisions / remainders that did not simplify. Expressions are immutable and shared; two expressions are
// equal exactly when their canonical texts are (`str`), which is also how they print in graphs and guards.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fastcomp::graph {

struct SymExpr;
using Sym = std::shared_ptr<const SymExpr>;

struct SymAtom {
  enum class Kind : uint8_t { Symbol, FloorDiv, Mod };
  Kind kind = Kind::Symbol;
  int symbol = -1;  // Symbol
  Sym a, b;         // FloorDiv / Mod operands
  std::string key;  // canonical text: "s3", "(s0 + 1)//2"
};
using AtomRef = std::shared_ptr<const SymAtom>;

struct SymTerm {
  int64_t coeff = 0;
  std::vector<AtomRef> factors;  // sorted by key; repeated for powers; empty for the constant term
  std::string key;               // factors' keys joined by "*"
};

struct SymExpr {
  std::vector<SymTerm> terms;  // sorted by key, no zero coefficients; empty is the constant 0
  std::string text;            // canonical form

  bool is_const() const { return terms.empty() || (terms.size() == 1 && terms[0].factors.empty()); }
  int64_t const_value() const { return terms.empty() ? 0 : terms[0].coeff; }  // when is_const()
};

Sym sym_const(int64_t v);
Sym sym_symbol(int id);
Sym sym_add(const Sym& a, const Sym& b);
Sym sym_sub(const Sym& a, const Sym& b);
Sym sym_mul(const Sym& a, const Sym& b);
// Python's // and %: exact polynomial division when every term divides, else an opaque atom. Callers check
// that the divisor is not zero at the hint (Python raises there).
Sym sym_floordiv(const Sym& a, const Sym& b);
Sym sym_mod(const Sym& a, const Sym& b);

// Sizes and strides of a tensor as expressions; empty when its shape is static.
struct SymShape {
  std::vector<Sym> sizes, strides;
  bool empty() const { return sizes.empty(); }
};

inline const std::string& str(const Sym& e) { return e->text; }
inline bool same(const Sym& a, const Sym& b) { return a->text == b->text; }

// Value of `e` when symbol i is `values[i]`; throws std::invalid_argument where a floor division or modulo in it
// has a divisor of 0 there.
int64_t sym_eval(const Sym& e, const std::vector<int64_t>& values);
// The same, or nullopt where a divisor in `e` is 0: `e` has no value at that point.
std::optional<int64_t> sym_try_eval(const Sym& e, const std::vector<int64_t>& values);
// Ids of the symbols `e` mentions, ascending.
std::vector<int> sym_symbols(const Sym& e);
// `e` with each symbol i replaced by `replace(i)` (null: keep the symbol).
Sym sym_substitute(const Sym& e, const std::vector<Sym>& replacement);

}  // namespace fastcomp::graph
