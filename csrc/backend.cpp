#include "backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <filesystem>

#include "frontend/trace/torch_refs.h"
#include "graph/repeated_casts.h"
#include "plan/lower.h"
#include "rehearsal_plan.h"
#include "sdpa_choice.h"
#include "runtime/cuda/nvrtc.h"
#include "runtime/background_compile.h"
#include "runtime/cuda_executable.h"
#include "runtime/cuda_graph_executable.h"
#include "runtime/memory_plan.h"
#include "runtime/suspended_autocast.h"
#include "support/config.h"
#include "support/file_io.h"
#include "support/log.h"
#include "support/pystr.h"

namespace fastcomp {
namespace {

// Why the graph runs through torch rather than the CUDA backend; empty when the CUDA backend applies.
std::string torch_runner_reason(const graph::Graph& graph, int* device) {
  if (!config().cuda_backend) return "fastcomp.config.cuda_backend is off";
  if (graph.under_autocast) return "autocast kept, its ops run as torch calls under it: " + graph.autocast_kept_because;
  bool cuda = false;
  // Under no_grad from start to end (inference), nothing in the graph records gradients, though a view of a
  // parameter requires grad (ViT's cls_token.expand(B, -1, -1)). Where grad mode switches inside the graph, a view
  // made under no_grad is one autograd treats apart (an in-place op on it raises later): torch makes those.
  const PyObject* set_grad_enabled = frontend::torch_refs().set_grad_enabled.get();
  const bool inference = !graph.grad_enabled_at_start &&
                         std::none_of(graph.nodes.begin(), graph.nodes.end(),
                                      [&](const graph::Node& n) { return n.target.get() == set_grad_enabled; });
  for (const graph::Node& n : graph.nodes) {
    if (n.type != graph::ValueType::Tensor || !n.meta.device) continue;
    PyRef type = PyRef::steal(PyObject_GetAttrString(n.meta.device.get(), "type"));
    if (!type || utf8(type.get()) != "cuda") {
      PyErr_Clear();
      continue;  // a CPU tensor among CUDA ones: lowering decides
    }
    PyRef index = PyRef::steal(PyObject_GetAttrString(n.meta.device.get(), "index"));
    *device = index && PyLong_Check(index.get()) ? static_cast<int>(PyLong_AsLong(index.get())) : 0;
    PyErr_Clear();
    cuda = true;
    // Parameters require grad even under no_grad; what matters is whether any op's result does.
    if (!inference && n.kind == graph::NodeKind::Call && n.meta.requires_grad)
      return "its outputs need gradients (training graphs run through torch for now)";
  }
  return cuda ? "" : "no CUDA tensors";
}

// Writes the compile's artifacts into their own folder under FASTCOMP_DUMP_DIR; returns the folder ("" when
// dumping is off or failed). Empty texts write no file.
std::filesystem::path dump(const std::string& graph_text, const frontend::GuardSet& guards,
                           const std::string& plan_text, const std::string& cuda) {
  if (config().dump_dir.empty()) return {};
  static std::atomic<int> counter{0};
  std::filesystem::path dir = std::filesystem::path(config().dump_dir) / fmt::format("graph_{:04}", counter++);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return {};
  auto write = [&](const char* name, const std::string& text) {
    if (!text.empty()) write_file(dir / name, text);
  };
  write("graph.txt", graph_text);
  write("guards.txt", guards.to_string());
  write("plan.txt", plan_text);
  write("kernels.cu", cuda);
  return dir;
}

// Small-matmul kernels save the host the cost of a cuBLASLt call (W5: 20.9 us a call against 35.7); replayed from a
// CUDA graph that cost is gone and cuBLAS's kernels are the faster ones (W5 under reduce-overhead: 26.0 us with
// the kernels against 21.8 with cuBLASLt; H100, benchmarks/results/2026-11-25_nvidia-h100_small-matmul.md).
bool small_matmul(bool cuda_graphs) { return config().small_matmul && !cuda_graphs; }

// LowerOptions::masked_attention: whether this torch's math path softmaxes a row with no key to 0 (torch 2.5 on,
// which has aten._safe_softmax), as its fused kernels and fastcomp's attention kernel do.
bool masked_attention() {
  static const bool safe = [] {
    PyRef ops = PyRef::steal(PyObject_GetAttrString(frontend::torch_refs().torch.get(), "ops"));
    PyRef aten = ops ? PyRef::steal(PyObject_GetAttrString(ops.get(), "aten")) : PyRef();
    const bool has = aten && PyObject_HasAttrString(aten.get(), "_safe_softmax");
    PyErr_Clear();
    return has;
  }();
  return safe;
}

void add_tf32_guard(frontend::GuardSet& guards) {
  PyRef c = PyRef::steal(PyObject_GetAttrString(frontend::torch_refs().torch.get(), "_C"));
  PyRef fn = c ? PyRef::steal(PyObject_GetAttrString(c.get(), "_get_cublas_allow_tf32")) : PyRef();
  if (!fn) {
    PyErr_Clear();
    return;
  }
  frontend::Guard g;
  if (frontend::make_global_state_guard(fn.get(), "torch.backends.cuda.matmul.allow_tf32", frontend::StateProbe::None, &g))
    guards.guards.push_back(std::move(g));
}

// The fusion plan as plan.txt and explain() show it: its buffers and steps, then which buffers share the
// executable's scratch arena.
std::string plan_text(const plan::Program& program, const graph::Graph& graph) {
  const std::string scratch = runtime::plan_memory(program, graph).to_string(program);
  return program.to_string(graph) + (scratch.empty() ? "" : "\n" + scratch + "\n");
}

BuiltExecutable torch_runner(graph::Graph graph, const std::string& why) {
  BuiltExecutable out;
  out.executable = runtime::make_torch_runner(std::move(graph));
  out.summary = out.executable->describe() + (why.empty() ? "" : " (" + why + ")");
  return out;
}

}  // namespace

// Tests on machines without a GPU: lower and emit CPU graphs as if they were on an H100 and compile the CUDA C
// to PTX, then run the graph through torch. Checks lowering and codegen of every traced graph on CI.
BuiltExecutable rehearse(graph::Graph graph, bool cuda_graphs) {
  BuiltExecutable out;
  bool asked_sdp_kernel = false;  // rehearsal adds no guards
  const codegen::DeviceLimits h100;
  plan::Program program =
      plan::lower(graph, {0, /*require_cuda=*/false, config().fused_attention, small_matmul(cuda_graphs),
                          config().grouped_products, config().combined_kernels, config().channels_last,
                          codegen::attention_shared_limit(h100),
                          masked_attention(), rehearsed_sdp_kernel(&asked_sdp_kernel),
                          config().attention_mask_bias ? rehearsed_sdp_mask_bias() : nullptr});
  out.plan_text = plan_text(program, graph);
  runtime::CudaSource source = runtime::emit_plan(program, h100);
  out.cuda_source = source.program;
  if (!source.program.empty())
    runtime::cuda::compile_cuda(source.program, "fastcomp_graph", h100.arch, runtime::cuda::Output::Ptx, {});
  // A test's observer gets the plan and every call's inputs and output, to run the plan on the CPU and compare.
  std::string plan_json = rehearsal_observer() ? rehearsal_plan_json(program, graph) : std::string();
  BuiltExecutable runner = torch_runner(std::move(graph), "rehearsal");
  out.executable = plan_json.empty() ? std::move(runner.executable)
                                     : observed_rehearsal(std::move(runner.executable), std::move(plan_json));
  out.summary = "rehearsal: " + program.counts_text();
  return out;
}

namespace {

// Where log lines about a graph point the user: the first user line that made one of its ops.
std::string graph_origin(const graph::Graph& graph) {
  for (const graph::Node& n : graph.nodes)
    if (n.kind == graph::NodeKind::Call && !n.user_loc.empty()) return "the graph from " + n.user_loc;
  return "a graph";
}

std::string graph_label(const graph::Graph& graph, const std::string& summary) {
  return graph_origin(graph) + " (" + summary + ")";
}

// Wraps the CUDA executable in `built` so that it replays as a CUDA graph. `graph` is the one it runs.
void use_cuda_graph(BuiltExecutable& built, const graph::Graph& graph, const plan::Program& program) {
  runtime::CudaGraphOptions options;
  options.device = program.device;
  options.launch_directly = program.extern_steps.empty();
  options.launches = std::max<int>(1, static_cast<int>(program.steps.size()));
  options.label = graph_label(graph, built.summary);
  built.executable = runtime::make_cuda_graph_executable(std::move(built.executable), graph, std::move(options));
  built.summary += " + CUDA graph";
  built.cuda_graph = true;
}

BuiltExecutable without_cuda_graph(BuiltExecutable built, const std::string& label, const std::string& why) {
  FC_LOG(cudagraphs, info, "cudagraphs: {} runs without a CUDA graph: {}", label, why);
  built.summary += " (no CUDA graph: " + why + ")";
  return built;
}

// How long a build whose cubin is cached waits for the background thread's cuBLASLt planning before answering
// its first call through torch.
constexpr double kPlanSettleMs = 8;

BuiltExecutable build_cuda_executable(graph::Graph graph, frontend::GuardSet& guards, int device, bool cuda_graphs);

BuiltExecutable build_executable_for(graph::Graph graph, frontend::GuardSet& guards, bool cuda_graphs) {
  int device = 0;
  std::string why = torch_runner_reason(graph, &device);
  const std::string graph_text = config().dump_dir.empty() ? "" : graph.to_string();
  if (why == "no CUDA tensors" && config().rehearse_cuda_backend) {
    BuiltExecutable rehearsed = rehearse(std::move(graph), cuda_graphs);
    if (!graph_text.empty())
      rehearsed.dump_folder = dump(graph_text, guards, rehearsed.plan_text, rehearsed.cuda_source).string();
    return rehearsed;
  }
  const std::string origin = cuda_graphs ? graph_origin(graph) : "";
  BuiltExecutable built = why.empty() ? build_cuda_executable(std::move(graph), guards, device, cuda_graphs)
                                      : torch_runner(std::move(graph), why);
  if (!graph_text.empty() && built.dump_folder.empty())  // a graph the CUDA backend did not lower
    built.dump_folder = dump(graph_text, guards, "", "").string();
  if (!cuda_graphs || built.cuda_graph) return built;
  const std::string no_graph = built.no_cuda_graph.empty() ? "not on the CUDA backend" : built.no_cuda_graph;
  return without_cuda_graph(std::move(built), origin + " (" + built.summary + ")", no_graph);
}

}  // namespace

BuiltExecutable build_executable(graph::Graph graph, frontend::GuardSet& guards, bool cuda_graphs) {
  graph::share_repeated_casts(graph);
  const bool suspends_autocast = graph.suspends_autocast;
  BuiltExecutable built = build_executable_for(std::move(graph), guards, cuda_graphs);
  if (suspends_autocast) {
    built.executable = runtime::with_autocast_suspended(std::move(built.executable));
    built.summary += ", autocast suspended";
  }
  return built;
}

namespace {

BuiltExecutable build_cuda_executable(graph::Graph graph, frontend::GuardSet& guards, int device, bool cuda_graphs) {
  plan::Program program;
  bool asked_sdp_kernel = false;
  try {
    program = plan::lower(graph, {device, /*require_cuda=*/true, config().fused_attention, small_matmul(cuda_graphs),
                                  config().grouped_products, config().combined_kernels, config().channels_last,
                                  codegen::attention_shared_limit(runtime::device_limits(device)),
                                  masked_attention(), torch_sdp_kernel(&asked_sdp_kernel),
                                  config().attention_mask_bias ? torch_sdp_mask_bias() : nullptr});
  } catch (const plan::NotLowerable& e) {
    return torch_runner(std::move(graph), e.what());
  }
  std::string text = plan_text(program, graph);
  runtime::CudaSource source;
  try {
    source = runtime::emit_plan(program, runtime::device_limits(device), codegen::PointerAlignment::Vector,
                                runtime::nvrtc_program_parts());
  } catch (const std::exception& e) {
    if (!config().suppress_errors) throw;  // raised as fastcomp.InternalError (dispatch.cpp)
    FC_LOG(compile, warning, "fastcomp: the CUDA backend could not emit code for this graph ({}); it runs through "
           "torch instead. Plan:\n{}", e.what(), text);
    return torch_runner(std::move(graph), "code generation failed");
  }
  for (const plan::MatmulStep& m : program.matmul_steps)
    if (m.dtype == codegen::DType::F32) {
      add_tf32_guard(guards);
      break;
    }
  // A head planned after the kernel torch picks holds while the settings behind that pick do.
  if (asked_sdp_kernel) add_sdp_setting_guards(guards);
  const std::filesystem::path dumped = dump(graph.to_string(), guards, text, source.program);
  FC_LOG(output_code, info, "Output code (plan):\n{}\n{}", text, source.program);
  BuiltExecutable out;
  out.dump_folder = dumped.string();
  out.summary = "cuda: " + program.counts_text();
  out.plan_text = std::move(text);
  out.cuda_source = source.program;
  const graph::Graph graph_for_replay = cuda_graphs ? graph : graph::Graph{};
  const plan::Program program_for_replay = cuda_graphs ? program : plan::Program{};
  try {
    runtime::PlanBinary binary = runtime::cached_plan_binary(program, source);
    // torch's matmul switches decide cuBLASLt's descriptors: read once here, and only for graphs with products.
    const runtime::MatmulSwitches switches =
        program.matmul_steps.empty() ? runtime::MatmulSwitches{} : runtime::read_matmul_switches();
    // What is slow (NVRTC on a cache miss, cuBLASLt's first plan of a dtype) happens on the background thread
    // while the first calls run through torch; what is quick (a cached cubin, warm cuBLASLt) happens now.
    const bool needs_nvrtc = binary.empty() && !source.parts.empty();
    if ((needs_nvrtc || !runtime::matmuls_plan_quickly(program)) && config().background_compile) {
      const std::string dumped_source = dumped.empty() ? "" : (dumped / "kernels.cu").string();
      // Only cuBLASLt to plan: a process where torch's own matmuls already warmed cuBLASLt plans in a few ms
      // (W7's warm start), and its first call should then run the kernels: the torch runner's first call pays
      // torch's first use of every op the eager model did not run (~20 ms for W7's decomposed attention).
      const double settle_ms = needs_nvrtc ? 0 : kPlanSettleMs;
      FC_LOG(compile, info, "{}: {} on a background thread; calls run through torch until then "
             "(fastcomp.wait_for_compiles() waits for it)", graph_origin(graph),
             needs_nvrtc ? "its kernels compile (NVRTC)" : "cuBLASLt plans its products");
      out.executable =
          runtime::make_background_executable(std::move(graph), std::move(program), std::move(source),
                                              std::move(binary), switches, out.summary, dumped_source, settle_ms);
    } else {
      if (needs_nvrtc) binary = runtime::compile_plan(program, source);
      out.executable = runtime::make_cuda_executable(graph, std::move(program), source, binary, switches);
    }
    // A CUDA graph replays one set of sizes: a dynamic graph's change per call, so it launches directly.
    if (cuda_graphs && program_for_replay.is_dynamic())
      out.no_cuda_graph = "dynamic shapes (a CUDA graph replays fixed sizes)";
    else if (cuda_graphs) use_cuda_graph(out, graph_for_replay, program_for_replay);
    return out;
  } catch (const runtime::cuda::NvrtcError& e) {
    if (!config().suppress_errors) throw;  // raised as fastcomp.InternalError (dispatch.cpp)
    const std::string path =
        dumped.empty() ? runtime::cuda::save_rejected_source(source.program) : (dumped / "kernels.cu").string();
    FC_LOG(compile, warning, "fastcomp: NVRTC rejected the generated CUDA C ({}); this graph runs through torch "
           "instead. Please report it with the source: {}\nNVRTC log:\n{}", e.what(), path, e.log);
    return torch_runner(std::move(graph), "NVRTC failed");
  } catch (const std::exception& e) {
    if (!config().suppress_errors) throw;  // raised as fastcomp.InternalError (dispatch.cpp)
    FC_LOG(compile, warning, "fastcomp: the CUDA backend failed to build this graph ({}); it runs through torch "
           "instead.", e.what());
    return torch_runner(std::move(graph), "CUDA backend failed");
  }
}

}  // namespace
}  // namespace fastcomp
