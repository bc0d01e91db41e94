// Dynamic shapes at run time: every symbolic size an executable needs (kernel size parameters, launch grids,
// allocation sizes and strides, cuBLASLt dimensions) interned once at build time and evaluated once per call
// from the values of the graph's symbols. Static sizes never reach the table.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "codegen/size.h"

namespace fastcomp::runtime {

class SizeSlots {
 public:
  // A static size, or the slot of a symbolic one.
  struct Ref {
    int64_t value = 0;
    int slot = -1;
  };
  Ref add(const codegen::Size& s);
  Ref add(const graph::Sym& e);
  bool empty() const { return exprs_.empty(); }
  // Every slot's value for `symbols` (symbol i's value at index i).
  void evaluate(const std::vector<int64_t>& symbols, std::vector<int64_t>* values) const;
  static int64_t get(Ref r, const std::vector<int64_t>& values) { return r.slot < 0 ? r.value : values[r.slot]; }

 private:
  std::vector<graph::Sym> exprs_;
  std::unordered_map<std::string, int> index_;  // by canonical text
};

}  // namespace fastcomp::runtime
