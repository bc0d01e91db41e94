// mode="reduce-overhead": a graph's CUDA executable recorded once into a CUDA graph and replayed with one launch.
//
// Inputs. A replay reads each input where it lay when the graph was captured (its "home"). A call whose input is
// at the home address costs nothing; parameters and buffers always are. A call whose input lies elsewhere copies
// it home (one device-to-device copy) when fastcomp alone holds the home's memory: either a buffer of its own, or
// a tensor the user passed at capture and has since dropped. Otherwise the graph is captured again with that
// input in a buffer of fastcomp's own, so inputs that move around settle after one recapture. Where the copies
// would cost more GPU time than the replay saves in launches (large inputs, few kernels), such a call runs the
// executable directly instead, until the caller settles on its input tensors (the same addresses two calls in a
// row, as when it refills them with copy_()): then the graph is captured again reading them in place.
//
// Matrix products. cuBLASLt's tuning times each product alone, and a pick that wins alone can lose among the
// model's other kernels; so at its first capture a graph whose products have tuned picks is captured once more
// with the heuristic's favourites, the two replay in turn, and the faster stays.
//
// Outputs. A replay writes its outputs into the same memory every time, and returns those tensors. Before it
// overwrites them, it checks that nobody still holds them (the tensor objects or any view of their storage). If
// the user still holds the last replay's outputs (`y = f(x)` in a loop holds the previous y during the call), a
// second capture with its own outputs alternates with the first; if both are held, the call runs without the CUDA
// graph and returns fresh tensors. Outputs therefore never change under the user. An output that is an input, or a
// view of one (x.t(), a kwargs dict handing input_ids back), is not the graph's to write: each call returns that
// call's input, or makes the view again from it (as_strided, one host call).
#pragma once
#include <memory>
#include <string>

#include "graph/ir.h"
#include "runtime/executable.h"

namespace fastcomp::runtime {

struct CudaGraphOptions {
  int device = 0;
  // The executable runs only fastcomp's kernels and cuBLASLt: replays go straight to cuGraphLaunch. Otherwise
  // through torch.cuda.CUDAGraph.replay(), which also advances torch's random generators for captured RNG ops.
  bool launch_directly = false;
  int launches = 1;   // kernel launches, cuBLASLt calls and extern ops per call: what a replay saves
  std::string label;  // names the graph in log lines, e.g. "model.py:12 (3 kernels, 2 cuBLAS calls)"
};

/** Wraps `inner` (the graph's CUDA executable, possibly still compiling) so that, after one warm-up call, calls
 *  replay a CUDA graph of it. Falls back to `inner` for good, with a one-time log line on the cudagraphs topic,
 *  when capture fails. */
std::unique_ptr<Executable> make_cuda_graph_executable(std::unique_ptr<Executable> inner, const graph::Graph& graph,
                                                       CudaGraphOptions options);

}  // namespace fastcomp::runtime
