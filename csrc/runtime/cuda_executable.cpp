// Runs a fusion plan: per call, allocates the plan's buffers through torch (so the caching allocator and
// torch.cuda.memory_allocated stay true), then goes through the steps on torch's current stream - kernel
// launches and cuBLASLt calls straight from C++, extern steps as calls into torch - and returns the output
// tensors. Buffers are released after their last use; the allocator orders reuse on the stream.
//
// Buffers that never become torch objects (intermediates only our kernels and cuBLASLt calls touch) live in one
// scratch allocation per call, at offsets the memory plan (memory_plan.h) chose: one call into torch instead of
// one per buffer, which is most of a call's host time for a graph of many small steps.
//
// Dynamic shapes: the plan's symbolic sizes are interned in a SizeSlots table at build time; per call the
// symbols are read from the inputs' sizes, every slot is evaluated once, and launch grids, kernel size
// parameters, allocations and cuBLASLt shapes take their values from it. cuBLASLt plans are kept per concrete
// shape (a few most recent per matmul), since choosing an algorithm costs tens of microseconds.
#include "runtime/cuda_executable.h"

#include <fmt/format.h>

#include <chrono>
#include <unordered_map>

#include "frontend/trace/torch_refs.h"
#include "runtime/arg_values.h"
#include "runtime/cublas_workspace.h"
#include "runtime/cuda/arch.h"
#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/driver.h"
#include "runtime/cuda/module.h"
#include "runtime/matmul_steps.h"
#include "runtime/memory_plan.h"
#include "runtime/size_slots.h"
#include "runtime/torch_shim.h"
#include "support/log.h"
#include "support/small_buffer.h"
#include "support/pystr.h"

namespace fastcomp::runtime {
namespace {

namespace cuda = runtime::cuda;
using plan::Buffer;
using plan::Step;

constexpr size_t kMatmulPlansPerStep = 8;  // dynamic shapes: cuBLASLt plans kept per matmul, most recent first

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
  CudaExecutable(graph::Graph graph, plan::Program program, const CudaSource& source, const PlanBinary& binary,
                 const MatmulSwitches& switches, MatmulPlans plans)
      : graph_(std::move(graph)), program_(std::move(program)) {
    const auto start = std::chrono::steady_clock::now();
    const auto& T = frontend::torch_refs();
    const int device = program_.device;
    if (!source.parts.empty()) {
      kernels_ = std::make_unique<LoadedPlan>(source, binary, device);
      cuda::ContextGuard guard(device);
      for (size_t i = 0; i < source.kernels.size(); ++i) {
        const codegen::KernelSource& k = source.kernels[i];
        Launch l;
        l.name = k.name;
        l.function = kernels_->get_function(k.name);
        for (const codegen::KernelSource::VectorOperand& v : k.vector_operands) {
          const codegen::Kernel& kernel = program_.kernels[i];
          const size_t n_in = kernel.inputs.size();
          const codegen::Operand& op = v.operand < int(n_in) ? kernel.inputs[v.operand] : kernel.outputs[v.operand - n_in];
          l.vector_operands.push_back({v.operand, slots_.add(v.first), codegen::dtype_size(op.dtype), v.bytes});
        }
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
    // The trace-time shapes are planned by now (given, or here), so a shape cuBLASLt refuses sends the graph to
    // torch at build time.
    if (plans.empty()) plans = plan_matmuls(program_, switches);
    for (size_t i = 0; i < program_.matmul_steps.size(); ++i) {
      const plan::MatmulStep& s = program_.matmul_steps[i];
      Matmul mm;
      mm.desc = unshaped_desc(s, switches);
      for (const codegen::Size* f : shape_fields(s)) mm.fields.push_back(slots_.add(*f));
      mm.plans.emplace_back(plans[i]->desc(), std::move(plans[i]));
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
    // Views made from their root's tensor (ExternStep::as_view): as_strided's static arguments.
    for (const plan::ExternStep& e : program_.extern_steps) {
      if (!e.as_view) continue;
      const Buffer& buf = program_.buffers[program_.node_buffer[e.node]];
      ViewArgs& v = views_[e.node];
      std::vector<SizeSlots::Ref> sizes, strides;
      for (const codegen::Size& x : buf.sizes) sizes.push_back(slots_.add(x));
      for (const codegen::Size& x : buf.strides) strides.push_back(slots_.add(x));
      v.sizes = PyRef::steal(int_tuple(sizes, {}));
      v.strides = PyRef::steal(int_tuple(strides, {}));
      v.root = buf.root;
      v.offset = buf.offset.hint();
      // A tensor fastcomp allocates starts its storage; an input's or a torch result's may not.
      v.root_offset_varies = program_.buffers[buf.root].kind != Buffer::Kind::Alloc;
    }
    as_strided_name_ = PyRef::steal(PyUnicode_InternFromString("as_strided"));
    storage_offset_name_ = PyRef::steal(PyUnicode_InternFromString("storage_offset"));
    empty_ = PyRef::steal(PyObject_GetAttrString(T.torch.get(), "empty"));
    u8_ = torch_dtype(codegen::DType::U8);
    if (!empty_ || !u8_) throw std::runtime_error("fastcomp: torch.empty or torch.uint8 is missing");
    PyRef c = PyRef::steal(PyObject_GetAttrString(T.torch.get(), "_C"));
    current_stream_ = PyRef::steal(PyObject_GetAttrString(c.get(), "_cuda_getCurrentRawStream"));
    if (!current_stream_) throw std::runtime_error("fastcomp: torch._C._cuda_getCurrentRawStream is missing");
    device_index_ = PyRef::steal(PyLong_FromLong(device));
    if (!matmuls_.empty()) {
      // The current stream's workspace now, so that failing to allocate it sends the graph to torch (the
      // caller's fallback) rather than failing a call; a call on another stream takes that stream's.
      cuda::CUstream stream = nullptr;
      if (!current_stream(&stream)) throw std::runtime_error("fastcomp: cannot read torch's current stream: " +
                                                              take_error_message());
      cublas_workspace(stream);
    }
    plan_lifetimes();
    plan_arena();
    FC_LOG(compile, debug, "cuda executable: loaded {} kernels and planned {} cuBLASLt calls in {:.1f} ms{}; {}",
           launches_.size(), matmuls_.size(),
           std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count(),
           slots_.empty() ? "" : " (dynamic shapes)", arena_text());
  }

  PyObject* run(PyObject* const* inputs, size_t ninputs) override {
    const size_t nb = program_.buffers.size();
    std::vector<PyObject*> objects(graph_.nodes.size(), nullptr);  // owned
    std::vector<PyObject*> tensors(nb, nullptr);                   // owned: each root buffer's tensor
    std::vector<char*> ptr(nb, nullptr);
    PyObject* arena = nullptr;  // owned: this call's scratch buffers
    struct Cleanup {
      std::vector<PyObject*>& a;
      std::vector<PyObject*>& b;
      PyObject*& arena;
      ~Cleanup() {
        for (PyObject* o : a) Py_XDECREF(o);
        for (PyObject* o : b) Py_XDECREF(o);
        Py_XDECREF(arena);
      }
    } cleanup{objects, tensors, arena};

    for (size_t b = 0; b < nb; ++b) {
      const Buffer& buf = program_.buffers[b];
      if (buf.kind != Buffer::Kind::Input) continue;
      PyObject* t = inputs[buf.input];
      tensors[b] = Py_NewRef(t);
      if (!(ptr[b] = tensor_data_ptr(t)) && PyErr_Occurred()) return nullptr;
    }
    for (size_t i = 0; i < ninputs; ++i) objects[graph_.inputs[i]] = Py_NewRef(inputs[i]);
    // Dynamic shapes: this call's symbols, and every size the plan needs, evaluated once.
    std::vector<int64_t> symbols, values;
    if (program_.is_dynamic()) {
      if (!read_symbols(program_.symbols, inputs, &symbols)) return nullptr;
      slots_.evaluate(symbols, &values);
    }
    const std::vector<int64_t>* syms = program_.is_dynamic() ? &symbols : nullptr;

    cuda::CUstream stream = nullptr;
    if (!current_stream(&stream)) return nullptr;

    std::vector<void*> params;  // one kernel's parameter slots, reused by every launch of this call
    try {
      cuda::ContextGuard guard(program_.device);
      void* const workspace = matmuls_.empty() ? nullptr : cublas_workspace(stream);
      for (size_t si = 0; si < program_.steps.size(); ++si) {
        const Step& s = program_.steps[si];
        if (int(si) == memory_.arena_first && !allocate_arena(&arena, ptr, values)) return nullptr;
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
            cuda::CUfunction function = l.function;
            for (const VectorOperand& v : l.vector_operands) {
              const auto first = reinterpret_cast<uintptr_t>(*static_cast<char**>(params[v.param])) +
                                 SizeSlots::get(v.first, values) * v.element_bytes;
              if (first % v.bytes == 0) continue;
              function = any_alignment_function(k.kernel);
              break;
            }
            cuda::Dim3 grid = l.grid;
            if (l.grid_items.slot >= 0) {
              const int64_t items = values[l.grid_items.slot];
              const int64_t blocks = (items + l.items_per_block - 1) / l.items_per_block;
              grid.x = static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, l.grid.x));
            }
            cuda::launch(function, grid, l.block, l.shared, stream, params.data());
            break;
          }
          case Step::Kind::Matmul: {
            const plan::MatmulStep& m = program_.matmul_steps[s.index];
            if (!m.b_next.empty()) {
              run_group(s.index, ptr, values, workspace, stream);
              break;
            }
            const cuda::MatmulPlan& plan = matmul_plan(s.index, values);
            plan.run(address(m.a, ptr, values), address(m.b, ptr, values), nullptr, address(m.d, ptr, values),
                     m.bias >= 0 ? address(m.bias, ptr, values) : nullptr, workspace, stream);
            break;
          }
          case Step::Kind::Extern: {
            const plan::ExternStep& e = program_.extern_steps[s.index];
            if (!(e.as_view ? make_view(e.node, objects, tensors) : run_extern(e, objects, tensors, ptr, syms, values)))
              return nullptr;
            break;
          }
        }
        for (int b : frees_after_[si]) Py_CLEAR(tensors[b]);
        for (int n : node_frees_after_[si]) Py_CLEAR(objects[n]);
        if (int(si) == memory_.arena_last) Py_CLEAR(arena);
      }
      for (int b : allocs_before_[program_.steps.size()])  // bare allocations only the output holds
        if (!allocate(b, tensors, ptr, objects, values)) return nullptr;
    } catch (const std::exception& e) {
      PyErr_SetString(PyExc_RuntimeError, fmt::format("fastcomp: CUDA executable failed: {}", e.what()).c_str());
      return nullptr;
    }
    return new_arg(graph_.output, objects.data(), syms);
  }

  std::string describe() const override {
    return "cuda: " + program_.counts_text();
  }

  int tuned_matmul_picks() const override {
    int n = 0;
    for (const Matmul& mm : matmuls_)
      for (const auto& [desc, plan] : mm.plans) n += plan->tuned_pick_differs();
    return n;
  }

  void prefer_heuristic_matmul_picks(bool yes) override {
    prefer_heuristic_picks_ = yes;
    for (const Matmul& mm : matmuls_)
      for (const auto& [desc, plan] : mm.plans) plan->prefer_favourite(yes);
  }

 private:
  // torch's current stream on this executable's device; false with a Python error set.
  bool current_stream(cuda::CUstream* stream) const {
    PyRef s = PyRef::steal(PyObject_CallOneArg(current_stream_.get(), device_index_.get()));
    if (!s) return false;
    *stream = reinterpret_cast<cuda::CUstream>(PyLong_AsVoidPtr(s.get()));
    return true;
  }

  // torch.empty(nbytes, dtype=torch.uint8, device=...): scratch arenas and cuBLASLt workspaces. A new reference,
  // or null with a Python error set.
  PyObject* byte_tensor(PyObject* nbytes) const {
    PyObject* argv[] = {nullptr, nbytes, u8_.get(), device_.get()};
    return PyObject_Vectorcall(empty_.get(), argv + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, alloc_kwnames_.get());
  }

  // The cuBLASLt workspace for this call's matrix products (cublas_workspace.h): the stream's shared one, or
  // while a CUDA graph is being captured, this executable's own.
  void* cublas_workspace(cuda::CUstream stream) {
    auto allocate = [this] {
      auto w = std::make_shared<CublasWorkspace>();
      PyRef nbytes = PyRef::steal(PyLong_FromSize_t(kCublasWorkspaceBytes));
      w->tensor = PyRef::steal(nbytes ? byte_tensor(nbytes.get()) : nullptr);
      if (!w->tensor || !(w->data = tensor_data_ptr(w->tensor.get())))
        throw std::runtime_error("fastcomp: cannot allocate the cuBLASLt workspace: " + take_error_message());
      return w;
    };
    if (cuda::stream_capturing(stream)) {
      if (!private_workspace_) private_workspace_ = allocate();
      return private_workspace_->data;
    }
    if (!shared_workspace_ || stream != workspace_stream_) {
      shared_workspace_ = shared_cublas_workspace(program_.device, stream, allocate);
      workspace_stream_ = stream;
    }
    return shared_workspace_->data;
  }

  // An operand the kernel accesses `bytes` at a time (codegen::KernelSource::vector_operands): kernel parameter
  // `param`'s pointer plus `first` elements must be aligned to `bytes`.
  struct VectorOperand {
    int param = 0;
    SizeSlots::Ref first;
    int element_bytes = 4;
    int bytes = 16;
  };
  struct Launch {
    std::string name;
    cuda::CUfunction function = nullptr;  // from the program for aligned vector operands
    std::vector<VectorOperand> vector_operands;
    cuda::CUfunction any_alignment_function = nullptr;  // loaded on first need
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
  bool prefer_heuristic_picks_ = false;  // prefer_heuristic_matmul_picks(): also for plans made later
  bool relayout_hinted_ = false;         // the perf hint of an extern result copied into its planned layout

  struct Matmul {
    cuda::MatmulDesc desc;  // dtype, epilogue and flags; the shape comes from `fields`
    std::vector<SizeSlots::Ref> fields;  // m n k batch, A's row/col/batch, B's row/col/batch, D's row/batch strides
    bool dynamic = false;
    bool group_split_logged = false;  // run_group said once why the group runs as several calls
    bool batched_refused = false;     // cuBLASLt refused a group's batched desc: its products run one by one
    std::vector<std::pair<cuda::MatmulDesc, std::unique_ptr<cuda::MatmulPlan>>> plans;
  };

  // Kernel `kernel` from the program for pointers of any alignment, compiled (through the kernel cache) and
  // loaded the first time a launch needs it: a view that starts mid-vector, e.g. x[1:] of a float tensor.
  // Holds the GIL while NVRTC runs (once per executable, ~50-200 ms) so no other call can enter half-loaded.
  cuda::CUfunction any_alignment_function(int kernel) {
    if (!any_alignment_kernels_) {
      const auto start = std::chrono::steady_clock::now();
      const CudaSource source = emit_plan(program_, device_limits(program_.device), codegen::PointerAlignment::Any,
                                          nvrtc_program_parts());
      any_alignment_kernels_ = std::make_unique<LoadedPlan>(source, compile_plan(program_, source), program_.device);
      FC_LOG(perf_hints, info, "fastcomp: a kernel got a pointer that is not aligned for its vector accesses (a "
             "view starting mid-vector?); compiled the graph's kernels with scalar accesses for such calls in "
             "{:.0f} ms. Calls with aligned inputs keep the vector kernels.",
             std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    Launch& l = launches_[kernel];
    if (!l.any_alignment_function) l.any_alignment_function = any_alignment_kernels_->get_function(l.name);
    return l.any_alignment_function;
  }

  const cuda::MatmulPlan& matmul_plan(int step, const std::vector<int64_t>& values) {
    Matmul& mm = matmuls_[step];
    if (!mm.dynamic) return *mm.plans.front().second;
    return plan_for(mm, call_desc(mm, values));
  }

  // The step's desc for this call's sizes.
  static cuda::MatmulDesc call_desc(const Matmul& mm, const std::vector<int64_t>& values) {
    MatmulShape f;
    for (size_t i = 0; i < f.size(); ++i) f[i] = SizeSlots::get(mm.fields[i], values);
    return with_shape(mm.desc, f);
  }

  // The plan for `d` among the step's, made (and kept, most recent first) when it is new: another shape under
  // dynamic shapes, or a group's batched desc for the distance between its weights.
  const cuda::MatmulPlan& plan_for(Matmul& mm, const cuda::MatmulDesc& d) {
    for (size_t i = 0; i < mm.plans.size(); ++i) {
      if (!(mm.plans[i].first == d)) continue;
      if (i != 0) std::rotate(mm.plans.begin(), mm.plans.begin() + i, mm.plans.begin() + i + 1);
      return *mm.plans.front().second;
    }
    if (mm.plans.size() >= kMatmulPlansPerStep) mm.plans.pop_back();
    auto plan = std::make_unique<cuda::MatmulPlan>(d, program_.device, kCublasWorkspaceBytes);
    plan->prefer_favourite(prefer_heuristic_picks_);
    mm.plans.emplace(mm.plans.begin(), d, std::move(plan));
    return *mm.plans.front().second;
  }

  // A group of products sharing A (MatmulStep::b_next): as few batched calls as the weights' places allow. Each
  // call takes a run of weights (and of biases, with a bias epilogue) that lie at equal, non-negative steps in
  // memory (cuBLASLt's batch strides; none may be negative), so parameters of one size allocated one after another
  // (a module's usually are) make one call; others make a call each.
  void run_group(int step, const std::vector<char*>& ptr, const std::vector<int64_t>& values, void* workspace,
                 cuda::CUstream stream) {
    const plan::MatmulStep& m = program_.matmul_steps[step];
    Matmul& mm = matmuls_[step];
    const cuda::MatmulDesc d = call_desc(mm, values);
    const char* a = address(m.a, ptr, values);
    const size_t n = m.b_next.size() + 1;
    const bool has_bias = m.bias >= 0;
    SmallBuffer<const char*, 4> b(n), bias(n);
    for (size_t i = 0; i < n; ++i) {
      b[i] = address(i ? m.b_next[i - 1] : m.b, ptr, values);
      bias[i] = has_bias ? address(i ? m.bias_next[i - 1] : m.bias, ptr, values) : nullptr;
    }
    char* out = address(m.d, ptr, values);
    const ptrdiff_t element = static_cast<ptrdiff_t>(codegen::dtype_size(m.dtype));
    // The step from operand i to i + 1 of both lists, in elements; -1 where a batch stride cannot express it.
    auto step_at = [&](SmallBuffer<const char*, 4>& p, size_t i) -> ptrdiff_t {
      const ptrdiff_t bytes = p[i + 1] - p[i];
      return bytes >= 0 && bytes % element == 0 ? bytes / element : -1;
    };
    size_t calls = 0;
    for (size_t i = 0; i < n; ++calls) {
      size_t count = 1;
      ptrdiff_t b_step = 0, bias_step = 0;
      if (!mm.batched_refused && i + 1 < n) {
        b_step = step_at(b, i);
        bias_step = has_bias ? step_at(bias, i) : 0;
        if (b_step >= 0 && bias_step >= 0)
          for (count = 2; i + count < n && step_at(b, i + count - 1) == b_step &&
                          (!has_bias || step_at(bias, i + count - 1) == bias_step);)
            ++count;
      }
      const cuda::MatmulPlan* plan = nullptr;
      try {
        plan = &plan_for(mm, products_of_group(d, int64_t(count), b_step, bias_step));
      } catch (const std::exception& e) {
        if (count == 1) throw;  // the single product was planned when the executable was built: not expected
        mm.batched_refused = true;  // cuBLASLt refused this batched form: a call each from now on
        FC_LOG(perf_hints, info, "fastcomp: {}: cuBLASLt refused the batched call of its {} products of one "
               "activation ({}); they run as a call each", graph_.nodes[m.node].user_loc, n, e.what());
        count = 1;
        plan = &plan_for(mm, products_of_group(d, 1, 0, 0));
      }
      plan->run(a, b[i], nullptr, out + int64_t(i) * d.d_batch_stride * element, bias[i], workspace, stream);
      i += count;
    }
    if (calls > 1 && !mm.group_split_logged) {
      mm.group_split_logged = true;
      FC_LOG(perf_hints, info, "fastcomp: {} and the {} other products of its activation run as {} cuBLASLt calls, "
             "not one batched call: their weights{} do not lie at equal steps in memory, the first one first",
             graph_.nodes[m.node].user_loc, n - 1, calls, has_bias ? " or biases" : "");
    }
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
    if (!(ptr[b] = tensor_data_ptr(t)) && PyErr_Occurred()) return false;
    const int node = program_.buffers[b].node;
    if (node >= 0 && program_.node_object[node] && !objects[node]) objects[node] = Py_NewRef(t);
    return true;
  }

  bool run_extern(const plan::ExternStep& e, std::vector<PyObject*>& objects, std::vector<PyObject*>& tensors,
                  std::vector<char*>& ptr, const std::vector<int64_t>* symbols, const std::vector<int64_t>& values) {
    const graph::NodeId id = e.node;
    const graph::Node& node = graph_.nodes[id];
    std::vector<PyObject*> argv{nullptr};
    std::vector<PyRef> temps;
    for (size_t i = 0; i < node.args.size() + node.kwargs.size(); ++i) {
      const graph::Arg& a = i < node.args.size() ? node.args[i] : node.kwargs[i - node.args.size()];
      argv.push_back(static_cast<int>(i) == e.bias_at   ? Py_None
                     : e.passed_buffer(i) >= 0          ? tensors[e.passed_buffer(i)]
                                                        : borrow_arg(a, objects, temps, symbols));
    }
    for (size_t i = 1; i < argv.size(); ++i)
      if (!argv[i]) {
        if (!PyErr_Occurred())  // a passed buffer without a tensor of its own: a bug of the plan, said so
          PyErr_SetString(PyExc_RuntimeError, fmt::format("fastcomp: argument {} of %{} ({}) has no tensor at run "
                                                          "time", i - 1, id, node.target_name).c_str());
        return false;
      }
    PyObject* out = PyObject_Vectorcall(node.target.get(), argv.data() + 1,
                                        node.args.size() | PY_VECTORCALL_ARGUMENTS_OFFSET, node.kwnames.get());
    if (!out) return false;
    // The node's object, or a result of the step's own (a convolution without its bias) that only its buffer keeps.
    PyRef own_result;
    if (e.result >= 0) own_result = PyRef::steal(out);
    else Py_XSETREF(objects[id], out);
    const int b = e.result >= 0 ? e.result : program_.node_buffer[id];
    if (b >= 0 && program_.buffers[b].kind == Buffer::Kind::Extern) {
      Py_XSETREF(tensors[b], Py_NewRef(out));
      if (!(ptr[b] = tensor_data_ptr(out)) && PyErr_Occurred()) return false;
      if (memory_.check_layout[b] && !has_layout(out, allocs_[b], values)) {
        // torch's meta function predicted other strides than the real op produced: kernels read a copy in
        // the planned layout (the user's object stays the op's own result).
        if (!relayout_hinted_) {
          relayout_hinted_ = true;
          FC_LOG(perf_hints, info, "fastcomp: %{} ({}) returned another layout than its meta function said; each "
                 "call copies it into the planned one for the kernels that read it", id, node.target_name);
        }
        PyObject* planned = empty_strided(allocs_[b], values);
        if (!planned) return false;
        PyRef copied = PyRef::steal(PyObject_CallMethod(planned, "copy_", "O", out));
        Py_XSETREF(tensors[b], planned);
        if (!copied || (!(ptr[b] = tensor_data_ptr(planned)) && PyErr_Occurred())) return false;
      }
    }
    return true;
  }

  // Node `id`'s object as a view of its buffer's root tensor: root.as_strided(sizes, strides, offset).
  bool make_view(graph::NodeId id, std::vector<PyObject*>& objects, const std::vector<PyObject*>& tensors) const {
    const ViewArgs& v = views_.at(id);
    PyObject* root = tensors[v.root];
    if (!root) {
      PyErr_SetString(PyExc_RuntimeError, fmt::format("fastcomp: the tensor view %{} is of does not exist", id).c_str());
      return false;
    }
    int64_t offset = v.offset;
    if (v.root_offset_varies) {
      PyObject* self[] = {root};
      PyRef start = PyRef::steal(PyObject_VectorcallMethod(storage_offset_name_.get(), self,
                                                           1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr));
      if (!start) return false;
      offset += PyLong_AsLongLong(start.get());
    }
    PyRef at = PyRef::steal(PyLong_FromLongLong(offset));
    PyObject* argv[] = {root, v.sizes.get(), v.strides.get(), at.get()};
    PyObject* out = PyObject_VectorcallMethod(as_strided_name_.get(), argv, 4 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr);
    if (!out) return false;
    Py_XSETREF(objects[id], out);
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

  // When each Alloc buffer outside the arena is allocated (before its first use) and when buffers and node
  // objects die (after their last reader); outputs live to the end.
  void plan_lifetimes() {
    memory_ = plan_memory(program_, graph_);
    const size_t nsteps = program_.steps.size();
    allocs_before_.assign(nsteps + 1, {});  // [nsteps]: before the output is built
    frees_after_.assign(nsteps, {});
    node_frees_after_.assign(nsteps, {});
    std::vector<bool> scratch(program_.buffers.size(), false);
    for (int b : memory_.scratch) scratch[b] = true;
    for (size_t b = 0; b < program_.buffers.size(); ++b) {
      const Buffer& buf = program_.buffers[b];
      if (scratch[b]) continue;
      const int first = memory_.first_use[b], last = memory_.last_use[b];
      if (buf.kind == Buffer::Kind::Alloc && first >= 0) allocs_before_[first].push_back(int(b));
      if (buf.kind != Buffer::Kind::View && last >= 0 && last < memory_.end) frees_after_[last].push_back(int(b));
    }
    for (size_t n = 0; n < memory_.node_last_use.size(); ++n) {
      const int last = memory_.node_last_use[n];
      if (last >= 0 && last < memory_.end && graph_.nodes[n].kind != graph::NodeKind::Input)
        node_frees_after_[last].push_back(int(n));
    }
  }

  // The arena's layout, computed once when no scratch buffer's size depends on the shapes.
  void plan_arena() {
    if (memory_.scratch.empty() || !memory_.arena_static) return;
    std::vector<int64_t> bytes;
    for (int b : memory_.scratch) bytes.push_back(span_bytes_hint(program_.buffers[b]));
    arena_bytes_ = memory_.arena.layout(bytes, &arena_offsets_);
    arena_size_ = PyRef::steal(PyLong_FromLongLong(arena_bytes_));
    if (!arena_size_) throw std::runtime_error("fastcomp: " + take_error_message());
  }

  std::string arena_text() const {
    if (memory_.scratch.empty()) return "no scratch arena";
    const std::string size = memory_.arena_static ? fmt::format("{} bytes", arena_bytes_) : "dynamic size";
    return fmt::format("scratch arena {} ({} buffers in {} slots)", size, memory_.scratch.size(),
                       memory_.arena.num_slots());
  }

  // Bytes from scratch buffer b's first element to one past its last, for this call's sizes.
  int64_t span_bytes(int b, const std::vector<int64_t>& values) const {
    const AllocArgs& a = allocs_[b];
    int64_t last = 0;
    for (size_t d = 0; d < a.size_refs.size(); ++d) {
      const int64_t size = SizeSlots::get(a.size_refs[d], values);
      if (size == 0) return 0;
      last += (size - 1) * SizeSlots::get(a.stride_refs[d], values);
    }
    return (last + 1) * codegen::dtype_size(program_.buffers[b].dtype);
  }

  // torch.empty(nbytes, dtype=torch.uint8, device=...) for this call's scratch buffers (a new reference in
  // *arena, none when they are all empty), and their pointers into it.
  bool allocate_arena(PyObject** arena, std::vector<char*>& ptr, const std::vector<int64_t>& values) const {
    std::vector<int64_t> dynamic_offsets;
    const std::vector<int64_t>* offsets = &arena_offsets_;
    int64_t nbytes = arena_bytes_;
    PyRef size = arena_size_;
    if (!memory_.arena_static) {
      std::vector<int64_t> bytes;
      for (int b : memory_.scratch) bytes.push_back(span_bytes(b, values));
      nbytes = memory_.arena.layout(bytes, &dynamic_offsets);
      offsets = &dynamic_offsets;
      size = PyRef::steal(PyLong_FromLongLong(nbytes));
      if (!size) return false;
    }
    char* base = nullptr;
    if (nbytes > 0) {
      *arena = byte_tensor(size.get());
      if (!*arena || (!(base = tensor_data_ptr(*arena)) && PyErr_Occurred())) return false;
    }
    for (size_t i = 0; i < memory_.scratch.size(); ++i) ptr[memory_.scratch[i]] = base ? base + (*offsets)[i] : nullptr;
    return true;
  }

  graph::Graph graph_;
  plan::Program program_;
  std::unique_ptr<LoadedPlan> kernels_;
  std::unique_ptr<LoadedPlan> any_alignment_kernels_;  // see any_alignment_function
  SizeSlots slots_;               // dynamic shapes: every symbolic size the plan needs
  std::vector<Launch> launches_;  // per program kernel
  std::vector<Matmul> matmuls_;   // per matmul step
  std::vector<AllocArgs> allocs_;
  struct ViewArgs {
    PyRef sizes, strides;
    int root = -1;
    int64_t offset = 0;  // from the root tensor's first element
    bool root_offset_varies = false;
  };
  std::unordered_map<graph::NodeId, ViewArgs> views_;  // per node made by an as_view extern step
  PyRef as_strided_name_, storage_offset_name_;
  std::vector<SizeSlots::Ref> offsets_;  // per buffer: its offset from its root
  PyRef device_, alloc_kwnames_, current_stream_, device_index_;
  std::shared_ptr<CublasWorkspace> shared_workspace_, private_workspace_;  // see cublas_workspace()
  cuda::CUstream workspace_stream_ = nullptr;                            // shared_workspace_'s stream
  std::vector<std::vector<int>> allocs_before_, frees_after_, node_frees_after_;
  MemoryPlan memory_;
  PyRef empty_, u8_;                    // torch.empty, torch.uint8: the scratch arena's allocation
  PyRef arena_size_;                    // static arena: its size as a Python int
  int64_t arena_bytes_ = 0;             // ... and in bytes
  std::vector<int64_t> arena_offsets_;  // ... and each scratch buffer's offset in it (memory_.scratch order)
};

}  // namespace

std::unique_ptr<Executable> make_cuda_executable(graph::Graph graph, plan::Program program, const CudaSource& source,
                                                 const PlanBinary& binary, const MatmulSwitches& switches,
                                                 MatmulPlans plans) {
  return std::make_unique<CudaExecutable>(std::move(graph), std::move(program), source, binary, switches,
                                          std::move(plans));
}

}  // namespace fastcomp::runtime
