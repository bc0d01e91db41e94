#include "runtime/size_slots.h"

namespace fastcomp::runtime {

SizeSlots::Ref SizeSlots::add(const codegen::Size& s) {
  if (s.is_static()) return Ref{s.hint(), -1};
  return add(s.expr());
}

SizeSlots::Ref SizeSlots::add(const graph::Sym& e) {
  if (e->is_const()) return Ref{e->const_value(), -1};
  auto [it, added] = index_.emplace(graph::str(e), static_cast<int>(exprs_.size()));
  if (added) exprs_.push_back(e);
  return Ref{0, it->second};
}

void SizeSlots::evaluate(const std::vector<int64_t>& symbols, std::vector<int64_t>* values) const {
  values->resize(exprs_.size());
  for (size_t i = 0; i < exprs_.size(); ++i) (*values)[i] = graph::sym_eval(exprs_[i], symbols);
}

}  // namespace fastcomp::runtime
