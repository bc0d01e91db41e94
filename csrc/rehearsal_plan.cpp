#include "rehearsal_plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cpython/pyref.h"
#include "runtime/cuda_executable.h"

namespace fastcomp {
namespace {

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\u{:04x}", c);
        else out += c;
    }
  }
  return out + "\"";
}

// A size as JSON: a number, or under dynamic shapes its expression over s0, s1, ... as text ("33*s0",
// "(s0 + 1)//2": Python's syntax and floor semantics).
std::string size(const codegen::Size& v) { return v.is_static() ? std::to_string(v.hint()) : quoted(v.to_string()); }
std::string size(const graph::Sym& e) { return quoted(graph::str(e)); }

std::string sizes(const codegen::Sizes& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + size(v[i]);
  return out + "]";
}

const char* kind_name(plan::Buffer::Kind k) {
  switch (k) {
    case plan::Buffer::Kind::Input: return "input";
    case plan::Buffer::Kind::Alloc: return "alloc";
    case plan::Buffer::Kind::Extern: return "extern";
    case plan::Buffer::Kind::View: return "view";
  }
  return "?";
}

const char* epilogue_text(plan::MatmulStep::Epilogue e) {
  switch (e) {
    case plan::MatmulStep::Epilogue::None: return "none";
    case plan::MatmulStep::Epilogue::Bias: return "bias";
    case plan::MatmulStep::Epilogue::Relu: return "relu";
    case plan::MatmulStep::Epilogue::ReluBias: return "relu_bias";
    case plan::MatmulStep::Epilogue::GeluTanh: return "gelu_tanh";
    case plan::MatmulStep::Epilogue::GeluTanhBias: return "gelu_tanh_bias";
  }
  return "?";
}

void output_nodes(const graph::Arg& a, std::vector<graph::NodeId>* out) {
  if (a.kind == graph::Arg::Kind::Node) out->push_back(a.node);
  for (const graph::Arg& item : a.items) output_nodes(item, out);
}

PyObject*& observer_slot() {
  static PyObject* observer = nullptr;  // a strong reference; set and read with the GIL held
  return observer;
}

class ObservedRehearsal : public runtime::Executable {
 public:
  ObservedRehearsal(std::unique_ptr<runtime::Executable> runner, std::string plan_json)
      : runner_(std::move(runner)), plan_json_(std::move(plan_json)) {}

  PyObject* run(PyObject* const* inputs, size_t ninputs) override {
    PyObject* out = runner_->run(inputs, ninputs);
    PyObject* observer = rehearsal_observer();
    if (!out || !observer) return out;
    PyRef result = PyRef::steal(out);
    PyRef args = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(ninputs)));
    if (!args) return nullptr;
    for (size_t i = 0; i < ninputs; ++i) PyTuple_SET_ITEM(args.get(), i, Py_NewRef(inputs[i]));
    if (!plan_text_) {  // made once: a plan is observed on every call
      plan_text_ = PyRef::steal(PyUnicode_FromStringAndSize(plan_json_.data(), Py_ssize_t(plan_json_.size())));
      if (!plan_text_) return nullptr;
    }
    PyRef seen = PyRef::steal(PyObject_CallFunctionObjArgs(observer, plan_text_.get(), args.get(), result.get(), nullptr));
    if (!seen) return nullptr;
    return result.release();
  }
  std::string describe() const override { return runner_->describe(); }

 private:
  std::unique_ptr<runtime::Executable> runner_;
  std::string plan_json_;
  PyRef plan_text_;  // plan_json_ as a Python str
};

}  // namespace

std::string rehearsal_plan_json(const plan::Program& program, const graph::Graph& graph) {
  codegen::DeviceLimits cpu_sized;  // grids for two SMs: each CUDA thread is a host thread on the CPU
  cpu_sized.sm_count = 2;
  // Both programs, as the executable has them: vector accesses where the launch's pointers are aligned for them,
  // scalar ones otherwise (CudaExecutable::run's choice, which plan_on_cpu.py repeats).
  const runtime::CudaSource source = runtime::emit_plan(program, cpu_sized, codegen::PointerAlignment::Vector);
  const runtime::CudaSource any = runtime::emit_plan(program, cpu_sized, codegen::PointerAlignment::Any);
  std::string out = "{\"symbols\": [";
  for (size_t i = 0; i < program.symbols.size(); ++i)
    out += fmt::format("{}[{},{}]", i ? "," : "", program.symbols[i].input, program.symbols[i].dim);
  out += "], \"buffers\": [";
  for (size_t i = 0; i < program.buffers.size(); ++i) {
    const plan::Buffer& b = program.buffers[i];
    out += fmt::format("{}{{\"kind\": \"{}\", \"input\": {}, \"root\": {}, \"dtype\": \"{}\", \"sizes\": {}, "
                       "\"strides\": {}, \"offset\": {}}}",
                       i ? ", " : "", kind_name(b.kind), b.input, b.root, codegen::dtype_name(b.dtype),
                       sizes(b.sizes), sizes(b.strides), size(b.offset));
  }
  out += "], \"steps\": [";
  for (size_t si = 0; si < program.steps.size(); ++si) {
    const plan::Step& s = program.steps[si];
    out += si ? ", " : "";
    switch (s.kind) {
      case plan::Step::Kind::Kernel: {
        const plan::KernelStep& k = program.kernel_steps[s.index];
        const codegen::KernelSource& src = source.kernels[k.kernel];
        const codegen::Kernel& kernel = program.kernels[k.kernel];
        std::string args, vector;
        for (size_t a = 0; a < k.args.size(); ++a) args += (a ? "," : "") + std::to_string(k.args[a]);
        for (const codegen::KernelSource::VectorOperand& v : src.vector_operands) {
          const size_t n_in = kernel.inputs.size();
          const codegen::Operand& op =
              v.operand < int(n_in) ? kernel.inputs[v.operand] : kernel.outputs[v.operand - n_in];
          vector += fmt::format("{}[{},{},{},{}]", vector.empty() ? "" : ",", v.operand, size(v.first),
                                codegen::dtype_size(op.dtype), v.bytes);
        }
        std::string params;
        for (size_t i = 0; i < src.size_params.size(); ++i) params += (i ? "," : "") + size(src.size_params[i]);
        out += fmt::format("{{\"kind\": \"kernel\", \"name\": \"{}\", \"args\": [{}], \"grid\": {}, "
                           "\"block\": {}, \"vector_operands\": [{}], \"size_params\": [{}], \"grid_items\": {}, "
                           "\"items_per_block\": {}}}",
                           src.name, args, src.grid, src.block, vector, params,
                           src.grid_items ? size(src.grid_items) : "null", src.items_per_block);
        break;
      }
      case plan::Step::Kind::Matmul: {
        const plan::MatmulStep& m = program.matmul_steps[s.index];
        out += fmt::format(
            "{{\"kind\": \"matmul\", \"dtype\": \"{}\", \"m\": {}, \"n\": {}, \"k\": {}, \"batch\": {}, \"a\": {}, "
            "\"b\": {}, \"bias\": {}, \"d\": {}, \"a_strides\": [{},{},{}], \"b_strides\": [{},{},{}], "
            "\"d_strides\": [{},{}], \"epilogue\": \"{}\", \"b_next\": [{}], \"bias_next\": [{}]}}",
            codegen::dtype_name(m.dtype), size(m.m), size(m.n), size(m.k), size(m.batch), m.a, m.b, m.bias, m.d,
            size(m.a_batch_stride), size(m.a_row_stride), size(m.a_col_stride), size(m.b_batch_stride),
            size(m.b_row_stride), size(m.b_col_stride), size(m.d_batch_stride), size(m.d_row_stride),
            epilogue_text(m.epilogue), fmt::join(m.b_next, ","), fmt::join(m.bias_next, ","));
        break;
      }
      case plan::Step::Kind::Extern:
        out += fmt::format("{{\"kind\": \"extern\", \"node\": {}}}", program.extern_steps[s.index].node);
        break;
    }
  }
  std::vector<graph::NodeId> outputs;
  output_nodes(graph.output, &outputs);
  std::string output_buffers;
  for (size_t i = 0; i < outputs.size(); ++i)
    output_buffers += (i ? "," : "") + std::to_string(program.node_buffer[outputs[i]]);
  out += fmt::format("], \"outputs\": [{}], \"program\": {}, \"program_any_alignment\": {}}}", output_buffers,
                     quoted(source.program), quoted(any.program));
  return out;
}

PyObject* rehearsal_observer() { return observer_slot(); }

void set_rehearsal_observer(PyObject* observer) {
  PyObject* old = observer_slot();
  observer_slot() = observer && observer != Py_None ? Py_NewRef(observer) : nullptr;
  Py_XDECREF(old);
}

std::unique_ptr<runtime::Executable> observed_rehearsal(std::unique_ptr<runtime::Executable> runner,
                                                         std::string plan_json) {
  return std::make_unique<ObservedRehearsal>(std::move(runner), std::move(plan_json));
}

}  // namespace fastcomp
