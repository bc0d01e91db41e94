// Sizes, strides and offsets of the fusion plan and the kernel IR under dynamic shapes: a compile-time constant,
// or an expression over the graph's symbols (graph/sym.h) that the executable evaluates on every call. Static
// graphs only ever hold constants, so their lowering and code are what they were before dynamic shapes.
//
// Decisions that change the generated code may rest only on facts true for every value the symbols can take
// (each symbol is >= 0): equal expressions, known_ge, known_multiple. The hint (the value at trace time) may steer
// heuristics such as a launch shape, never what is correct.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "graph/sym.h"

namespace fastcomp::codegen {

class Size {
 public:
  Size(int64_t value = 0) : hint_(value) {}  // NOLINT: implicit, a constant is a Size
  // `e` at trace-time value `hint`; a constant expression gives a static Size.
  static Size of(const graph::Sym& e, int64_t hint);

  bool is_static() const { return !expr_; }
  int64_t hint() const { return hint_; }           // the value itself when static
  const graph::Sym& expr() const { return expr_; }  // null when static
  graph::Sym sym() const;                           // the expression, a constant one when static
  std::string to_string() const;                    // "512", "s0*512"

 private:
  int64_t hint_;
  graph::Sym expr_;
};
using Sizes = std::vector<Size>;

// Equal for every value of the symbols (same canonical expression).
bool operator==(const Size& a, const Size& b);
inline bool operator!=(const Size& a, const Size& b) { return !(a == b); }
Size operator+(const Size& a, const Size& b);
Size operator-(const Size& a, const Size& b);
Size operator*(const Size& a, const Size& b);
Size floordiv(const Size& a, const Size& b);  // Python's //

// a >= b for every value of the symbols (proved by every coefficient of a - b being >= 0).
bool known_ge(const Size& a, const Size& b);
// a is a multiple of m for every value of the symbols (every coefficient is).
bool known_multiple(const Size& a, int64_t m);

Sizes to_sizes(const std::vector<int64_t>& v);
std::vector<int64_t> hints(const Sizes& v);
bool all_static(const Sizes& v);
Size product(const Sizes& v);
std::string join_sizes(const Sizes& v, const char* sep = ",");  // "32,s0*512"

}  // namespace fastcomp::codegen
