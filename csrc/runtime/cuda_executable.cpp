// Runs a fusion plan: per call, allocates the plan's buffers through torch (so the caching allocator and
// torch.cuda.memory_allocated stay true), then goes through the steps on torch's current stream - kernel
// launches and cuBLASLt calls straight from C++, extern steps as calls into torch - and returns the output
// tensors. Buffers are released after their last use; the allocator orders reuse on the stream.
//
// Dynamic shapes: the plan's symbolic sizes are interned in a SizeSlots table at build time; per call the
// symbols are read from the inputs' sizes, every slot is evaluated once, and launch grids, kernel size
// parameters, allocations and cuBLASLt shapes take their values from it. cuBLASLt plans are kept per concrete
// shape (a few most recent per matmul), since choosing an algorithm costs tens of microseconds.
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
#include "runtime/size_slots.h"
#include "support/log.h"
#include "support/pystr.h"

namespace fastcomp::runtime {
namespace {

namespace cuda = runtime::cuda;
using plan::Buffer;
using plan::Step;

constexpr size_t kCublasWorkspaceBytes = 4 << 20;
constexpr size_t kMatmulPlansPerStep = 8;  // dynamic shapes: cuBLASLt plans kept per matmul, most recent first
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

PyObject* int_tuple(const std::vector<SizeSlots::Ref>& v, const std::vector<int64_t>& values) {  // new reference
  PyObject* t = PyTuple_New(v.size());
  for (size_t i = 0; t && i < v.size(); ++i) PyTuple_SET_ITEM(t, i, PyLong_FromLongLong(SizeSlots::get(v[i], values)));
  return t;
}

bool any_symbolic(const std::vector<SizeSlots::Ref>& v) {
  for (const SizeSlots::Ref& r : v)
    if (r.slot >= 0) return true;
  return false;
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
        for (const graph::Sym& e : k.size_params) l.size_params.push_back(slots_.add(e));
        if (k.grid_items) {
          l.grid_items = slots_.add(k.grid_items);
          l.items_per_block = k.items_per_block;
        }
        if (k.shared_bytes > 48 * 1024) cuda::set_max_dynamic_shared_memory(l.function, k.shared_bytes);
        launches_.push_back(l);
      }
    }
    const bool tf32 = torch_flag("_get_cublas_allow_tf32");
    const bool fp16_reduction = torch_flag("_get_cublas_allow_fp16_reduced_precision_reduction");
    const bool bf16_reduction = torch_flag("_get_cublas_allow_bf16_reduced_precision_reduction");
    for (const plan::MatmulStep& s : program_.matmul_steps) {
      Matmul mm;
      mm.desc.dtype = scalar_type(s.dtype);
      mm.desc.epilogue = epilogue(s.epilogue);
      mm.desc.allow_tf32 = tf32;
      mm.desc.allow_reduced_precision_reduction = s.dtype == codegen::DType::F16 ? fp16_reduction : bf16_reduction;
      // The trace-time shape (`hints`) is planned now, so a shape cuBLASLt refuses sends the graph to torch at
      // build time. The fields in Matmul::shaped's order.
      std::vector<int64_t> hints;
      for (const codegen::Size* f : {&s.m, &s.n, &s.k, &s.batch, &s.a_row_stride, &s.a_col_stride, &s.a_batch_stride,
                                     &s.b_row_stride, &s.b_col_stride, &s.b_batch_stride, &s.d_row_stride,
                                     &s.d_batch_stride}) {
        mm.fields.push_back(slots_.add(*f));
        hints.push_back(f->hint());
      }
      const cuda::MatmulDesc d = mm.shaped(hints);
      mm.plans.emplace_back(d, std::make_unique<cuda::MatmulPlan>(d, device, kCublasWorkspaceBytes));
      mm.dynamic = any_symbolic(mm.fields);
      matmuls_.push_back(std::move(mm));
    }
    // Per-call allocation arguments: torch.empty_strided(sizes, strides, dtype=, device=).
    device_ = PyRef::steal(PyObject_CallFunction(T.device_type.get(), "si", "cuda", device));
    if (!device_) throw std::runtime_error("fastcomp: cannot make torch.device('cuda', " + std::to_string(device) + ")");
    alloc_kwnames_ = PyRef::steal(Py_BuildValue("(ss)", "dtype", "device"));
    allocs_.resize(program_.buffers.size());
    offsets_.resize(program_.buffers.size());
    for (size_t b = 0; b < program_.buffers.size(); ++b) {
      const Buffer& buf = program_.buffers[b];
      offsets_[b] = slots_.add(buf.offset);
      if (buf.kind != Buffer::Kind::Alloc && buf.kind != Buffer::Kind::Extern) continue;
      AllocArgs& a = allocs_[b];
      for (const codegen::Size& x : buf.sizes) a.size_refs.push_back(slots_.add(x));
      for (const codegen::Size& x : buf.strides) a.stride_refs.push_back(slots_.add(x));
      a.dynamic = any_symbolic(a.size_refs) || any_symbolic(a.stride_refs);
      if (!a.dynamic) {
        a.sizes = PyRef::steal(int_tuple(a.size_refs, {}));
        a.strides = PyRef::steal(int_tuple(a.stride_refs, {}));
      }
      a.dtype = torch_dtype(buf.dtype);
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
    FC_LOG(compile, debug, "cuda executable: loaded {} kernels and planned {} cuBLASLt calls in {:.1f} ms{}",
           launches_.size(), matmuls_.size(),
           std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count(),
           slots_.empty() ? "" : " (dynamic shapes)");
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
    // Dynamic shapes: this call's symbols, and every size the plan needs, evaluated once.
    std::vector<int64_t> symbols, values;
    if (program_.is_dynamic()) {
      if (!read_symbols(program_.symbols, inputs, &symbols)) return nullptr;
      slots_.evaluate(symbols, &values);
    }
    const std::vector<int64_t>* syms = program_.is_dynamic() ? &symbols : nullptr;

    PyRef stream_obj = PyRef::steal(PyObject_CallOneArg(current_stream_.get(), device_index_.get()));
    if (!stream_obj) return nullptr;
    auto stream = reinterpret_cast<cuda::CUstream>(PyLong_AsVoidPtr(stream_obj.get()));

    std::vector<void*> params;  // one kernel's parameter slots, reused by every launch of this call
    try {
      cuda::ContextGuard guard(program_.device);
      for (size_t si = 0; si < program_.steps.size(); ++si) {
        const Step& s = program_.steps[si];
        for (int b : allocs_before_[si])
          if (!allocate(b, tensors, ptr, objects, values)) return nullptr;
        switch (s.kind) {
          case Step::Kind::Kernel: {
            // Each kernel parameter is a root buffer's pointer; cuLaunchKernel copies the values it points at.
            const plan::KernelStep& k = program_.kernel_steps[s.index];
            params.clear();
            for (int b : k.args) params.push_back(&ptr[program_.buffers[b].root]);
            const Launch& l = launches_[k.kernel];
            // Size parameters are never constants: each points at its slot's value for this call.
            for (const SizeSlots::Ref& r : l.size_params) params.push_back(&values[r.slot]);
            cuda::Dim3 grid = l.grid;
            if (l.grid_items.slot >= 0) {
              const int64_t items = values[l.grid_items.slot];
              const int64_t blocks = (items + l.items_per_block - 1) / l.items_per_block;
              grid.x = static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, l.grid.x));
            }
            cuda::launch(l.function, grid, l.block, l.shared, stream, params.data());
            break;
          }
          case Step::Kind::Matmul: {
            const plan::MatmulStep& m = program_.matmul_steps[s.index];
            const cuda::MatmulPlan& plan = matmul_plan(s.index, values);
            plan.run(address(m.a, ptr, values), address(m.b, ptr, values), nullptr, address(m.d, ptr, values),
                     m.bias >= 0 ? address(m.bias, ptr, values) : nullptr, workspace_ptr_, stream);
            break;
          }
          case Step::Kind::Extern:
            if (!run_extern(program_.extern_steps[s.index].node, objects, tensors, ptr, syms, values)) return nullptr;
            break;
        }
        for (int b : frees_after_[si]) Py_CLEAR(tensors[b]);
        for (int n : node_frees_after_[si]) Py_CLEAR(objects[n]);
      }
    } catch (const std::exception& e) {
      PyErr_SetString(PyExc_RuntimeError, fmt::format("fastcomp: CUDA executable failed: {}", e.what()).c_str());
      return nullptr;
    }
    return new_arg(graph_.output, objects.data(), syms);
  }

  std::string describe() const override {
    return "cuda: " + program_.counts_text();
  }

 private:
  struct Launch {
    cuda::CUfunction function = nullptr;
    cuda::Dim3 grid, block;  // with grid_items: grid.x is the most blocks a call launches
    unsigned shared = 0;
    std::vector<SizeSlots::Ref> size_params;
    SizeSlots::Ref grid_items;  // slot -1: the grid is static
    int64_t items_per_block = 1;
  };
  struct AllocArgs {
    PyRef sizes, strides, dtype;  // sizes/strides: prebuilt unless dynamic
    std::vector<SizeSlots::Ref> size_refs, stride_refs;
    bool dynamic = false;
  };
  // A matmul step's cuBLASLt plans: one for a static shape; for a dynamic one, one per concrete shape seen
  // lately (most recent first).
  struct Matmul {
    cuda::MatmulDesc desc;  // dtype, epilogue and flags; the shape comes from `fields`
    std::vector<SizeSlots::Ref> fields;  // m n k batch, A's row/col/batch, B's row/col/batch, D's row/batch strides
    bool dynamic = false;
    std::vector<std::pair<cuda::MatmulDesc, std::unique_ptr<cuda::MatmulPlan>>> plans;

    cuda::MatmulDesc shaped(const std::vector<int64_t>& f) const {
      cuda::MatmulDesc d = desc;
      d.m = f[0], d.n = f[1], d.k = f[2], d.batch = f[3];
      d.a_row_stride = f[4], d.a_col_stride = f[5], d.a_batch_stride = f[6];
      d.b_row_stride = f[7], d.b_col_stride = f[8], d.b_batch_stride = f[9];
      d.d_row_stride = f[10], d.d_batch_stride = f[11];
      return d;
    }
  };

  const cuda::MatmulPlan& matmul_plan(int step, const std::vector<int64_t>& values) {
    Matmul& mm = matmuls_[step];
    if (!mm.dynamic) return *mm.plans.front().second;
    std::vector<int64_t> f;
    for (const SizeSlots::Ref& r : mm.fields) f.push_back(SizeSlots::get(r, values));
    const cuda::MatmulDesc d = mm.shaped(f);
    for (size_t i = 0; i < mm.plans.size(); ++i) {
      if (!(mm.plans[i].first == d)) continue;
      if (i != 0) std::rotate(mm.plans.begin(), mm.plans.begin() + i, mm.plans.begin() + i + 1);
      return *mm.plans.front().second;
    }
    if (mm.plans.size() >= kMatmulPlansPerStep) mm.plans.pop_back();
    auto plan = std::make_unique<cuda::MatmulPlan>(d, program_.device, kCublasWorkspaceBytes);
    mm.plans.emplace(mm.plans.begin(), d, std::move(plan));
    return *mm.plans.front().second;
  }

  static char* data_ptr(PyObject* t) {
    static PyObject* name = PyUnicode_InternFromString("data_ptr");
    PyRef p = PyRef::steal(PyObject_CallMethodNoArgs(t, name));
    return p ? static_cast<char*>(PyLong_AsVoidPtr(p.get())) : nullptr;
  }

  char* address(int b, const std::vector<char*>& ptr, const std::vector<int64_t>& values) const {
    const Buffer& buf = program_.buffers[b];
    return ptr[buf.root] + SizeSlots::get(offsets_[b], values) * codegen::dtype_size(buf.dtype);
  }

  PyObject* empty_strided(const AllocArgs& a, const std::vector<int64_t>& values) const {  // new reference
    PyRef sizes = a.dynamic ? PyRef::steal(int_tuple(a.size_refs, values)) : a.sizes;
    PyRef strides = a.dynamic ? PyRef::steal(int_tuple(a.stride_refs, values)) : a.strides;
    if (!sizes || !strides) return nullptr;
    PyObject* argv[] = {nullptr, sizes.get(), strides.get(), a.dtype.get(), device_.get()};
    return PyObject_Vectorcall(frontend::torch_refs().empty_strided.get(), argv + 1,
                               2 | PY_VECTORCALL_ARGUMENTS_OFFSET, alloc_kwnames_.get());
  }

  bool allocate(int b, std::vector<PyObject*>& tensors, std::vector<char*>& ptr, std::vector<PyObject*>& objects,
                const std::vector<int64_t>& values) {
    PyObject* t = empty_strided(allocs_[b], values);
    if (!t) return false;
    tensors[b] = t;
    if (!(ptr[b] = data_ptr(t)) && PyErr_Occurred()) return false;
    const int node = program_.buffers[b].node;
    if (node >= 0 && program_.node_object[node] && !objects[node]) objects[node] = Py_NewRef(t);
    return true;
  }

  bool run_extern(graph::NodeId id, std::vector<PyObject*>& objects, std::vector<PyObject*>& tensors,
                  std::vector<char*>& ptr, const std::vector<int64_t>* symbols, const std::vector<int64_t>& values) {
    const graph::Node& node = graph_.nodes[id];
    std::vector<PyObject*> argv{nullptr};
    std::vector<PyRef> temps;
    for (const auto& a : node.args) argv.push_back(borrow_arg(a, objects, temps, symbols));
    for (const auto& a : node.kwargs) argv.push_back(borrow_arg(a, objects, temps, symbols));
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
      if (check_layout_[b] && !has_layout(out, allocs_[b], values)) {
        // torch's meta function predicted other strides than the real op produced: kernels read a copy in
        // the planned layout (the user's object stays the op's own result).
        PyObject* planned = empty_strided(allocs_[b], values);
        if (!planned) return false;
        PyRef copied = PyRef::steal(PyObject_CallMethod(planned, "copy_", "O", out));
        Py_XSETREF(tensors[b], planned);
        if (!copied || (!(ptr[b] = data_ptr(planned)) && PyErr_Occurred())) return false;
      }
    }
    return true;
  }

  static bool has_layout(PyObject* t, const AllocArgs& a, const std::vector<int64_t>& values) {
    PyRef strides = PyRef::steal(PyObject_CallMethod(t, "stride", nullptr));
    const size_t rank = a.stride_refs.size();
    if (!strides || !PyTuple_Check(strides.get()) || PyTuple_GET_SIZE(strides.get()) != Py_ssize_t(rank)) {
      PyErr_Clear();
      return false;
    }
    for (size_t d = 0; d < rank; ++d)
      if (SizeSlots::get(a.size_refs[d], values) != 1 &&
          PyLong_AsLongLong(PyTuple_GET_ITEM(strides.get(), d)) != SizeSlots::get(a.stride_refs[d], values))
        return false;
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
  SizeSlots slots_;               // dynamic shapes: every symbolic size the plan needs
  std::vector<Launch> launches_;  // per program kernel
  std::vector<Matmul> matmuls_;   // per matmul step
  std::vector<AllocArgs> allocs_;
  std::vector<SizeSlots::Ref> offsets_;  // per buffer: its offset from its root
  PyRef device_, alloc_kwnames_, workspace_, current_stream_, device_index_;
  void* workspace_ptr_ = nullptr;
  std::vector<std::vector<int>> allocs_before_, frees_after_, node_frees_after_;
  std::vector<bool> check_layout_;
};

}  // namespace

codegen::DeviceLimits device_limits(int device) {
  const cuda::DeviceInfo& info = cuda::device_info(device);
  codegen::DeviceLimits limits;
  limits.arch = info.arch;
  limits.sm_count = info.sm_count;
  limits.max_threads_per_block = info.max_threads_per_block;
  limits.max_threads_per_sm = info.max_threads_per_sm;
  return limits;
}

CudaSource emit_plan(const plan::Program& program, const codegen::DeviceLimits& limits) {
  CudaSource out;
  for (const codegen::Kernel& k : program.kernels) out.kernels.push_back(codegen::emit_cuda(k, limits));
  codegen::share_identical_kernels(out.kernels);
  if (!out.kernels.empty()) out.program = codegen::emit_program(out.kernels, limits.arch);
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
