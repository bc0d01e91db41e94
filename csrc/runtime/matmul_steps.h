// A plan's matrix-product steps (plan::MatmulStep) as cuBLASLt descs and plans: what torch's switches allow, the
// descs at the trace-time shapes (planned on the background thread beside NVRTC) and at each call's shapes, and
// a group's batched descs (plan/group_products.h). The CUDA executable runs them (cuda_executable.cpp).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "plan/program.h"
#include "runtime/cuda/cublaslt.h"

namespace fastcomp::runtime {

/** torch's global switches that decide how cuBLASLt may compute a product, read once when a graph is built (the
 *  TF32 one is guarded): torch.backends.cuda.matmul.allow_tf32 and the fp16/bf16 reduced-precision reductions.
 *  Needs the GIL. */
struct MatmulSwitches {
  bool tf32 = false, fp16_reduction = true, bf16_reduction = true;
};
MatmulSwitches read_matmul_switches();

/** The plan's cuBLASLt calls planned at their trace-time shapes, one per plan::Program::matmul_steps. Needs no
 *  GIL: where cuBLASLt has not yet answered for a dtype in this process (cuda::heuristic_warm), planning costs
 *  30-110 ms, so it runs on the background thread beside NVRTC. Throws CublasError (a shape cuBLASLt refuses) or
 *  CudaLibraryError. */
using MatmulPlans = std::vector<std::unique_ptr<cuda::MatmulPlan>>;
MatmulPlans plan_matmuls(const plan::Program& program, const MatmulSwitches& switches);
/** Whether plan_matmuls would be quick (every dtype of the plan's products already warm in cuBLASLt). */
bool matmuls_plan_quickly(const plan::Program& program);

// A step's shape fields (m, n, k, batch, A's row/col/batch strides, B's, D's row/batch strides): their sizes,
// in the order with_shape() reads their values.
using MatmulShape = std::array<int64_t, 12>;
std::array<const codegen::Size*, 12> shape_fields(const plan::MatmulStep& s);
// A step's desc without its shape: dtype, epilogue and what torch's switches allow.
cuda::MatmulDesc unshaped_desc(const plan::MatmulStep& s, const MatmulSwitches& switches);
// `d` with the shape fields' values `f` filled in.
cuda::MatmulDesc with_shape(cuda::MatmulDesc d, const MatmulShape& f);
// `count` products of a group's desc (MatmulStep::b_next) whose weights lie `b_step` elements apart (and biases
// `bias_step`), as one batched call; count 1 is one product alone.
cuda::MatmulDesc products_of_group(cuda::MatmulDesc d, int64_t count, int64_t b_step, int64_t bias_step);
// The step's desc at its trace-time shape, the one planned when the executable is built (a group's: one product).
cuda::MatmulDesc trace_time_desc(const plan::MatmulStep& s, const MatmulSwitches& switches);

}  // namespace fastcomp::runtime
