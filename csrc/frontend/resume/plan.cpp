#include "frontend/resume/plan.h"

#include <stdexcept>

#include "frontend/bytecode/decode.h"
#include "frontend/resume/continuation.h"
#include "frontend/resume/region.h"
#include "support/pystr.h"

namespace fastcomp::frontend {

namespace {

std::optional<ResumePlan> plan(const cpython::FrameView& frame, const Unsupported& failure, TraceResult& trace,
                               std::string* why, DynamicMode dynamic) {
  PyCodeObject* code = frame.code();
  if (failure.root_instr < 0) {
    *why = "the break is not at an instruction of the frame";
    return std::nullopt;
  }
  // Continuations are always made from the user's code: a break in a resume function maps back to it.
  PyCodeObject* original = code;
  int offset = 0;
  if (const GeneratedCode* g = generated_code(code)) {
    if (!g->original) {
      *why = "the code this resume function continues is gone";
      return std::nullopt;
    }
    original = g->original;
    offset = g->prefix;
    if (failure.root_instr < g->prefix) {
      *why = "the break is in the prologue of a resume function";
      return std::nullopt;
    }
  }
  TraceStop stop{failure.root_instr, failure.root_visit};
  TraceResult prefix = trace_frame(frame, &stop, dynamic);
  if (!prefix.break_state) {
    *why = prefix.failure ? prefix.failure->what() : "the second trace did not reach the break";
    return std::nullopt;
  }
  const BreakState& state = *prefix.break_state;
  ContinuationSpec spec;
  spec.original = original;
  for (const LiveValue& v : state.stack) {
    spec.stack.push_back(v.kind == LiveValue::Kind::Null      ? Slot::Null
                         : v.kind == LiveValue::Kind::GradCtx ? Slot::GradCtx
                                                              : Slot::Value);
    spec.grad_inside.push_back(v.grad_inside);
  }
  ResumePlan result;
  // Arguments: the live locals (in slot order), then the stack values (see continuation.cpp's layout).
  // Locals of the original code only: a resume function's own arguments (___stack0...) are dead past its prologue.
  PyObject* original_names = original->co_localsplusnames;
  for (const auto& [slot, v] : state.locals) {
    if (v.kind == LiveValue::Kind::Null) continue;
    PyObject* name = cpython::slot_name(code, slot);
    int found = PySequence_Contains(original_names, name);
    if (found < 0) PyErr_Clear();
    if (found != 1) continue;
    spec.locals.push_back(utf8(name));
    result.args.push_back(v);
  }
  for (const LiveValue& v : state.stack)
    if (v.kind == LiveValue::Kind::Output || v.kind == LiveValue::Kind::Source) result.args.push_back(v);
  BreakRegion region;
  // A break that cannot resume in compiled code (inside a loop, or before instructions a continuation cannot start
  // from) still keeps the graph before it: CPython runs the rest of the frame.
  std::string reason = find_region(*decoded(original), state.instr - offset, spec.stack, 0, &region);
  if (!reason.empty()) {
    std::string tail = find_tail_region(*decoded(original), state.instr - offset, 0, &region);
    if (!tail.empty()) {
      *why = reason;
      return std::nullopt;
    }
    result.runs_rest_in_cpython = reason;
  }
  spec.entry = region.first;
  spec.region = &region;
  try {
    Continuation made = make_continuation(spec);
    result.break_code = made.code;
    result.exit_codes = made.exits;
  } catch (const std::exception& e) {
    PyErr_Clear();
    *why = e.what();
    return std::nullopt;
  }
  result.instr = state.instr - offset;
  trace = std::move(prefix);
  return result;
}

}  // namespace

std::optional<ResumePlan> plan_graph_break(const cpython::FrameView& frame, const Unsupported& failure,
                                           TraceResult& trace, std::string* why, DynamicMode dynamic) {
  try {
    return plan(frame, failure, trace, why, dynamic);
  } catch (const std::exception& e) {  // a bytecode this encoder cannot express, a failed code.replace...
    PyErr_Clear();
    *why = std::string("fastcomp could not build the code that continues after the break: ") + e.what();
    return std::nullopt;
  }
}

}  // namespace fastcomp::frontend
