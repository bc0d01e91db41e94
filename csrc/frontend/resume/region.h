// The instructions CPython runs at a graph break (the "region") and where control leaves them. A region is the
// breaking instruction (with a CALL's KW_NAMES/PRECALL), extended over a following `<break result> <op> <const>`
// comparison that ends in a conditional jump, so that `if x.sum().item() > 0:` resumes in the branch taken
// instead of specialising the continuation on the float.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "frontend/bytecode/instr.h"

namespace fastcomp::frontend {

// What a stack slot holds, as far as generated code needs to know.
enum class Slot : uint8_t {
  Null,     // CPython's NULL below a callable: cannot be passed as an argument, re-pushed with PUSH_NULL
  Value,    // any object: passed as an argument
  GradCtx,  // the __exit__ of a torch.no_grad()/enable_grad() block: exited before and re-entered after a call
};

struct BreakRegion {
  int first = -1;  // first instruction CPython runs
  int last = -1;   // last instruction of the region, inclusive
  struct Exit {
    int target;               // where execution continues after the region
    std::vector<Slot> stack;  // the stack there, bottom first
  };
  std::vector<Exit> exits;
  int fallthrough_exit = -1;  // index into exits of the exit after `last`, -1 if `last` always jumps
  // Region instructions that jump out of it: instruction index and the exit they take.
  std::vector<std::pair<int, int>> jumps;
};

/** Non-empty (the reason) when instruction `instr` is inside a loop of `stream`: a break there is not resumed,
    because every iteration would call a new continuation (unbounded recursion). */
std::string loop_around(const InstrStream& stream, int instr);

/** The region of a break that does not resume in compiled code: from the breaking instruction (with its call group)
    to the end of the code, so CPython runs the rest of the frame (the functions it calls are still compiled). For
    breaks inside loops, whose every iteration would otherwise call a continuation of its own. */
std::string find_tail_region(const InstrStream& stream, int instr, int first_allowed, BreakRegion* out);

/** Finds the region of a break at instruction `instr` of `stream` whose stack before it is `stack`. Returns an
    empty string on success, else why the break cannot be resumed (loops, instructions whose stack effect is
    not modelled, unsupported instructions elsewhere in the code). `first_allowed`: regions must not start
    before it (the prologue of a continuation, whose breaks would never make progress). */
std::string find_region(const InstrStream& stream, int instr, const std::vector<Slot>& stack, int first_allowed,
                        BreakRegion* out);

}  // namespace fastcomp::frontend
