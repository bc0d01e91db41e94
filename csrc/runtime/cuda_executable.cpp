// Runs a fusion plan: per call, allocates the plan's buffers through torch (so the caching allocator and
// torch.cuda.memory_allocated stay true), then goes through the steps on torch's current stream - kernel
// launches and cuBLASLt calls straight from C++, extern steps as calls into torch - and returns the output
// tensors. Buffers are released after their last use; the allocator orders reuse on the stream.
#include "runtime/cuda_executable.h"

#include <fmt/format.h>

#include <chrono>
#include <functional>

#include "frontend/trace/torch_refs.h"
#include "runtime/arg_values.h"
#include "runtime/cuda/arch.h"
#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/driver.h"
#include "runtime/cuda/module.h"
#include "runtime/cuda/nvrtc.h"
#include "support/log.h"
#include "support/pystr.h"

namespace fastcomp::runtime {
namespace {

namespace cuda = runtime::cuda;
using plan::Buffer;
using plan::Step;

constexpr size_t kCublasWorkspaceBytes = 4 << 20;
constexpr const char* kProgramName = "fastcomp_graph";

cuda::ScalarType scalar_type(codegen::DType t) {
  switch (t) {
    case codegen::DType::F16: return cuda::ScalarType::F16;
    case codegen::DType::BF16: return cuda::ScalarType::BF16;
    default: return cuda::ScalarType::F32;
  }
}

cuda::Epilogue epilogue(plan::MatmulStep::Epilogue e) {
  switch (e) {
    case plan::MatmulStep::Epilogue::None: return cuda::Epilogue::None;
    case plan::MatmulStep::Epilogue::Bias: return cuda::Epilogue::Bias;
    case plan::MatmulStep::Epilogue::Relu: return cuda::Epilogue::Relu;
    case plan::MatmulStep::Epilogue::ReluBias: return cuda::Epilogue::ReluBias;
    case plan::MatmulStep::Epilogue::GeluTanh: return cuda::Epilogue::Gelu;
    case plan::MatmulStep::Epilogue::GeluTanhBias: return cuda::Epilogue::GeluBias;
  }
  return cuda::Epilogue::None;
}

// A torch global flag read through its getter, e.g. torch._C._get_cublas_allow_tf32().
bool torch_flag(const char* getter) {
  PyRef fn = PyRef::steal(PyObject_GetAttrString(frontend::torch_refs().torch.get(), "_C"));
  if (fn) fn = PyRef::steal(PyObject_GetAttrString(fn.get(), getter));
  PyRef v = fn ? PyRef::steal(PyObject_CallNoArgs(fn.get())) : PyRef();
  if (!v) {
    PyErr_Clear();
    return false;
  }
  return v.get() == Py_True;
}

PyObject* int_tuple(const std::vector<int64_t>& v) {  // new reference
  PyObject* t = PyTuple_New(v.size());
  for (size_t i = 0; i < v.size(); ++i) PyTuple_SET_ITEM(t, i, PyLong_FromLongLong(v[i]));
  return t;
}

PyRef torch_dtype(codegen::DType t) {
  static const std::pair<codegen::DType, const char*> kNames[] = {
      {codegen::DType::F32, "float32"}, {codegen::DType::F16, "float16"}, {codegen::DType::BF16, "bfloat16"},
      {codegen::DType::F64, "float64"}, {codegen::DType::I64, "int64"},   {codegen::DType::I32, "int32"},
      {codegen::DType::I16, "int16"},   {codegen::DType::I8, "int8"},     {codegen::DType::U8, "uint8"},
      {codegen::DType::Bool, "bool"}};
  for (auto& [d, name] : kNames)
    if (d == t) return PyRef::steal(PyObject_GetAttrString(frontend::torch_refs().torch.get(), name));
  return {};
}

class CudaExecutable final : public Executable {
 public:
  CudaExecutable(graph::Graph graph, plan::Program program, const CudaSource& source,
                 std::shared_ptr<const std::string> binary)
      : graph_(std::move(graph)), program_(std::move(program)) {
    const auto start = std::chrono::steady_clock::now();
    const auto& T = frontend::torch_refs();
    const int device = program_.device;
    if (!source.program.empty()) {
      module_ = std::make_unique<cuda::LoadedModule>(*binary, device);
      cuda::ContextGuard guard(device);
      for (const codegen::KernelSource& k : source.kernels) {
        Launch l;
        l.function = module_->get_function(k.name);
        l.grid = {static_cast<unsigned>(k.grid), 1, 1};
        l.block = {static_cast<unsigned>(k.block), 1, 1};
        l.shared = static_cast<unsigned>(k.shared_bytes);
        if (k.shared_bytes > 48 * 1024) cuda::set_max_dynamic_shared_memory(l.function, k.shared_bytes);
        launches_.push_back(l);
      }
    }
    const bool tf32 = torch_flag("_get_cublas_allow_tf32");
    const bool fp16_reduction = torch_flag("_get_cublas_allow_fp16_reduced_precision_reduction");
    const bool bf16_reduction = torch_flag("_get_cublas_allow_bf16_reduced_precision_reduction");
    for (const plan::MatmulStep& s : program_.matmul_steps) {
      cuda::MatmulDesc d;
      d.m = s.m;
      d.n = s.n;
      d.k = s.k;
      d.batch = s.batch;
      d.dtype = scalar_type(s.dtype);
      d.a_row_stride = s.a_row_stride;
      d.a_col_stride = s.a_col_stride;
      d.a_batch_stride = s.a_batch_stride;
      d.b_row_stride = s.b_row_stride;
      d.b_col_stride = s.b_col_stride;
      d.b_batch_stride = s.b_batch_stride;
      d.d_row_stride = s.d_row_stride;
      d.d_batch_stride = s.d_batch_stride;
      d.epilogue = epilogue(s.epilogue);
      d.allow_tf32 = tf32;
      d.allow_reduced_precision_reduction = s.dtype == codegen::DType::F16 ? fp16_reduction : bf16_reduction;
      matmuls_.push_back(std::make_unique<cuda::MatmulPlan>(d, device, kCublasWorkspaceBytes));
    }
    // Per-call allocation arguments: torch.empty_strided(sizes, strides, dtype=, device=).
    device_ = PyRef::steal(PyObject_CallFunction(T.device_type.get(), "si", "cuda", device));
    if (!device_) throw std::runtime_error("fastcomp: cannot make torch.device('cuda', " + std::to_string(device) + ")");
    alloc_kwnames_ = PyRef::steal(Py_BuildValue("(ss)", "dtype", "device"));
    allocs_.resize(program_.buffers.size());
    for (size_t b = 0; b < program_.buffers.size(); ++b) {
      const Buffer& buf = program_.buffers[b];
      if (buf.kind != Buffer::Kind::Alloc && buf.kind != Buffer::Kind::Extern) continue;
      allocs_[b].sizes = PyRef::steal(int_tuple(buf.sizes));
      allocs_[b].strides = PyRef::steal(int_tuple(buf.strides));
      allocs_[b].dtype = torch_dtype(buf.dtype);
    }
    if (!matmuls_.empty()) {
      PyRef empty = PyRef::steal(PyObject_GetAttrString(T.torch.get(), "empty"));
      PyRef args = PyRef::steal(Py_BuildValue("(n)", static_cast<Py_ssize_t>(kCublasWorkspaceBytes)));
      PyRef kwargs = PyRef::steal(PyDict_New());
      PyDict_SetItemString(kwargs.get(), "dtype", torch_dtype(codegen::DType::U8).get());
      PyDict_SetItemString(kwargs.get(), "device", device_.get());
      workspace_ = PyRef::steal(PyObject_Call(empty.get(), args.get(), kwargs.get()));
      if (!workspace_) throw std::runtime_error("fastcomp: cannot allocate the cuBLASLt workspace: " + take_error_message());
      workspace_ptr_ = data_ptr(workspace_.get());
    }
    PyRef c = PyRef::steal(PyObject_GetAttrString(T.torch.get(), "_C"));
    current_stream_ = PyRef::steal(PyObject_GetAttrString(c.get(), "_cuda_getCurrentRawStream"));
    if (!current_stream_) throw std::runtime_error("fastcomp: torch._C._cuda_getCurrentRawStream is missing");
    device_index_ = PyRef::steal(PyLong_FromLong(device));
    plan_lifetimes();
    FC_LOG(compile, debug, "cuda executable: loaded {} kernels and planned {} cuBLASLt calls in {:.1f} ms",
           launches_.size(), matmuls_.size(),
           std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }

  PyObject* run(PyObject* const* inputs, size_t ninputs) override {
    const size_t nb = program_.buffers.size();
    std::vector<PyObject*> objects(graph_.nodes.size(), nullptr);  // owned
    std::vector<PyObject*> tensors(nb, nullptr);                   // owned: each root buffer's tensor
    std::vector<char*> ptr(nb, nullptr);
    struct Cleanup {
      std::vector<PyObject*>& a;
      std::vector<PyObject*>& b;
      ~Cleanup() {
        for (PyObject* o : a) Py_XDECREF(o);
        for (PyObject* o : b) Py_XDECREF(o);
      }
    } cleanup{objects, tensors};

    for (size_t b = 0; b < nb; ++b) {
      const Buffer& buf = program_.buffers[b];
      if (buf.kind != Buffer::Kind::Input) continue;
      PyObject* t = inputs[buf.input];
      tensors[b] = Py_NewRef(t);
      if (!(ptr[b] = data_ptr(t)) && PyErr_Occurred()) return nullptr;
    }
    for (size_t i = 0; i < ninputs; ++i) objects[graph_.inputs[i]] = Py_NewRef(inputs[i]);

    PyRef stream_obj = PyRef::steal(PyObject_CallOneArg(current_stream_.get(), device_index_.get()));
    if (!stream_obj) return nullptr;
    auto stream = reinterpret_cast<cuda::CUstream>(PyLong_AsVoidPtr(stream_obj.get()));

    std::vector<void*> params;  // one kernel's parameter slots, reused by every launch of this call
    try {
      cuda::ContextGuard guard(program_.device);
      for (size_t si = 0; si < program_.steps.size(); ++si) {
        const Step& s = program_.steps[si];
        for (int b : allocs_before_[si])
          if (!allocate(b, tensors, ptr, objects)) return nullptr;
        switch (s.kind) {
          case Step::Kind::Kernel: {
            // Each kernel parameter is a root buffer's pointer; cuLaunchKernel copies the values it points at.
            const plan::KernelStep& k = program_.kernel_steps[s.index];
            params.clear();
            for (int b : k.args) params.push_back(&ptr[program_.buffers[b].root]);
            const Launch& l = launches_[k.kernel];
            cuda::launch(l.function, l.grid, l.block, l.shared, stream, params.data());
            break;
          }
          case Step::Kind::Matmul: {
            const plan::MatmulStep& m = program_.matmul_steps[s.index];
            matmuls_[s.index]->run(address(m.a, ptr), address(m.b, ptr), nullptr, address(m.d, ptr),
                                   m.bias >= 0 ? address(m.bias, ptr) : nullptr, workspace_ptr_, stream);
            break;
          }
          case Step::Kind::Extern:
            if (!run_extern(program_.extern_steps[s.index].node, objects, tensors, ptr)) return nullptr;
            break;
        }
        for (int b : frees_after_[si]) Py_CLEAR(tensors[b]);
        for (int n : node_frees_after_[si]) Py_CLEAR(objects[n]);
      }
    } catch (const std::exception& e) {
      PyErr_SetString(PyExc_RuntimeError, fmt::format("fastcomp: CUDA executable failed: {}", e.what()).c_str());
      return nullptr;
    }
    return new_arg(graph_.output, objects);
  }

  std::string describe() const override {
    return "cuda: " + program_.counts_text();
  }

 private:
  struct Launch {
    cuda::CUfunction function = nullptr;
    cuda::Dim3 grid, block;
    unsigned shared = 0;
  };
  struct AllocArgs {
    PyRef sizes, strides, dtype;
  };

  static char* data_ptr(PyObject* t) {
    static PyObject* name = PyUnicode_InternFromString("data_ptr");
    PyRef p = PyRef::steal(PyObject_CallMethodNoArgs(t, name));
    return p ? static_cast<char*>(PyLong_AsVoidPtr(p.get())) : nullptr;
  }

  char* address(int b, const std::vector<char*>& ptr) const {
    const Buffer& buf = program_.buffers[b];
    return ptr[buf.root] + buf.offset * codegen::dtype_size(buf.dtype);
  }

  PyObject* empty_strided(const AllocArgs& a) const {  // new reference
    PyObject* argv[] = {nullptr, a.sizes.get(), a.strides.get(), a.dtype.get(), device_.get()};
    return PyObject_Vectorcall(frontend::torch_refs().empty_strided.get(), argv + 1,
                               2 | PY_VECTORCALL_ARGUMENTS_OFFSET, alloc_kwnames_.get());
  }

  bool allocate(int b, std::vector<PyObject*>& tensors, std::vector<char*>& ptr, std::vector<PyObject*>& objects) {
    PyObject* t = empty_strided(allocs_[b]);
    if (!t) return false;
    tensors[b] = t;
    if (!(ptr[b] = data_ptr(t)) && PyErr_Occurred()) return false;
    const int node = program_.buffers[b].node;
    if (node >= 0 && program_.node_object[node] && !objects[node]) objects[node] = Py_NewRef(t);
    return true;
  }

  bool run_extern(graph::NodeId id, std::vector<PyObject*>& objects, std::vector<PyObject*>& tensors,
                  std::vector<char*>& ptr) {
    const graph::Node& node = graph_.nodes[id];
    std::vector<PyObject*> argv{nullptr};
    std::vector<PyRef> temps;
    for (const auto& a : node.args) argv.push_back(borrow_arg(a, objects, temps));
    for (const auto& a : node.kwargs) argv.push_back(borrow_arg(a, objects, temps));
    for (size_t i = 1; i < argv.size(); ++i)
      if (!argv[i]) return false;
    PyObject* out = PyObject_Vectorcall(node.target.get(), argv.data() + 1,
                                        node.args.size() | PY_VECTORCALL_ARGUMENTS_OFFSET, node.kwnames.get());
    if (!out) return false;
    Py_XSETREF(objects[id], out);
    const int b = program_.node_buffer[id];
    if (b >= 0 && program_.buffers[b].kind == Buffer::Kind::Extern) {
      Py_XSETREF(tensors[b], Py_NewRef(out));
      if (!(ptr[b] = data_ptr(out)) && PyErr_Occurred()) return false;
      if (check_layout_[b] && !has_layout(out, program_.buffers[b])) {
        // torch's meta function predicted other strides than the real op produced: kernels read a copy in
        // the planned layout (the user's object stays the op's own result).
        PyObject* planned = empty_strided(allocs_[b]);
        if (!planned) return false;
        PyRef copied = PyRef::steal(PyObject_CallMethod(planned, "copy_", "O", out));
        Py_XSETREF(tensors[b], planned);
        if (!copied || (!(ptr[b] = data_ptr(planned)) && PyErr_Occurred())) return false;
      }
    }
    return true;
  }

  static bool has_layout(PyObject* t, const Buffer& b) {
    PyRef strides = PyRef::steal(PyObject_CallMethod(t, "stride", nullptr));
    if (!strides || !PyTuple_Check(strides.get()) || PyTuple_GET_SIZE(strides.get()) != Py_ssize_t(b.strides.size())) {
      PyErr_Clear();
      return false;
    }
    for (size_t d = 0; d < b.strides.size(); ++d)
      if (b.sizes[d] != 1 && PyLong_AsLongLong(PyTuple_GET_ITEM(strides.get(), d)) != b.strides[d]) return false;
    return true;
  }

  // When each Alloc buffer is allocated (before its first writer) and when buffers and node objects die (after
  // their last reader); outputs live to the end.
  void plan_lifetimes() {
    const size_t nsteps = program_.steps.size();
    const size_t nb = program_.buffers.size();
    allocs_before_.assign(nsteps, {});
    frees_after_.assign(nsteps, {});
    node_frees_after_.assign(nsteps, {});
    check_layout_.assign(nb, false);
    std::vector<int> first_write(nb, -1), last_use(nb, -1), node_last_use(graph_.nodes.size(), -1);
    auto use = [&](int b, int step) {
      const int r = program_.buffers[b].root;
      last_use[r] = std::max(last_use[r], step);
      if (program_.buffers[r].kind == Buffer::Kind::Extern) check_layout_[r] = true;
    };
    auto write = [&](int b, int step) {
      const int r = program_.buffers[b].root;
      if (first_write[r] < 0) first_write[r] = step;
      last_use[r] = std::max(last_use[r], step);
    };
    std::function<void(const graph::Arg&, int)> node_use = [&](const graph::Arg& a, int step) {
      if (a.kind == graph::Arg::Kind::Node) node_last_use[a.node] = std::max(node_last_use[a.node], step);
      for (const auto& item : a.items) node_use(item, step);
    };
    for (size_t si = 0; si < nsteps; ++si) {
      const Step& s = program_.steps[si];
      const int step = static_cast<int>(si);
      if (s.kind == Step::Kind::Kernel) {
        const plan::KernelStep& k = program_.kernel_steps[s.index];
        const size_t ninputs = program_.kernels[k.kernel].inputs.size();
        for (size_t i = 0; i < k.args.size(); ++i) i < ninputs ? use(k.args[i], step) : write(k.args[i], step);
      } else if (s.kind == Step::Kind::Matmul) {
        const plan::MatmulStep& m = program_.matmul_steps[s.index];
        use(m.a, step);
        use(m.b, step);
        if (m.bias >= 0) use(m.bias, step);
        write(m.d, step);
      } else {
        const graph::Node& n = graph_.nodes[program_.extern_steps[s.index].node];
        for (const auto& a : n.args) node_use(a, step);
        for (const auto& a : n.kwargs) node_use(a, step);
        // A node's object keeps its storage alive, but the buffer of an Alloc node also feeds the object.
        std::function<void(const graph::Arg&)> buffers_of = [&](const graph::Arg& a) {
          if (a.kind == graph::Arg::Kind::Node && program_.node_buffer[a.node] >= 0)
            use(program_.node_buffer[a.node], step);
          for (const auto& item : a.items) buffers_of(item);
        };
        for (const auto& a : n.args) buffers_of(a);
        for (const auto& a : n.kwargs) buffers_of(a);
        const int b = program_.node_buffer[n.id];
        if (b >= 0 && program_.buffers[b].kind == Buffer::Kind::Extern) write(b, step);
      }
    }
    const int end = static_cast<int>(nsteps);
    node_use(graph_.output, end);
    std::function<void(const graph::Arg&)> output_buffers = [&](const graph::Arg& a) {
      if (a.kind == graph::Arg::Kind::Node && program_.node_buffer[a.node] >= 0) use(program_.node_buffer[a.node], end);
      for (const auto& item : a.items) output_buffers(item);
    };
    output_buffers(graph_.output);
    for (size_t b = 0; b < nb; ++b) {
      const Buffer& buf = program_.buffers[b];
      if (buf.kind == Buffer::Kind::Alloc && first_write[b] >= 0) allocs_before_[first_write[b]].push_back(int(b));
      if (buf.kind != Buffer::Kind::View && last_use[b] >= 0 && last_use[b] < end)
        frees_after_[last_use[b]].push_back(int(b));
    }
    for (size_t n = 0; n < node_last_use.size(); ++n)
      if (node_last_use[n] >= 0 && node_last_use[n] < end && graph_.nodes[n].kind != graph::NodeKind::Input)
        node_frees_after_[node_last_use[n]].push_back(int(n));
  }

  graph::Graph graph_;
  plan::Program program_;
  std::unique_ptr<cuda::LoadedModule> module_;
  std::vector<Launch> launches_;  // per program kernel
  std::vector<std::unique_ptr<cuda::MatmulPlan>> matmuls_;
  std::vector<AllocArgs> allocs_;
  PyRef device_, alloc_kwnames_, workspace_, current_stream_, device_index_;
  void* workspace_ptr_ = nullptr;
  std::vector<std::vector<int>> allocs_before_, frees_after_, node_frees_after_;
  std::vector<bool> check_layout_;
};

}  // namespace

codegen::DeviceLimits device_limits(int device) {
  const cuda::DeviceInfo& info = cuda::device_info(device);
  codegen::DeviceLimits limits;
  limits.sm_count = info.sm_count;
  limits.max_threads_per_block = info.max_threads_per_block;
  limits.max_threads_per_sm = info.max_threads_per_sm;
  return limits;
}

CudaSource emit_plan(const plan::Program& program, const codegen::DeviceLimits& limits) {
  CudaSource out;
  for (const codegen::Kernel& k : program.kernels) out.kernels.push_back(codegen::emit_cuda(k, limits));
  if (!out.kernels.empty()) out.program = codegen::emit_program(out.kernels);
  return out;
}

std::shared_ptr<const std::string> compile_plan(const plan::Program& program, const CudaSource& source) {
  if (source.program.empty()) return nullptr;
  return cuda::compile_cuda_cached(source.program, kProgramName, cuda::device_info(program.device).arch,
                                   cuda::Output::Cubin, {});
}

std::shared_ptr<const std::string> cached_plan_binary(const plan::Program& program, const CudaSource& source) {
  if (source.program.empty()) return nullptr;
  return cuda::cached_cuda_binary(source.program, kProgramName, cuda::device_info(program.device).arch,
                                  cuda::Output::Cubin, {});
}

std::unique_ptr<Executable> make_cuda_executable(graph::Graph graph, plan::Program program, const CudaSource& source,
                                                 std::shared_ptr<const std::string> binary) {
  return std::make_unique<CudaExecutable>(std::move(graph), std::move(program), source, std::move(binary));
}

}  // namespace fastcomp::runtime
