// What the fast metadata paths (elementwise_meta.cpp, nn_meta.cpp) read from a meta call's arguments without
// calling torch ops: dtypes as small indices with torch's own promotion table, the layout of plain tensors, and
// Python scalars. Nothing here leaves a Python error set.
#pragma once
#include <Python.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <vector>

#include "frontend/trace/meta.h"

namespace fastcomp::frontend::meta_args {

// The dtypes the fast paths know, in c10's category order. Complex, wide unsigned, float8 and quantized
// dtypes are left to meta calls.
constexpr int8_t kNone = -1, kBool = 0, kU8 = 1, kI8 = 2, kI16 = 3, kI32 = 4, kI64 = 5, kF16 = 6, kBF16 = 7,
                 kF32 = 8, kF64 = 9, kNumDt = 10;
inline bool is_float(int8_t d) { return d >= kF16; }

struct Dtypes {
  PyObject* objs[kNumDt] = {};     // torch.bool ... torch.float64, owned
  int8_t promote_table[kNumDt][kNumDt];  // torch.promote_types, asked once per pair at start-up

  int8_t index(PyObject* dtype) const;  // kNone for other dtypes
  int8_t promote(int8_t a, int8_t b) const { return a == kNone ? b : b == kNone ? a : promote_table[a][b]; }
  int8_t default_dtype() const;  // torch.get_default_dtype()
};
const Dtypes& dtypes();  // loaded on first use

// A tensor or Python scalar argument.
struct Arg {
  PyObject* obj = nullptr;  // borrowed
  bool tensor = false;
  bool requires_grad = false;
  int8_t dt = kNone;  // a scalar's: the dtype torch wraps it as (a float: the default dtype)
  std::vector<int64_t> sizes, strides;
  long long int_value = 0;  // Python ints
};

// A plain Tensor or Parameter (borrowed) of a known dtype with no zero-size dimension, laid out row-major (see
// row_major) unless `any_layout`. False for anything else.
bool read_tensor(PyObject* o, Arg* out, bool any_layout = false);
// read_tensor (with `any_layout`), or a Python bool / int (fitting int64) / float.
bool read_arg(PyObject* o, Arg* out, bool any_layout = false);

// Row-major with possible gaps (a contiguous tensor, or a slice of one such as x[..., :k]): each dimension's
// stride covers the whole of the dimensions to its right, and size-1 dimensions carry exactly that stride. For
// such inputs torch's kernels and their reference implementations agree and produce contiguous outputs;
// other layouts (permuted, expanded, size-1 dimensions with odd strides) make them pick stride orders that
// the fast paths do not reproduce.
bool row_major(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides);
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes);

// A new contiguous result.
ComputedMeta fresh_result(int8_t dt, std::vector<int64_t> sizes, bool requires_grad);
// The argument itself as the result (in-place ops, no-op casts).
std::optional<ComputedMeta> same_object(const Arg& self);

// Positional and keyword arguments (`args` a tuple, `kwargs` a dict or null; borrowed) matched to a signature's
// names, null where not given; false when an argument is unknown, given twice, or one of the first `required`
// is missing.
bool bind_args(PyObject* args, PyObject* kwargs, std::initializer_list<const char*> names, size_t required,
               std::vector<PyObject*>* out);

// `owner.name` as a new reference, or null (error cleared) when this torch lacks it.
PyObject* lookup(PyObject* owner, const char* name);

}  // namespace fastcomp::frontend::meta_args
