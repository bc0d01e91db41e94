#include "frontend/trace/nn_meta.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <vector>

#include "cpython/gil_once.h"
#include "frontend/trace/meta_args.h"
#include "frontend/trace/torch_refs.h"

namespace fastcomp::frontend {
namespace {

using namespace meta_args;  // NOLINT: the fast paths share its vocabulary

enum class Op : uint8_t { Linear, Matmul, LayerNorm, Sum, Mean, VectorNorm, Cat, Softmax, SoftmaxF, MaskedFill, Triangle };

const std::unordered_map<PyObject*, Op>& table() {
  static cpython::GilOnce<const std::unordered_map<PyObject*, Op>> tb;
  return *tb.get([] {
    auto* t = new std::unordered_map<PyObject*, Op>();
    const auto& T = torch_refs();
    PyObject* torch = T.torch.get();
    PyObject* tensor = T.tensor_type.get();
    PyRef functional = PyRef::steal(PyImport_ImportModule("torch.nn.functional"));
    PyRef nn_c = PyRef::steal(PyImport_ImportModule("torch._C._nn"));
    PyErr_Clear();
    auto add = [&](PyObject* owner, const char* name, Op op) {
      if (PyObject* fn = lookup(owner, name)) t->emplace(fn, op);  // the reference stays with the table
    };
    add(nn_c.get(), "linear", Op::Linear);  // torch.nn.functional.linear
    PyRef op_mod = PyRef::steal(PyImport_ImportModule("operator"));
    PyErr_Clear();
    add(op_mod.get(), "matmul", Op::Matmul);
    add(torch, "matmul", Op::Matmul);
    add(tensor, "matmul", Op::Matmul);
    add(tensor, "__matmul__", Op::Matmul);
    add(functional.get(), "layer_norm", Op::LayerNorm);
    add(torch, "layer_norm", Op::LayerNorm);
    for (PyObject* owner : {torch, tensor}) {
      add(owner, "sum", Op::Sum);
      add(owner, "mean", Op::Mean);
    }
    // torch 2.11's meta function keeps a reduced dimension of size 1 (x of [K, 1, 1], dim=-3 gives [1, 1, 1]
    // where the kernel gives [1, 1]; fuzz seed 105): the shape rule of a reduction, in C++.
    PyRef linalg_c = PyRef::steal(PyImport_ImportModule("torch._C._linalg"));
    PyErr_Clear();
    add(linalg_c.get(), "linalg_vector_norm", Op::VectorNorm);
    for (const char* n : {"cat", "concat", "concatenate"}) add(torch, n, Op::Cat);
    // torch's meta function of softmax imports sympy (through elementwise_dtypes): most of a second in the
    // first compile of every process that traces one.
    for (const char* n : {"softmax", "log_softmax"}) {
      add(torch, n, Op::Softmax);
      add(tensor, n, Op::Softmax);
      add(functional.get(), n, Op::SoftmaxF);
    }
    // Attention masks: masked_fill's meta imports torch._dynamo (~2 s on a first call), triu/tril's torch.fx.
    for (PyObject* owner : {torch, tensor}) {
      add(owner, "masked_fill", Op::MaskedFill);
      add(owner, "triu", Op::Triangle);
      add(owner, "tril", Op::Triangle);
    }
    return t;
  });
}

// A dimension index in [0, ndim), or -1 when out of range.
int64_t wrap_dim(PyObject* o, size_t ndim) {
  if (!PyLong_CheckExact(o)) return -1;
  int overflow = 0;
  long long d = PyLong_AsLongLongAndOverflow(o, &overflow);
  if (overflow || d < -static_cast<long long>(ndim) || d >= static_cast<long long>(ndim)) return -1;
  return d < 0 ? d + ndim : d;
}

bool read_ints(PyObject* seq, std::vector<int64_t>* out) {
  if (!PyTuple_Check(seq) && !PyList_Check(seq)) return false;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  out->resize(n);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = PySequence_Fast_GET_ITEM(seq, i);
    if (!PyLong_Check(item)) return false;
    (*out)[i] = PyLong_AsLongLong(item);
    if ((*out)[i] == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
  }
  return true;
}

bool none(PyObject* o) { return !o || o == Py_None; }

// linear(input, weight, bias=None): input [..., in] @ weight[out, in].T + bias[out].
std::optional<ComputedMeta> linear(PyObject* args, PyObject* kwargs, bool grad) {
  std::vector<PyObject*> a;
  Arg x, w, b;
  // The output is contiguous whatever the input's layout (inputs of more than 2 dimensions are reshaped to
  // 2 for mm) for row-major weights and their transposes (nn.Linear's and x @ w.T's).
  if (!bind_args(args, kwargs, {"input", "weight", "bias"}, 2, &a) || !read_tensor(a[0], &x, /*any_layout=*/true) ||
      !read_tensor(a[1], &w, /*any_layout=*/true) || x.sizes.empty() || w.sizes.size() != 2)
    return std::nullopt;
  if (!row_major(w.sizes, w.strides) && !row_major({w.sizes[1], w.sizes[0]}, {w.strides[1], w.strides[0]}))
    return std::nullopt;
  if (!is_float(x.dt) || w.dt != x.dt || x.sizes.back() != w.sizes[1]) return std::nullopt;
  if (!none(a[2]) && (!read_tensor(a[2], &b) || b.dt != x.dt || b.sizes != std::vector<int64_t>{w.sizes[0]}))
    return std::nullopt;
  std::vector<int64_t> sizes(x.sizes.begin(), x.sizes.end() - 1);
  sizes.push_back(w.sizes[0]);
  return fresh_result(x.dt, std::move(sizes), grad && (x.requires_grad || w.requires_grad || b.requires_grad));
}

// matmul(a, b) of two tensors of one floating dtype: 1-d operands are a vector on their side, batch dimensions
// broadcast. The output is contiguous for every layout of the operands (mm, bmm and the folding of batches
// all write fresh outputs), except in two cases whose meta implementation shows other strides on size-1
// dimensions, left to the meta call: a 1-d or 2-d `a` times a batched `b` (computed transposed), and batch
// dimensions that broadcast (expanded differently when an operand requires grad).
std::optional<ComputedMeta> matmul(PyObject* args, PyObject* kwargs, bool grad) {
  std::vector<PyObject*> a;
  Arg x, y;
  if (!bind_args(args, kwargs, {"input", "other"}, 2, &a) || !read_tensor(a[0], &x, /*any_layout=*/true) ||
      !read_tensor(a[1], &y, /*any_layout=*/true) || x.sizes.empty() || y.sizes.empty() || !is_float(x.dt) ||
      y.dt != x.dt)
    return std::nullopt;
  size_t dx = x.sizes.size(), dy = y.sizes.size();
  if (dx <= 2 && dy >= 3) return std::nullopt;
  int64_t k = x.sizes.back();
  if (k != (dy == 1 ? y.sizes[0] : y.sizes[dy - 2])) return std::nullopt;
  std::vector<int64_t> bx(x.sizes.begin(), x.sizes.end() - std::min<size_t>(dx, 2));
  std::vector<int64_t> by(y.sizes.begin(), y.sizes.end() - std::min<size_t>(dy, 2));
  std::vector<int64_t> sizes(std::max(bx.size(), by.size()), 1);
  if (dy >= 3 && bx != by) return std::nullopt;
  for (const auto* batch : {&bx, &by}) {
    size_t off = sizes.size() - batch->size();
    for (size_t i = 0; i < batch->size(); ++i) {
      int64_t& d = sizes[off + i];
      int64_t s = (*batch)[i];
      if (s == d || s == 1) continue;
      if (d != 1) return std::nullopt;  // torch raises
      d = s;
    }
  }
  if (dx >= 2) sizes.push_back(x.sizes[dx - 2]);
  if (dy >= 2) sizes.push_back(y.sizes.back());
  return fresh_result(x.dt, std::move(sizes), grad && (x.requires_grad || y.requires_grad));
}

// layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5): input's shape and dtype, contiguous
// whatever the input's layout (the CPU and CUDA kernels normalise a contiguous copy into a contiguous output).
std::optional<ComputedMeta> layer_norm(PyObject* args, PyObject* kwargs, bool grad) {
  std::vector<PyObject*> a;
  Arg x, w, b;
  std::vector<int64_t> shape;
  if (!bind_args(args, kwargs, {"input", "normalized_shape", "weight", "bias", "eps"}, 2, &a) ||
      !read_tensor(a[0], &x, /*any_layout=*/true) ||
      !is_float(x.dt) || !read_ints(a[1], &shape) || shape.empty() || shape.size() > x.sizes.size() ||
      !std::equal(shape.begin(), shape.end(), x.sizes.end() - shape.size()))
    return std::nullopt;
  for (auto [o, t] : {std::pair{a[2], &w}, std::pair{a[3], &b}})
    if (!none(o) && (!read_tensor(o, t) || t->dt != x.dt || t->sizes != shape)) return std::nullopt;
  if (a[4] && !PyFloat_CheckExact(a[4]) && !PyLong_CheckExact(a[4])) return std::nullopt;
  return fresh_result(x.dt, x.sizes, grad && (x.requires_grad || w.requires_grad || b.requires_grad));
}

// The sizes of a reduction of `x` over `dim` (None: all), keeping reduced dimensions as 1 with `keepdim`; false
// where the meta call should decide (dim=[], repeated or out-of-range dimensions, a 0-d input with a dim).
// `reduced_empty`: a reduced dimension has size 0.
bool reduced_sizes(const Arg& x, PyObject* dim, PyObject* keepdim, std::vector<int64_t>* sizes, bool* reduced_empty) {
  if (keepdim && !PyBool_Check(keepdim)) return false;
  const size_t ndim = x.sizes.size();
  std::vector<bool> reduced(ndim, none(dim));
  if (!none(dim)) {
    if (ndim == 0) return false;
    std::vector<PyObject*> dims;
    if (PyTuple_Check(dim) || PyList_Check(dim)) {
      for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(dim); ++i) dims.push_back(PySequence_Fast_GET_ITEM(dim, i));
    } else {
      dims.push_back(dim);
    }
    if (dims.empty()) return false;  // dim=[] reduces everything: left to the meta call
    for (PyObject* d : dims) {
      int64_t i = wrap_dim(d, ndim);
      if (i < 0 || reduced[i]) return false;  // torch raises on repeated dimensions
      reduced[i] = true;
    }
  }
  *reduced_empty = false;
  for (size_t i = 0; i < ndim; ++i) {
    if (!reduced[i]) sizes->push_back(x.sizes[i]);
    else if (keepdim == Py_True) sizes->push_back(1);
    *reduced_empty |= reduced[i] && x.sizes[i] == 0;
  }
  return true;
}

// linalg_vector_norm(input, ord=2, dim=None, keepdim=False, *, dtype=None) of a real floating input. A reduced
// dimension of size 0, other dtypes and a dtype= are left to the meta call (which raises where torch does).
std::optional<ComputedMeta> vector_norm(PyObject* args, PyObject* kwargs, bool grad) {
  std::vector<PyObject*> a;
  Arg x;
  if (!bind_args(args, kwargs, {"input", "ord", "dim", "keepdim"}, 1, &a) || !read_tensor(a[0], &x) ||
      !is_float(x.dt) || (a[1] && !PyFloat_CheckExact(a[1]) && !PyLong_CheckExact(a[1])))
    return std::nullopt;
  std::vector<int64_t> sizes;
  bool reduced_empty = false;
  if (!reduced_sizes(x, a[2], a[3], &sizes, &reduced_empty) || reduced_empty) return std::nullopt;
  return fresh_result(x.dt, std::move(sizes), grad && x.requires_grad);
}

// sum / mean(input, dim=None, keepdim=False): integral sums are int64; means need floating inputs.
std::optional<ComputedMeta> reduction(Op op, PyObject* args, PyObject* kwargs, bool grad) {
  std::vector<PyObject*> a;
  Arg x;
  if (!bind_args(args, kwargs, {"input", "dim", "keepdim"}, 1, &a) || !read_tensor(a[0], &x)) return std::nullopt;
  std::vector<int64_t> sizes;
  bool reduced_empty = false;
  if (!reduced_sizes(x, a[1], a[2], &sizes, &reduced_empty)) return std::nullopt;
  int8_t dt = x.dt;
  if (!is_float(dt)) {
    if (op == Op::Mean) return std::nullopt;
    dt = kI64;
  }
  return fresh_result(dt, std::move(sizes), grad && x.requires_grad);
}

// cat(tensors, dim=0) of tensors of one dtype and rank.
std::optional<ComputedMeta> cat(PyObject* args, PyObject* kwargs, bool grad) {
  std::vector<PyObject*> a;
  if (!bind_args(args, kwargs, {"tensors", "dim"}, 1, &a) || !(PyTuple_Check(a[0]) || PyList_Check(a[0])) ||
      PySequence_Fast_GET_SIZE(a[0]) == 0)
    return std::nullopt;
  std::vector<int64_t> sizes;
  int8_t dt = kNone;
  int64_t dim = -1;
  bool requires_grad = false;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(a[0]); ++i) {
    Arg t;
    if (!read_tensor(PySequence_Fast_GET_ITEM(a[0], i), &t) || t.sizes.empty()) return std::nullopt;
    if (i == 0) {
      sizes = t.sizes;
      dt = t.dt;
      dim = a[1] ? wrap_dim(a[1], sizes.size()) : 0;
      if (dim < 0) return std::nullopt;
    } else {
      if (t.dt != dt || t.sizes.size() != sizes.size()) return std::nullopt;
      for (size_t d = 0; d < sizes.size(); ++d)
        if (d != size_t(dim) && t.sizes[d] != sizes[d]) return std::nullopt;
      sizes[dim] += t.sizes[dim];
    }
    requires_grad |= t.requires_grad;
  }
  return fresh_result(dt, std::move(sizes), grad && is_float(dt) && requires_grad);
}

// softmax / log_softmax(input, dim, dtype=None) of a floating tensor, and F.softmax / F.log_softmax(input,
// dim=None, _stacklevel=3, dtype=None) with a dim: a contiguous result of `dtype` (else input's), input's shape.
std::optional<ComputedMeta> softmax(Op op, PyObject* args, PyObject* kwargs, bool grad) {
  std::vector<PyObject*> a;
  const bool functional = op == Op::SoftmaxF;
  const bool bound = functional ? bind_args(args, kwargs, {"input", "dim", "_stacklevel", "dtype"}, 1, &a)
                                : bind_args(args, kwargs, {"input", "dim", "dtype"}, 2, &a);
  Arg x;
  if (!bound || !read_tensor(a[0], &x) || !is_float(x.dt) || none(a[1])) return std::nullopt;  // F's dim=None: legacy
  if (functional && a[2] && !PyLong_CheckExact(a[2])) return std::nullopt;
  PyObject* dtype = functional ? a[3] : a[2];
  if (wrap_dim(a[1], x.sizes.size()) < 0) return std::nullopt;
  int8_t dt = x.dt;
  if (!none(dtype) && !is_float(dt = dtypes().index(dtype))) return std::nullopt;
  return fresh_result(dt, x.sizes, grad && x.requires_grad);
}

// masked_fill(input, mask, value) of a row-major floating input, a bool mask that broadcasts to input's shape and
// a Python number: input's shape and dtype, contiguous. (A mask that expands the input gets size-1 strides from
// the meta call that the fast path does not reproduce: left to it.)
std::optional<ComputedMeta> masked_fill(PyObject* args, PyObject* kwargs, bool grad) {
  std::vector<PyObject*> a;
  Arg x, mask;
  if (!bind_args(args, kwargs, {"input", "mask", "value"}, 3, &a) || !read_tensor(a[0], &x) || !is_float(x.dt) ||
      !read_tensor(a[1], &mask, /*any_layout=*/true) || mask.dt != kBool || mask.sizes.size() > x.sizes.size() ||
      !(PyFloat_CheckExact(a[2]) || PyLong_CheckExact(a[2]) || PyBool_Check(a[2])))
    return std::nullopt;
  const size_t off = x.sizes.size() - mask.sizes.size();
  for (size_t i = 0; i < mask.sizes.size(); ++i)
    if (mask.sizes[i] != 1 && mask.sizes[i] != x.sizes[off + i]) return std::nullopt;
  if (x.dt == kF16) {  // torch refuses a finite value beyond half's range; the meta call says how
    const double v = PyFloat_AsDouble(a[2]);
    if (PyErr_Occurred()) PyErr_Clear();
    if (!(std::isinf(v) || std::fabs(v) <= 65504.0)) return std::nullopt;
  }
  return fresh_result(x.dt, x.sizes, grad && x.requires_grad);
}

// triu / tril(input, diagonal=0) of a row-major input of at least 2 dimensions: input's shape and dtype.
std::optional<ComputedMeta> triangle(PyObject* args, PyObject* kwargs, bool grad) {
  std::vector<PyObject*> a;
  Arg x;
  if (!bind_args(args, kwargs, {"input", "diagonal"}, 1, &a) || !read_tensor(a[0], &x) || x.sizes.size() < 2 ||
      (a[1] && !PyLong_CheckExact(a[1])))
    return std::nullopt;
  return fresh_result(x.dt, x.sizes, grad && is_float(x.dt) && x.requires_grad);
}

}  // namespace

std::optional<ComputedMeta> nn_meta(PyObject* target, PyObject* args, PyObject* kwargs, bool grad_enabled) {
  const auto& tb = table();
  auto it = tb.find(target);
  if (it == tb.end() || !PyTuple_Check(args) || PyTuple_GET_SIZE(args) == 0) return std::nullopt;
  switch (it->second) {
    case Op::Linear: return linear(args, kwargs, grad_enabled);
    case Op::Matmul: return matmul(args, kwargs, grad_enabled);
    case Op::LayerNorm: return layer_norm(args, kwargs, grad_enabled);
    case Op::Sum:
    case Op::Mean: return reduction(it->second, args, kwargs, grad_enabled);
    case Op::VectorNorm: return vector_norm(args, kwargs, grad_enabled);
    case Op::Cat: return cat(args, kwargs, grad_enabled);
    case Op::Softmax:
    case Op::SoftmaxF: return softmax(it->second, args, kwargs, grad_enabled);
    case Op::MaskedFill: return masked_fill(args, kwargs, grad_enabled);
    case Op::Triangle: return triangle(args, kwargs, grad_enabled);
  }
  return std::nullopt;
}

}  // namespace fastcomp::frontend
