// A graph break: at the stop, the frame's live values (stack, locals, what the trace changed) become the graph's
// outputs or sources, and the break state says how the code after the break gets them back (frontend/resume).
#include <functional>
#include <unordered_map>

#include "frontend/trace/tracer.h"

namespace fastcomp::frontend {
namespace {

// Zero-argument super() reads the __class__ cell.
bool uses_zero_argument_super(PyCodeObject* code) {
  for (int i = code->co_nlocalsplus - code->co_nfreevars; i < code->co_nlocalsplus; ++i)
    if (PyUnicode_CompareWithASCIIString(cpython::slot_name(code, i), "__class__") == 0) return true;
  return false;
}

}  // namespace

TraceResult Tracer::capture_break(TraceFrame& f) {
  if (!autocast_open_.empty()) throw NotResumable("a graph break inside a `with torch.autocast(...)` block");
  BreakState state;
  state.instr = f.pc;
  graph::Arg out;
  out.kind = graph::Arg::Kind::Tuple;
  std::unordered_map<const Value*, int> made;  // a value the trace made is rebuilt once, so aliases stay aliases
  std::vector<ValueRef> roots(f.stack.begin(), f.stack.end());
  for (const ValueRef& l : f.locals) roots.push_back(l);
  for (const ValueRef& m : mutated_) roots.push_back(m);
  for (const DeferredCall& c : deferred_calls_) {
    roots.insert(roots.end(), c.args.begin(), c.args.end());
    for (const auto& kv : c.kwargs) roots.push_back(kv.second);
  }
  begin_outputs(roots);
  std::function<LiveValue(const ValueRef&)> live_value;
  auto live = live_value = [&](const ValueRef& v) -> LiveValue {
    if (!v || v->is(VKind::Null)) return {LiveValue::Kind::Null};
    if (v->is(VKind::CtxExit)) return {LiveValue::Kind::GradCtx};
    if (v->is(VKind::AutocastExit)) throw NotResumable("a graph break inside a `with torch.autocast(...)` block");
    if (v->source >= 0) return {LiveValue::Kind::Source, v->source};  // an object (or cell) of the frame itself
    auto it = made.find(v.get());
    if (it != made.end()) return {LiveValue::Kind::Output, it->second};
    try {
      out.items.push_back(to_output_arg(v));
    } catch (Unsupported&) {
      throw NotResumable("the code after the break needs " + describe(*v) + ", which has no Python form yet");
    }
    int index = static_cast<int>(out.items.size()) - 1;
    made.emplace(v.get(), index);
    return {LiveValue::Kind::Output, index};
  };
  for (const ValueRef& v : f.stack) state.stack.push_back(live(v));
  // A with block's __exit__ restores the mode outside it; the mode inside is the next block's outside mode,
  // or the current mode for the innermost block.
  bool inside = grad_enabled_;
  for (size_t i = f.stack.size(); i-- > 0;) {
    if (!f.stack[i] || !f.stack[i]->is(VKind::CtxExit)) continue;
    state.stack[i].grad_inside = inside;
    inside = f.stack[i]->flag;
  }
  PyCodeObject* code = root_.code();
  for (int i = 0; i < root_.nlocalsplus(); ++i) {
    switch (root_.slot_kind(i)) {
      case cpython::SlotKind::Free: continue;  // the continuation gets the same closure
      case cpython::SlotKind::CellArg:
        // The continuation holds cell variables as plain locals that contain the cells; zero-argument super()
        // would then read the cell instead of the object in slot 0.
        if (i == 0 && uses_zero_argument_super(code))
          throw NotResumable("a break in a method whose first argument is a cell variable and that uses super()");
        break;
      default: break;
    }
    if (f.locals[i]) state.locals.emplace_back(i, live(f.locals[i]));
    else if (!f.lazy_sources.empty() && f.lazy_sources[i] >= 0)
      state.locals.emplace_back(i, LiveValue{LiveValue::Kind::Source, f.lazy_sources[i]});
  }
  std::vector<SideEffect> effects = plan_side_effects(&out);
  // The graph ends here, so it leaves grad mode as it found it; the code after the break re-enters the blocks.
  if (grad_enabled_ != grad_enabled_at_start_) set_grad_mode(grad_enabled_at_start_);
  graph_.output = std::move(out);
  add_global_state_guards(true);
  TraceResult r = finish(TraceResult{std::move(graph_), std::move(guards_)});
  r.break_state = std::move(state);
  r.side_effects = std::move(effects);
  return r;
}

}  // namespace fastcomp::frontend
