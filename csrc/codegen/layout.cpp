#include "codegen/layout.h"

#include <fmt/format.h>

#include "codegen/expr_emitter.h"

namespace fastcomp::codegen::detail {
namespace {

// Elements spanned by one step of each dimension of c.shape, row-major.
Sizes contiguous_strides(const Sizes& shape) {
  Sizes out(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) out[d - 1] = out[d] * shape[d];
  return out;
}

bool dim_used(const Collapsed& c, const std::vector<bool>& operands, const std::vector<bool>& also, size_t d) {
  if (d < also.size() && also[d]) return true;
  for (size_t o = 0; o < c.strides.size(); ++o)
    if (operands[o] && classify(c, o) == Access::Strided && c.strides[o][d] != 0) return true;
  return false;
}

}  // namespace

std::string SizeParams::text(const Size& s) {
  if (s.is_static()) return index_literal(s.hint());
  for (size_t i = 0; i < exprs_.size(); ++i)
    if (graph::same(exprs_[i], s.expr())) return "p" + std::to_string(i);
  exprs_.push_back(s.expr());
  return "p" + std::to_string(exprs_.size() - 1);
}

Collapsed collapse(const Sizes& shape, const std::vector<Strides>& strides, const std::vector<bool>& kept) {
  Collapsed out;
  out.strides.resize(strides.size());
  out.dim_of.assign(shape.size(), -1);
  const Size n = numel(shape);
  if (n.is_static() && n.hint() == 0) {  // nothing to address: one empty dimension keeps loops well-formed
    out.shape = {0};
    for (Strides& s : out.strides) s = {0};
    return out;
  }
  bool last_kept = false;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    const bool keep = d < kept.size() && kept[d];
    bool merge = !out.shape.empty() && !keep && !last_kept;
    last_kept = keep;
    for (size_t o = 0; merge && o < strides.size(); ++o)
      merge = out.strides[o].back() == strides[o][d] * shape[d];
    if (merge) {
      out.shape.back() = out.shape.back() * shape[d];
      for (size_t o = 0; o < strides.size(); ++o) out.strides[o].back() = strides[o][d];
    } else {
      out.shape.push_back(shape[d]);
      for (size_t o = 0; o < strides.size(); ++o) out.strides[o].push_back(strides[o][d]);
    }
    out.dim_of[d] = static_cast<int>(out.shape.size()) - 1;
  }
  return out;
}

bool restricts(const DimRange& r, const Sizes& shape) {
  return r.dim >= 0 && !(r.begin == 0 && r.end == shape[r.dim]);
}

std::string range_condition(const Collapsed& c, const DimRange& r, const Sizes& shape, const std::string& prefix,
                            SizeParams& params) {
  if (!restricts(r, shape)) return "";
  const int d = c.dim_of[r.dim];
  const std::string coord = d >= 0 ? prefix + std::to_string(d) : "0";  // a dropped dimension has size 1
  std::string out;
  if (r.begin != 0) out = coord + " >= " + params.text(r.begin);
  if (r.end != shape[r.dim]) out += (out.empty() ? "" : " && ") + coord + " < " + params.text(r.end);
  return "(" + out + ")";
}

Access classify(const Collapsed& c, size_t operand) {
  const Strides& s = c.strides[operand];
  if (s == contiguous_strides(c.shape)) return Access::Contiguous;
  for (const Size& x : s)
    if (x != 0) return Access::Strided;
  return Access::Broadcast;
}

Size numel(const Sizes& shape) { return product(shape); }

int64_t max_offset(const Sizes& shape, const Strides& strides, const Size& storage_offset) {
  int64_t out = storage_offset.hint();
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d].hint() > 0) out += (shape[d].hint() - 1) * strides[d].hint();
  return out;
}

std::string coordinate_decls(const Collapsed& c, const std::vector<bool>& operands, const std::string& index,
                             const std::string& prefix, const std::string& indent, SizeParams& params,
                             const std::vector<bool>& also) {
  const Sizes span = contiguous_strides(c.shape);
  std::string out;
  for (size_t d = 0; d < c.shape.size(); ++d) {
    if (!dim_used(c, operands, also, d)) continue;
    std::string value = index;
    if (span[d] != 1) value += " / " + params.text(span[d]);
    if (d != 0) value = (span[d] != 1 ? "(" + value + ")" : value) + " % " + params.text(c.shape[d]);
    out += fmt::format("{}const idx_t {}{} = {};\n", indent, prefix, d, value);
  }
  return out;
}

std::string offset_text(const Collapsed& c, size_t operand, const std::string& index, const std::string& prefix,
                        const Size& storage_offset, SizeParams& params) {
  std::string out;
  switch (classify(c, operand)) {
    case Access::Contiguous: out = index; break;
    case Access::Broadcast: break;
    case Access::Strided:
      for (size_t d = 0; d < c.shape.size(); ++d) {
        const Size& s = c.strides[operand][d];
        if (s == 0) continue;
        if (!out.empty()) out += " + ";
        out += prefix + std::to_string(d) + (s == 1 ? "" : " * " + params.text(s));
      }
  }
  if (out.empty()) return params.text(storage_offset);
  if (storage_offset == 0) return out;
  // A piece of a concatenation may start before its tensor: "c0 * 1024 + c1 - 512".
  if (storage_offset.is_static() && storage_offset.hint() < 0) return out + " - " + params.text(-storage_offset.hint());
  return out + " + " + params.text(storage_offset);
}

}  // namespace fastcomp::codegen::detail
