// What the frontend keeps about a code object, owned by that code object (a co_extra slot of its own) and freed
// with it: nothing the frontend learns about a function outlives the function, and fastcomp.reset() drops
// the code it generated.
#pragma once
#include <Python.h>

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "frontend/bytecode/instr.h"
#include "frontend/resume/continuation.h"
#include "frontend/trace/dynamic_memory.h"

namespace fastcomp::frontend {

struct CodeInfo {
  // Its instructions, decoded once. `decoded->code` is empty: the code object owns this, and a reference back
  // to it would keep it alive forever.
  std::shared_ptr<const InstrStream> decoded;
  // The break codes and resume functions made from it (strong references), by continuation spec.
  std::unordered_map<std::string, Continuation> continuations;
  // Set when fastcomp generated this code. Its `original` is borrowed: the original holds this code through
  // `continuations`, and clears `original` (orphaning this code) if it dies first.
  std::optional<GeneratedCode> generated;
  // Automatic dynamic shapes: the sizes its compiles have seen.
  DynamicMemory dynamic;
  // FASTCOMP_LOGS=bytecode listed it (once per code object).
  bool bytecode_logged = false;

  CodeInfo();
  ~CodeInfo();
  CodeInfo(const CodeInfo&) = delete;
  CodeInfo& operator=(const CodeInfo&) = delete;
};

// The info of `code`, made on first use. Needs the GIL; throws std::runtime_error when the interpreter has no
// co_extra index left.
CodeInfo& code_info(PyCodeObject* code);
// Null when `code` has none.
CodeInfo* find_code_info(PyCodeObject* code);

// fastcomp.reset(): drops every continuation made so far (the compiled entries that ran them are dropped too)
// and forgets the sizes seen.
void reset_code_infos();

}  // namespace fastcomp::frontend
