// Graphs traced under autocast with their casts explicit (graph::Graph::suspends_autocast) run with autocast off:
// their torch calls already take the cast tensors, and autocast must not cast again what it did not cast in eager.
#pragma once
#include <memory>

#include "runtime/executable.h"

namespace fastcomp::runtime {

/** `inner`, run between fastcomp._autocast.suspend() and resume(); resume() also runs when the graph raises. */
std::unique_ptr<Executable> with_autocast_suspended(std::unique_ptr<Executable> inner);

}  // namespace fastcomp::runtime
