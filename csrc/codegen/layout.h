// Addressing shared by the emitters: the iteration space with size-1 dimensions dropped and neighbouring
// dimensions merged where every operand allows it, so each element's offsets need as few divisions as possible.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace fastcomp::codegen::detail {

using Strides = std::vector<int64_t>;

struct Collapsed {
  std::vector<int64_t> shape;   // no dimension of size 1 (empty: one element); row-major linear order kept
  std::vector<Strides> strides; // per operand, in the order given to collapse()
};

// Drops size-1 dimensions and merges dimension d into d+1 when every operand has strides[d] ==
// strides[d+1] * shape[d+1]; the linear index of every element is unchanged.
Collapsed collapse(const std::vector<int64_t>& shape, const std::vector<Strides>& strides);

enum class Access : uint8_t {
  Contiguous,  // row-major over the whole space: offset = linear index
  Broadcast,   // stride 0 everywhere: one element
  Strided,     // anything else: offset from coordinates
};
Access classify(const Collapsed& c, size_t operand);

int64_t numel(const std::vector<int64_t>& shape);
// Largest element offset an operand reaches over `shape` (strides are >= 0).
int64_t max_offset(const std::vector<int64_t>& shape, const Strides& strides, int64_t storage_offset);

// Coordinates of linear index `index` over c.shape that the Strided operands among `operands` need, one
// `const idx_t <prefix><d> = ...;` line each (dimensions none of them uses are skipped).
std::string coordinate_decls(const Collapsed& c, const std::vector<bool>& operands, const std::string& index,
                             const std::string& prefix, const std::string& indent);
// The element offset of `operand` at linear index `index`, storage offset included ("i", "i + 3", "c0 * 512 +
// c1", "7").
std::string offset_text(const Collapsed& c, size_t operand, const std::string& index, const std::string& prefix,
                        int64_t storage_offset);

}  // namespace fastcomp::codegen::detail
