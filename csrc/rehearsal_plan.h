// Tests on machines without a GPU (rehearsal, backend.cpp): a lowered plan as JSON for tests/backend/plan_on_cpu.py,
// which runs it on the CPU (its kernels through tests/codegen/cuda_on_cpu.h, its matrix products through torch)
// and compares the result with the torch runner's, so CI checks the numbers a plan computes. Nothing here runs
// in a user's program unless a test installed an observer.
#pragma once
#include <Python.h>

#include <memory>
#include <string>

#include "graph/ir.h"
#include "plan/program.h"
#include "runtime/executable.h"

namespace fastcomp {

/** The plan as JSON: its symbols (input, dimension), buffers, steps (kernels with a CPU-sized grid, their vector
 *  operands and size parameters; matrix products; extern nodes), the CUDA C emitted for a 2-SM device with vector
 *  accesses and with scalar ones (any alignment), and the buffers of the graph's outputs in order. Symbolic sizes
 *  are their expressions' text, which Python evaluates as written. */
std::string rehearsal_plan_json(const plan::Program& program, const graph::Graph& graph);

/** The callable tests installed (_testing.set_rehearsal_observer), or null. */
PyObject* rehearsal_observer();
void set_rehearsal_observer(PyObject* observer);  // new reference taken; None or null clears it

/** `runner`, which after each successful run calls the observer with (plan JSON, the inputs as a tuple, the
 *  output); an exception the observer raises is the call's. */
std::unique_ptr<runtime::Executable> observed_rehearsal(std::unique_ptr<runtime::Executable> runner,
                                                         std::string plan_json);

}  // namespace fastcomp
