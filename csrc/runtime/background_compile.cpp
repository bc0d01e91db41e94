#include "runtime/background_compile.h"

#include <Python.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/nvrtc.h"
#include "support/log.h"

namespace fastcomp::runtime {
namespace {

// Compiles in flight, for wait_for_compiles().
struct InFlight {
  std::mutex mutex;
  std::condition_variable done;
  int count = 0;
};
InFlight& in_flight() {
  static auto* f = new InFlight();  // never destroyed: detached threads may finish during interpreter exit
  return *f;
}

// What the compile thread hands over: written once by it, read by the executable after `ready`.
struct Outcome {
  std::atomic<bool> ready{false};
  PlanBinary binary;
  MatmulPlans plans;
  std::string error, nvrtc_log;
  bool nvrtc_failed = false;
};

// The thread's work: NVRTC (unless the cubin came from the cache) and cuBLASLt's planning, side by side when
// there is NVRTC work (neither waits for the other and each can take 100 ms), else planning alone on this thread.
void compile_and_plan(Outcome& outcome, const plan::Program& program, const CudaSource& source,
                      const MatmulSwitches& switches) {
  auto plan_all = [&] {
    const auto start = std::chrono::steady_clock::now();
    MatmulPlans made = plan_matmuls(program, switches);
    FC_LOG(compile, debug, "planned {} cuBLASLt calls in {:.1f} ms on the background thread", made.size(),
           std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    return made;
  };
  const bool needs_nvrtc = outcome.binary.empty() && !source.parts.empty();
  std::future<MatmulPlans> plans;
  if (needs_nvrtc && !program.matmul_steps.empty()) plans = std::async(std::launch::async, plan_all);
  try {
    if (needs_nvrtc) outcome.binary = compile_plan(program, source);
  } catch (const cuda::NvrtcError& e) {
    outcome.error = e.what(), outcome.nvrtc_log = e.log, outcome.nvrtc_failed = true;
  } catch (const std::exception& e) {
    outcome.error = e.what();
  }
  try {
    if (plans.valid()) outcome.plans = plans.get();
    else if (!program.matmul_steps.empty()) outcome.plans = plan_all();
  } catch (const std::exception& e) {
    if (outcome.error.empty()) outcome.error = e.what();
  }
}

class BackgroundExecutable final : public Executable {
 public:
  BackgroundExecutable(graph::Graph graph, plan::Program program, CudaSource source,
                       PlanBinary binary, const MatmulSwitches& switches, std::string summary,
                       std::string source_path, double settle_ms)
      : fallback_(make_torch_runner(graph)),
        graph_(std::move(graph)),
        program_(std::move(program)),
        source_(std::move(source)),
        switches_(switches),
        summary_(std::move(summary)),
        source_path_(std::move(source_path)),
        outcome_(std::make_shared<Outcome>()) {
    outcome_->binary = std::move(binary);
    {
      std::lock_guard lock(in_flight().mutex);
      ++in_flight().count;
    }
    // The thread owns copies of everything it reads, so the executable may die (fastcomp.reset()) first.
    std::thread([outcome = outcome_, program = program_, source = source_, switches = switches_] {
      compile_and_plan(*outcome, program, source, switches);
      outcome->ready.store(true, std::memory_order_release);
      std::lock_guard lock(in_flight().mutex);
      --in_flight().count;
      in_flight().done.notify_all();
    }).detach();
    if (settle_ms > 0) settle(settle_ms);
  }

  PyObject* run(PyObject* const* inputs, size_t ninputs) override {
    if (cuda_) return cuda_->run(inputs, ninputs);
    if (!failed_ && outcome_->ready.load(std::memory_order_acquire)) promote();
    return (cuda_ ? cuda_ : fallback_)->run(inputs, ninputs);
  }

  bool compiling() const override {
    return !cuda_ && !failed_ && !outcome_->ready.load(std::memory_order_acquire);
  }

  std::string describe() const override {
    return summary_ + (cuda_ ? "" : failed_ ? " (failed: runs through torch)" : " (compiling: runs through torch)");
  }

  int tuned_matmul_picks() const override { return cuda_ ? cuda_->tuned_matmul_picks() : 0; }
  void prefer_heuristic_matmul_picks(bool yes) override {
    if (cuda_) cuda_->prefer_heuristic_matmul_picks(yes);
  }

 private:
  // Waits up to `ms` for the thread (without the GIL, which loading cuBLASLt may take), and switches to the
  // kernels at once when it finished: then the first call runs them rather than through torch.
  void settle(double ms) {
    bool ready = false;
    Py_BEGIN_ALLOW_THREADS;
    std::unique_lock lock(in_flight().mutex);
    ready = in_flight().done.wait_for(lock, std::chrono::duration<double, std::milli>(ms),
                                      [&] { return outcome_->ready.load(std::memory_order_acquire); });
    Py_END_ALLOW_THREADS;
    if (ready) promote();
  }

  void promote() {
    if (outcome_->nvrtc_failed) {
      failed_ = true;
      FC_LOG(compile, warning,
             "fastcomp: NVRTC rejected the generated CUDA C ({}); this graph keeps running through torch. Please "
             "report it with the source: {}\nNVRTC log:\n{}",
             outcome_->error, source_path_.empty() ? cuda::save_rejected_source(source_.program) : source_path_,
             outcome_->nvrtc_log);
      return;
    }
    try {
      if (!outcome_->error.empty()) throw std::runtime_error(outcome_->error);
      cuda_ = make_cuda_executable(std::move(graph_), std::move(program_), source_, outcome_->binary, switches_,
                                   std::move(outcome_->plans));
      FC_LOG(compile, info, "background compile finished, the graph's calls run its kernels now: {}", summary_);
    } catch (const std::exception& e) {
      failed_ = true;
      FC_LOG(compile, warning, "fastcomp: the CUDA backend failed to load this graph ({}); it keeps running "
             "through torch.", e.what());
    }
  }

  std::unique_ptr<Executable> fallback_;
  std::unique_ptr<Executable> cuda_;
  graph::Graph graph_;
  plan::Program program_;
  CudaSource source_;
  MatmulSwitches switches_;
  std::string summary_, source_path_;
  std::shared_ptr<Outcome> outcome_;
  bool failed_ = false;
};

}  // namespace

std::unique_ptr<Executable> make_background_executable(graph::Graph graph, plan::Program program, CudaSource source,
                                                       PlanBinary binary, const MatmulSwitches& switches,
                                                       std::string summary,
                                                       std::string source_path, double settle_ms) {
  return std::make_unique<BackgroundExecutable>(std::move(graph), std::move(program), std::move(source),
                                                std::move(binary), switches, std::move(summary),
                                                std::move(source_path), settle_ms);
}

bool wait_for_compiles(double timeout_s) {
  bool finished = true;
  Py_BEGIN_ALLOW_THREADS;
  std::unique_lock lock(in_flight().mutex);
  auto idle = [] { return in_flight().count == 0; };
  if (timeout_s < 0) in_flight().done.wait(lock, idle);
  else finished = in_flight().done.wait_for(lock, std::chrono::duration<double>(timeout_s), idle);
  Py_END_ALLOW_THREADS;
  return finished;
}

}  // namespace fastcomp::runtime
