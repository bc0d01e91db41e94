// What a cache entry runs on a hit: a compiled graph taking the guard program's inputs.
#pragma once
#include <Python.h>

#include <memory>
#include <string>

#include "graph/ir.h"

namespace fastcomp::runtime {

class Executable {
 public:
  virtual ~Executable() = default;
  // Runs the graph on `inputs` (borrowed, in Graph::inputs order). Returns a new reference to the output,
  // or null with a Python exception set.
  virtual PyObject* run(PyObject* const* inputs, size_t ninputs) = 0;
  virtual std::string describe() const = 0;  // e.g. "torch runner: 5 ops"
  // True while the executable still stands in for one being built (kernels compiling on a thread): what runs
  // now is not what will run later, so nothing should be recorded from it (e.g. a CUDA graph).
  virtual bool compiling() const { return false; }
  // cuBLASLt products whose tuned algorithm differs from the heuristic's favourite (0 when there are none), and a
  // switch to run such products with the favourite instead: a pick timed alone can lose inside the model, which
  // the CUDA-graph executable measures by replaying the graph both ways.
  virtual int tuned_matmul_picks() const { return 0; }
  virtual void prefer_heuristic_matmul_picks(bool) {}
};

/** Executes a graph by calling each node's torch callable in order (CPU and CUDA tensors; autograd works). */
std::unique_ptr<Executable> make_torch_runner(graph::Graph graph);

}  // namespace fastcomp::runtime
