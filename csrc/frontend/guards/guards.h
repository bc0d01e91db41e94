// Guards: the conditions under which a compiled entry may be reused, over sources of the frame. Built by
// the tracer (GuardSet) and checked on every call in one pass that also collects the graph's inputs.
#pragma once
#include <Python.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cpython/frame.h"
#include "cpython/pyref.h"
#include "frontend/guards/source.h"
#include "graph/ir.h"

namespace fastcomp::frontend {

enum class GuardKind : uint8_t {
  TypeMatch,    // type(value) is expected (exact)
  IdMatch,      // value is expected (identity)
  ConstEquals,  // type(value) is type(expected) and value == expected
  TensorMatch,  // exact tensor type, dtype, device, sizes, strides, requires_grad
  Length,       // len(value) == length, for tuples, lists, dicts and module containers
  DictKeys,     // list(value.keys()) == expected (a tuple), in order
  GlobalState,  // call() == expected, e.g. torch.is_grad_enabled()
  SameObject,   // (value is sources[length]) == (expected is True): aliasing between two inputs
  SizeRelation, // (sym_a <cmp> sym_b) == expected, over the symbols the tensor guards bound
  TypeVersion,  // expected (a class) still has version tag `length`: neither it nor a base changed since the trace
  DictLacks,    // value is a dict without key `expected` (an attribute that falls through to the class)
  SetHas,       // value is a set or frozenset, and (expected in value) == (length != 0): an `in` test the trace made
};

struct TensorGuard {
  PyTypeObject* type = nullptr;  // kept alive by `graph::TensorMeta` owners (torch types live forever)
  graph::TensorMeta meta;
  // meta.dtype and meta.device as torch's C shim numbers them (runtime/torch_shim.h), worked out at the first
  // check: 0 not yet, 1 known, -1 not expressible (the guard then reads the tensor through its Python getters).
  mutable int8_t shim_state = 0;
  mutable int32_t shim_dtype = -1, shim_device_type = -1, shim_device_index = -1;
  // Dynamic shapes: per dimension the symbol its size binds (-1: the size must equal meta.sizes[i]); the first
  // guard to reach a symbol binds it, later ones check equality. Empty for static tensors. Strides are then
  // checked against meta.sym_strides.
  std::vector<int> dim_symbols;
};

// A symbol's range, from mark_dynamic or from what the trace assumed (sizes 0 and 1 are never symbolic).
struct SymbolGuard {
  std::string name;  // "s0"
  std::string where; // the size that binds it: "L['x'].size()[0]"
  int64_t min = 2;
  int64_t max = INT64_MAX;
};

// Comparison operators of SizeRelation guards (Python's COMPARE_OP order).
enum class SizeCmp : uint8_t { Lt, Le, Eq, Ne, Gt, Ge };
const char* size_cmp_text(SizeCmp c);
bool size_cmp_holds(SizeCmp c, int64_t a, int64_t b);

// A GlobalState guard's answer read without calling into Python (runtime/torch_shim.h, runtime/torch_state.h):
// the raw state when the guard was made. The same raw state now means the same answer; a different one is
// checked by the call.
enum class StateProbe : uint8_t { None, GradMode, DefaultDtype, LocalDispatchKeys };
using ProbeState = std::array<uint64_t, 2>;
// Reads the raw state `probe` looks at; false when this torch cannot be read so (then the guard has no probe).
bool read_state_probe(StateProbe probe, ProbeState* out);

struct Guard {
  GuardKind kind = GuardKind::IdMatch;
  int source = -1;      // -1 for GlobalState
  PyRef expected;       // IdMatch/ConstEquals/DictKeys value, TypeMatch type, GlobalState result
  PyRef call;           // GlobalState: the callable, called with no arguments
  StateProbe probe = StateProbe::None;  // GlobalState
  ProbeState probe_state{};             // GlobalState: the probe's raw state when traced
  int64_t length = 0;   // Length; TypeVersion: the version tag; SetHas: 1 if the key was in the set
  TensorGuard tensor;   // TensorMatch
  std::string what;     // GlobalState: what is checked, e.g. "torch.is_grad_enabled()"; SizeRelation: why
  graph::Sym sym_a, sym_b;  // SizeRelation operands
  SizeCmp cmp = SizeCmp::Eq;
};

// A GlobalState guard on `fn()` == its value now, with `probe` when this torch can read that state directly;
// false (no error set) when calling `fn` raises.
bool make_global_state_guard(PyObject* fn, const char* what, StateProbe probe, Guard* out);

class GuardMemo;  // guard_memo.h

// Owns a guard set's GuardMemo, made by the first check that passes; a copy of the set starts without one.
class GuardMemoSlot {
 public:
  GuardMemoSlot();
  GuardMemoSlot(const GuardMemoSlot&);
  GuardMemoSlot(GuardMemoSlot&&) noexcept;
  GuardMemoSlot& operator=(const GuardMemoSlot&);
  GuardMemoSlot& operator=(GuardMemoSlot&&) noexcept;
  ~GuardMemoSlot();
  GuardMemo& get() const;

 private:
  mutable std::unique_ptr<GuardMemo> memo_;
};

struct GuardSet {
  SourceTable sources;
  std::vector<Guard> guards;
  std::vector<int> input_sources;  // sources of the graph's Input nodes, in order
  std::vector<SymbolGuard> symbols;  // dynamic shapes: symbol i's range
  GuardMemoSlot memo;  // what the last check that passed read, to skip most of the next one

  std::string describe(const Guard& g) const;  // one line, e.g. "L['x']: tensor f32[8] cpu"
  std::string to_string() const;
};

// Per-thread scratch space for one guard evaluation, reused across calls to avoid allocation.
struct GuardScratch {
  std::vector<PyObject*> values;  // borrowed or owned (see `owned`)
  std::vector<PyRef> owned;       // keeps values produced by attribute loads alive until the call ends
  std::vector<PyObject*> inputs;  // graph inputs, borrowed from `values`
  std::vector<int64_t> sym_values;  // dynamic shapes: the symbols' values on this call
  std::vector<uint8_t> sym_bound;
  void reset(int nsources, int nsymbols);
};

// Whether the identity guards on the frame's own locals and closure (L['self'] is <that module>, a decorator's
// L['func'] is <that function>) hold for `frame`: entries for which they do are versions of the same function for
// the same objects, and only those count towards the recompile limit.
bool identity_guards_hold(const GuardSet& set, const cpython::FrameView& frame);

// Checks every guard against `frame`; on success fills scratch.inputs. Never leaves a Python error set.
// When `failure_reason` is non-null and a guard fails, writes a readable reason in Dynamo's style
// ("tensor 'L['x']' size mismatch at index 0. expected 8, actual 16"). Without one, a set checked before takes
// its GuardMemo's shortcut where that can answer.
bool check_guards(const GuardSet& set, const cpython::FrameView& frame, GuardScratch& scratch,
                  std::string* failure_reason);

// The two halves of a check, for GuardMemo: loads source `i` into scratch.values (null where its base is
// missing or the load fails), and checks one guard against the loaded values.
void load_source(const GuardSet& set, const cpython::FrameView& frame, GuardScratch& scratch, int i);
bool check_guard(const GuardSet& set, const Guard& g, GuardScratch& scratch, std::string* reason);

}  // namespace fastcomp::frontend
