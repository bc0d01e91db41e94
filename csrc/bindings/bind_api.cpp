#include "api/dispatcher.h"
#include "bindings/bind.h"
#include <pybind11/stl.h>
#include <optional>
#include "cpython/eval_hook.h"
#include "compile.h"
#include "dispatch.h"
#include "frontend/code_info.h"
#include "frontend/guards/guard_memo.h"
#include "frontend/trace/tracer.h"
#include "rehearsal_plan.h"
#include "runtime/background_compile.h"
#include "runtime/cache.h"
#include "support/config.h"

namespace fastcomp::bindings {

void bind_api(py::module_& m) {
  if (!api::ready_types()) throw py::error_already_set();
  cpython::set_frame_handler(&handle_frame);
  frontend::register_special_object("disabled_type", reinterpret_cast<PyObject*>(api::disabled_type()));
  m.attr("CompiledFunction") = py::handle(reinterpret_cast<PyObject*>(api::dispatcher_type()));

  m.def(
      "make_dispatcher",
      [](py::object fn, py::object target, bool fullgraph, py::object dynamic, std::string mode, std::string backend,
         bool explain) {
        if (!PyCode_Check(target.ptr())) throw py::type_error("target must be a code object");
        CompileOptions o;
        o.fullgraph = fullgraph;
        o.dynamic = dynamic.is_none() ? -1 : dynamic.cast<bool>();
        o.mode = std::move(mode);
        o.backend = std::move(backend);
        PyObject* d = api::make_dispatcher(fn.ptr(), reinterpret_cast<PyCodeObject*>(target.ptr()), std::move(o), explain);
        if (!d) throw py::error_already_set();
        return py::reinterpret_steal<py::object>(d);
      },
      py::arg("fn"), py::arg("target"), py::arg("fullgraph"), py::arg("dynamic"), py::arg("mode"), py::arg("backend"),
      py::arg("explain") = false, "a callable that runs fn with frames of `target` compiled");
  m.def(
      "make_disabled",
      [](py::object fn) {
        PyObject* d = api::make_disabled(fn.ptr());
        if (!d) throw py::error_already_set();
        return py::reinterpret_steal<py::object>(d);
      },
      "a callable that runs fn and never traces into it");
  m.def(
      "reset",
      [] {
        runtime::reset_all_caches();
        frontend::reset_code_infos();
      },
      "drop every compiled entry (with its CUDA graphs), the code made for graph breaks, and the sizes and dynamic "
      "decisions seen; files on disk stay");
  m.def("set_compile_observer", [](py::object o) { set_compile_observer(o.ptr()); });
  m.def("register_special", [](const std::string& role, py::object o) { frontend::register_special_object(role, o.ptr()); });
  m.def("is_dispatching", &is_dispatching);
  m.def("set_skip_dirs", [](std::vector<std::string> dirs) { config().skip_dirs = std::move(dirs); },
        "directories whose code is never compiled as a nested frame");
  m.def(
      "set_rehearsal_observer", [](py::object fn) { set_rehearsal_observer(fn.ptr()); }, py::arg("observer"),
      "tests: observer(plan_json, inputs, output) after every call of a rehearsed graph (None: no observer); "
      "graphs compiled while it is set carry it");
  m.def(
      "set_rehearse_cuda_backend", [](bool on) { config().rehearse_cuda_backend = on; },
      "tests: lower graphs on CPU tensors as if on a GPU, compile their CUDA C to PTX, run them through torch");
  m.def(
      "guard_check_stats",
      [](std::optional<bool> timed) {
        frontend::GuardCheckStats& s = frontend::guard_check_stats();
        if (timed) s.timed = *timed;
        py::dict d;
        d["checks"] = s.checks;
        d["check_ns"] = s.check_ns;
        d["memo_passed"] = s.memo_passed;
        d["memo_failed"] = s.memo_failed;
        d["memo_stale"] = s.memo_stale;
        d["memo_records"] = s.memo_records;
        return d;
      },
      py::arg("timed") = py::none(),
      "tests and benchmarks: counts over the process of the guard checks of calls (checks; check_ns, their time "
      "while timed=True was last passed) and of what guard memos did: answered (memo_passed, memo_failed), could "
      "not answer (memo_stale: a recorded dict changed) and recorded (memo_records)");
  m.def("fail_next_trace_for_tests", &fail_next_trace_for_tests, py::arg("reason"),
        "tests: the next frame compiled reports `reason` as an unresumable GB999 break instead of tracing");
  m.def(
      "set_config",
      [](int recompile_limit, bool error_on_recompile, bool suppress_errors, bool cuda_backend,
         bool background_compile, const std::string& dump_dir, bool automatic_dynamic_on_disk, int nvrtc_threads,
         const std::string& nvrtc_fast_compile, bool matmul_tuning, bool fused_attention, bool small_matmul,
         bool grouped_products, bool combined_kernels, bool attention_mask_bias, bool channels_last,
         const std::string& guard_memo, const std::string& explicit_autocast) {
        if (explicit_autocast != "cuda" && explicit_autocast != "all" && explicit_autocast != "off")
          throw py::value_error("fastcomp.config.explicit_autocast must be 'cuda', 'all' or 'off', not '" +
                                explicit_autocast + "'");
        if (guard_memo != "auto" && guard_memo != "always" && guard_memo != "off")
          throw py::value_error("fastcomp.config.guard_memo must be 'auto', 'always' or 'off', not '" + guard_memo + "'");
        if (!nvrtc_fast_compile.empty() && nvrtc_fast_compile != "min" && nvrtc_fast_compile != "mid" &&
            nvrtc_fast_compile != "max")
          throw py::value_error("fastcomp.config.nvrtc_fast_compile must be '', 'min', 'mid' or 'max', not '" +
                                nvrtc_fast_compile + "'");
        config().recompile_limit = recompile_limit;
        config().error_on_recompile = error_on_recompile;
        config().suppress_errors = suppress_errors;
        config().cuda_backend = cuda_backend;
        config().background_compile = background_compile;
        config().dump_dir = dump_dir;
        config().automatic_dynamic_on_disk = automatic_dynamic_on_disk;
        config().nvrtc_threads = nvrtc_threads;
        config().nvrtc_fast_compile = nvrtc_fast_compile;
        config().matmul_tuning = matmul_tuning;
        config().fused_attention = fused_attention;
        config().small_matmul = small_matmul;
        config().grouped_products = grouped_products;
        config().combined_kernels = combined_kernels;
        config().attention_mask_bias = attention_mask_bias;
        config().channels_last = channels_last;
        config().explicit_autocast = explicit_autocast;
        config().guard_memo = guard_memo == "off" ? GuardMemoUse::Off
                              : guard_memo == "always" ? GuardMemoUse::Always
                                                       : GuardMemoUse::Auto;
      },
      py::arg("recompile_limit"), py::arg("error_on_recompile"), py::arg("suppress_errors"), py::arg("cuda_backend"),
      py::arg("background_compile"), py::arg("dump_dir"), py::arg("automatic_dynamic_on_disk"), py::arg("nvrtc_threads"), py::arg("nvrtc_fast_compile"),
      py::arg("matmul_tuning"), py::arg("fused_attention"), py::arg("small_matmul"), py::arg("grouped_products"),
      py::arg("combined_kernels"), py::arg("attention_mask_bias"), py::arg("channels_last"), py::arg("guard_memo"), py::arg("explicit_autocast"));
  m.def(
      "wait_for_compiles", [](double timeout_s) { return runtime::wait_for_compiles(timeout_s); },
      py::arg("timeout_s") = -1.0, "block until background kernel compiles finish; False on timeout");
}

}  // namespace fastcomp::bindings
