// _C._testing entry points for the CUDA emitter: build a codegen::Kernel from plain Python data and emit it, so
// tests can drive emit_cuda / emit_program without the lowering pass.
//
// A kernel spec is a dict:
//   {"name": str, "kind": "pointwise" | "row_reduce" | "column_reduce" | "attention" | "small_matmul", "shape": [int],
//    column_reduce only: "reduced": [dim, ...] (the dimensions it reduces),
//    attention only: "scale": float, "causal": bool, "rounding": "every_step" | "probabilities" | "output", "keys": int,
//    "kv_heads": int (an optional input 3 is the mask),
//    "inputs" / "outputs": [{"dtype": "f32", "strides": [int], "offset": int (optional),
//                            "valid": [dim, begin, end] (optional)}],
//    "exprs": [{"op": "add", "dtype": "f32", "args": [int], "operand": int, "value": float,
//               "range": [dim, begin, end], "gather": [size, stride]}],  (names as in expr_op_name / dtype_name;
//               "args", "operand", "value", "range" and "gather" only where the op has them)
//    "stores": [[expr, output]]}
#include <pybind11/stl.h>

#include <stdexcept>
#include <tuple>

#include "bindings/bind.h"
#include "codegen/kernel_ir.h"

namespace fastcomp::bindings {
namespace {

namespace cg = fastcomp::codegen;

cg::DType parse_dtype(const std::string& name) {
  for (int i = 0; i <= static_cast<int>(cg::DType::F64); ++i)
    if (name == cg::dtype_name(static_cast<cg::DType>(i))) return static_cast<cg::DType>(i);
  throw py::value_error("unknown dtype '" + name + "'");
}

cg::ExprOp parse_op(const std::string& name) {
  for (int i = 0; i <= static_cast<int>(cg::ExprOp::ReduceMin); ++i)
    if (name == cg::expr_op_name(static_cast<cg::ExprOp>(i))) return static_cast<cg::ExprOp>(i);
  throw py::value_error("unknown op '" + name + "'");
}

cg::DimRange parse_range(py::handle h) {
  auto [dim, begin, end] = h.cast<std::tuple<int, int64_t, int64_t>>();
  return cg::DimRange{dim, begin, end};
}

std::vector<cg::Operand> parse_operands(const py::list& items) {
  std::vector<cg::Operand> out;
  for (py::handle h : items) {
    py::dict d = py::reinterpret_borrow<py::dict>(h);
    cg::Operand o;
    o.dtype = parse_dtype(d["dtype"].cast<std::string>());
    o.strides = cg::to_sizes(d["strides"].cast<std::vector<int64_t>>());
    if (d.contains("offset")) o.storage_offset = d["offset"].cast<int64_t>();
    if (d.contains("valid")) o.valid = parse_range(d["valid"]);
    out.push_back(std::move(o));
  }
  return out;
}

cg::Kernel parse_kernel(const py::dict& spec) {
  cg::Kernel k;
  k.name = spec["name"].cast<std::string>();
  const std::string kind = spec["kind"].cast<std::string>();
  if (kind == "pointwise") k.kind = cg::Kernel::Kind::Pointwise;
  else if (kind == "row_reduce") k.kind = cg::Kernel::Kind::RowReduce;
  else if (kind == "column_reduce") k.kind = cg::Kernel::Kind::ColumnReduce;
  else if (kind == "attention") k.kind = cg::Kernel::Kind::Attention;
  else if (kind == "small_matmul") k.kind = cg::Kernel::Kind::SmallMatmul;
  else throw py::value_error("unknown kind '" + kind + "'");
  if (spec.contains("scale")) k.attention_scale = spec["scale"].cast<double>();
  if (spec.contains("causal")) k.attention_causal = spec["causal"].cast<bool>();
  if (spec.contains("keys")) k.attention_keys = spec["keys"].cast<int64_t>();
  if (spec.contains("kv_heads")) k.attention_kv_heads = spec["kv_heads"].cast<int64_t>();
  if (spec.contains("rounding")) {
    const std::string r = spec["rounding"].cast<std::string>();
    if (r != "every_step" && r != "probabilities" && r != "output") throw py::value_error("unknown rounding '" + r + "'");
    k.attention_rounding = r == "every_step"      ? cg::Kernel::AttentionRounding::EveryStep
                           : r == "probabilities" ? cg::Kernel::AttentionRounding::Probabilities
                                                  : cg::Kernel::AttentionRounding::Output;
  }
  k.shape = cg::to_sizes(spec["shape"].cast<std::vector<int64_t>>());
  if (spec.contains("reduced")) {
    k.reduced_dims.assign(k.shape.size(), false);
    for (int d : spec["reduced"].cast<std::vector<int>>()) {
      if (d < 0 || d >= static_cast<int>(k.shape.size())) throw py::value_error("a reduced dimension out of range");
      k.reduced_dims[d] = true;
    }
  }
  k.inputs = parse_operands(spec["inputs"].cast<py::list>());
  k.outputs = parse_operands(spec["outputs"].cast<py::list>());
  for (py::handle h : spec["exprs"].cast<py::list>()) {
    py::dict d = py::reinterpret_borrow<py::dict>(h);
    cg::Expr e;
    e.op = parse_op(d["op"].cast<std::string>());
    e.dtype = parse_dtype(d["dtype"].cast<std::string>());
    if (d.contains("args")) e.args = d["args"].cast<std::vector<int>>();
    if (d.contains("operand")) e.operand = d["operand"].cast<int>();
    if (d.contains("value")) e.constant = d["value"].cast<double>();
    if (d.contains("range")) e.range = parse_range(d["range"]);
    if (d.contains("gather")) {
      auto [size, stride] = d["gather"].cast<std::pair<int64_t, int64_t>>();
      e.gather = {size, stride};
    }
    k.exprs.push_back(std::move(e));
  }
  for (py::handle h : spec["stores"].cast<py::list>()) {
    auto pair = h.cast<std::pair<int, int>>();
    k.stores.push_back({pair.first, pair.second});
  }
  return k;
}

cg::DeviceLimits limits_of(int sm_count) {
  cg::DeviceLimits limits;
  limits.sm_count = sm_count;
  return limits;
}

// The kernels of a list of specs, emitted for a GPU of `sm_count` multiprocessors.
std::vector<cg::KernelSource> emit_specs(const py::list& specs, int sm_count) {
  std::vector<cg::KernelSource> sources;
  for (py::handle h : specs)
    sources.push_back(cg::emit_cuda(parse_kernel(py::reinterpret_borrow<py::dict>(h)), limits_of(sm_count)));
  return sources;
}

}  // namespace

void bind_codegen(py::module_& m) {
  m.def(
      "emit_kernel",
      [](const py::dict& spec, int sm_count) {
        cg::KernelSource src = cg::emit_cuda(parse_kernel(spec), limits_of(sm_count));
        return py::make_tuple(src.code, src.grid, src.block, src.shared_bytes);
      },
      py::arg("spec"), py::arg("sm_count") = 132,
      "CUDA C of one kernel spec (see bind_codegen.cpp): (code, grid, block, shared_bytes).");
  m.def(
      "vector_operands",
      [](const py::dict& spec, int sm_count) {
        py::list out;
        for (const auto& v : cg::emit_cuda(parse_kernel(spec), limits_of(sm_count)).vector_operands)
          out.append(py::make_tuple(v.operand, v.first.to_string(), v.bytes));
        return out;
      },
      py::arg("spec"), py::arg("sm_count") = 132,
      "The kernel's vector operands, whose alignment the launcher checks: [(operand, first element, bytes)].");
  m.def(
      "emit_program",
      [](const py::list& specs, int sm_count, int sm, const std::string& alignment) {
        if (alignment != "vector" && alignment != "any")
          throw py::value_error("alignment is 'vector' or 'any', not '" + alignment + "'");
        std::vector<cg::KernelSource> sources = emit_specs(specs, sm_count);
        return cg::emit_program(sources, {sm / 10, sm % 10},
                                alignment == "vector" ? cg::PointerAlignment::Vector : cg::PointerAlignment::Any);
      },
      py::arg("specs"), py::arg("sm_count") = 132, py::arg("sm") = 90, py::arg("alignment") = "vector",
      "One NVRTC program text for a list of kernel specs, for arch sm_<sm>, for vector-aligned pointers or any.");
  m.def(
      "split_program",
      [](const py::list& specs, int parts, int sm_count, int sm) {
        std::vector<cg::KernelSource> sources = emit_specs(specs, sm_count);
        cg::share_identical_kernels(sources);
        py::list out;
        for (const cg::ProgramPart& part : cg::split_program(sources, {sm / 10, sm % 10}, cg::PointerAlignment::Vector, parts))
          out.append(py::make_tuple(part.source, part.kernels));
        return out;
      },
      py::arg("specs"), py::arg("parts"), py::arg("sm_count") = 132, py::arg("sm") = 90,
      "The specs' kernels (twins shared, as emit_plan does) cut into at most `parts` NVRTC programs: "
      "[(source, [kernel names it defines])].");
  m.def("attention_shared_bytes", &cg::attention_shared_bytes, py::arg("s"), py::arg("d"),
        "Shared memory an attention kernel over s keys of d columns needs at least (bytes).");
  m.def(
      "kernel_text", [](const py::dict& spec) { return parse_kernel(spec).to_string(); }, py::arg("spec"),
      "Kernel::to_string of a kernel spec.");
}

}  // namespace fastcomp::bindings
