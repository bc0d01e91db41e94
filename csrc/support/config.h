// fastcomp's settings, as fastcomp.config sets them from Python (which also reads the FASTCOMP_* variables).
#pragma once
#include <string>
#include <vector>

namespace fastcomp {

// Whether checks of a guard set take its GuardMemo's shortcut (frontend/guards/guard_memo.h).
enum class GuardMemoUse { Auto, Always, Off };  // Auto: for sets of 16 sources or more

struct Config {
  int recompile_limit = 8;          // cache entries per code object and option set before running eagerly
  bool error_on_recompile = false;  // raise instead of warning when the limit is hit
  bool suppress_errors = true;      // internal compile failures warn once and run eagerly
  bool background_compile = true;   // NVRTC runs on a thread; the graph runs through torch until it is done
  bool cuda_backend = true;         // graphs on CUDA tensors run generated kernels (else the torch runner)
  bool rehearse_cuda_backend = false;  // tests: lower CPU graphs, compile their CUDA C to PTX, run them on torch
  int nvrtc_threads = 0;            // threads one NVRTC compile may use (--split-compile); 0: runtime::cuda decides
  std::string nvrtc_fast_compile;   // "", "min", "mid" or "max": NVRTC's -Ofast-compile level ("": full optimisation)
  bool matmul_tuning = true;        // time cuBLASLt's candidate algorithms on a product's first run (MatmulPlan)
  bool fused_attention = true;      // nn.MultiheadAttention's heads as one kernel where they fit (plan::LowerOptions)
  bool small_matmul = true;         // F.linear of a few rows as a kernel of its own, not cuBLASLt (plan::LowerOptions)
  bool grouped_products = true;     // products of one A as one batched cuBLASLt call (plan/group_products.h)
  bool combined_kernels = true;     // pointwise kernels of graph inputs alone as one, run early (plan/combine_kernels.h)
  bool attention_mask_bias = false; // cuDNN attention's boolean mask as a bias the plan makes (plan::LowerOptions)
  bool channels_last = true;        // values between convolutions planned NHWC where unobserved (plan/channels_last.h)
  std::string explicit_autocast = "cuda";  // devices whose ops under autocast become explicit casts: cuda, all, off
  GuardMemoUse guard_memo = GuardMemoUse::Auto;
  std::string dump_dir;             // non-empty: every compile writes its artifacts (graph, plan, .cu) here
  // Automatic-dynamic decisions are read from and written to the kernel cache's dynamic/ folder. Off by default:
  // decisions on disk are keyed by code object, so one program's calls would change another's compiles.
  bool automatic_dynamic_on_disk = false;
  // Code under these directories (torch, the standard library, fastcomp) is never compiled as a frame of its
  // own when the CPython part of a compiled function calls it. Set by the Python package at import.
  std::vector<std::string> skip_dirs;
};

Config& config();

}  // namespace fastcomp
