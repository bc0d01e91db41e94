// Addressing shared by the emitters: the iteration space with size-1 dimensions dropped and neighbouring
// dimensions merged where every operand allows it, so each element's offsets need as few divisions as possible.
// Under dynamic shapes sizes and strides may be symbolic: dimensions merge only where the strides agree for every
// value of the symbols, and each symbolic size the code needs is a kernel parameter (SizeParams).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "codegen/kernel_ir.h"
#include "codegen/size.h"

namespace fastcomp::codegen::detail {

using Strides = Sizes;

// The int64 parameters a kernel takes for its symbolic sizes: each distinct expression once, named p0, p1, ...
// in the order the emitter first needs them.
class SizeParams {
 public:
  // The C text of `s`: a literal when static, else its parameter's name.
  std::string text(const Size& s);
  bool empty() const { return exprs_.empty(); }
  const std::vector<graph::Sym>& exprs() const { return exprs_; }

 private:
  std::vector<graph::Sym> exprs_;
};

struct Collapsed {
  Sizes shape;                  // no dimension of size 1 (empty: one element); row-major linear order kept
  std::vector<Strides> strides; // per operand, in the order given to collapse()
  std::vector<int> dim_of;      // per dimension of the original shape: the one of `shape` holding it (-1: dropped)
};

// Drops size-1 dimensions and merges dimension d into d+1 when every operand has strides[d] ==
// strides[d+1] * shape[d+1]; the linear index of every element is unchanged. A `kept` dimension (one a range
// is on) merges with neither neighbour, so its coordinate stays one division and one modulo away.
Collapsed collapse(const Sizes& shape, const std::vector<Strides>& strides, const std::vector<bool>& kept = {});

// Whether `r` leaves out part of `shape` (a range over a whole dimension restricts nothing).
bool restricts(const DimRange& r, const Sizes& shape);
// The C condition that the coordinate along r.dim (of the original shape) lies in `r`, from the coordinates
// coordinate_decls declared with `prefix`; "" when it holds everywhere.
std::string range_condition(const Collapsed& c, const DimRange& r, const Sizes& shape, const std::string& prefix,
                            SizeParams& params);

enum class Access : uint8_t {
  Contiguous,  // row-major over the whole space: offset = linear index
  Broadcast,   // stride 0 everywhere: one element
  Strided,     // anything else: offset from coordinates
};
Access classify(const Collapsed& c, size_t operand);

Size numel(const Sizes& shape);
// Largest element offset an operand reaches over `shape` (strides are >= 0); static shapes only.
int64_t max_offset(const Sizes& shape, const Strides& strides, const Size& storage_offset);

// Coordinates of linear index `index` over c.shape that the Strided operands among `operands` need, and those
// of the dimensions in `also` (of c.shape; may be empty), one `const idx_t <prefix><d> = ...;` line each.
std::string coordinate_decls(const Collapsed& c, const std::vector<bool>& operands, const std::string& index,
                             const std::string& prefix, const std::string& indent, SizeParams& params,
                             const std::vector<bool>& also = {});
// The element offset of `operand` at linear index `index`, storage offset included ("i", "i + 3", "c0 * 512 +
// c1", "7", "c0 * p1 + c1").
std::string offset_text(const Collapsed& c, size_t operand, const std::string& index, const std::string& prefix,
                        const Size& storage_offset, SizeParams& params);

}  // namespace fastcomp::codegen::detail
