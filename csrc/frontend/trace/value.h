// Symbolic values of the tracer. A Value stands for what a Python variable holds at this point of the
// trace: a graph tensor, a constant, a real object read from the frame (with the Source it came from),
// or a container of other Values. Containers are shared_ptrs so mutation through one reference is seen by
// all, as in Python.
#pragma once
#include <Python.h>

#include <memory>
#include <string>
#include <vector>

#include "cpython/pyref.h"
#include "graph/ir.h"

namespace fastcomp::frontend {

enum class VKind : uint8_t {
  Null,      // the NULL that CPython pushes below a callable
  Const,     // an immutable Python value known at trace time (int, float, str, None, dtype, slice, ...)
  Tensor,    // a tensor produced by a graph node
  Object,    // a real Python object (module, function, class, nn.Module, plain object)
  Tuple,     // `obj` is its class when a tuple subclass made by torch (torch.Size), else null
  List,
  Dict,      // keys are Const Values
  Slice,     // items = start, stop, step (used only when a bound is not constant)
  Iterator,  // over `items`, next position `pos`
  Function,  // made by MAKE_FUNCTION during the trace (lambdas, nested defs, 3.11 comprehensions)
  Method,    // a bound method: items[0] is self, `obj` the function/descriptor, `name` its name
  Cell,      // a closure cell: items[0] is the content (null Value when empty)
  Record,    // namedtuple / dataclass / torch.return_types built in the trace: obj = class, keys = field names
  GradCtx,   // torch.no_grad() / enable_grad() / set_grad_enabled(b): `flag` = grad mode inside
  CtxExit,   // the __exit__ of a GradCtx: restores grad mode `flag`
  AutocastExit,  // the __exit__ of a torch.autocast block: `obj` = the state outside it (autocast.cpp)
  SymInt,    // a Python int computed from dynamic sizes: `sym`, with its value while tracing in `obj`
  Set,       // a set (flag false) or frozenset (flag true) made in the trace: `items`, each hashable
  UserObject,  // an instance of a Python class made in the trace: obj = its class, `inst_dict` its __dict__, and
               // keys/items its contents when the class derives from dict
  Super,     // super(cls, self): obj = cls, items[0] = self (an instance, or a class in a classmethod)
  Partial,   // functools.partial made in the trace: items = {func, Tuple of args, Dict of keyword arguments}
  DictView,  // d.keys() / d.values() / d.items(), live: items[0] = the dict-like Value, name = which
  Exception, // an exception instance made in the trace: obj = its class, items = its args
};

struct Value;
using ValueRef = std::shared_ptr<Value>;
struct TraceFrame;

// What an Iterator Value iterates, consumed in program order by Tracer::iter_next.
enum class IterKind : uint8_t {
  Snapshot,   // `items` from `pos` on (tuples, constants, ranges: nothing can change them)
  Live,       // items[0], a list/tuple/dict/set/view Value, read at `pos` when asked (sees appends, as in Python)
  Generator,  // a generator function's frame, `frame`, suspended at its last yield
  Map,        // map(items[0], *items[1:]): the function applied when the next item is asked for
  Filter,     // filter(items[0], items[1])
  Zip,        // zip(*items), strict=True where `flag`
  Enumerate,  // enumerate(items[0]); `pos` is the next count
  Chain,      // itertools.chain(*items), `pos` the iterator in use
};

struct Value {
  VKind kind = VKind::Const;
  PyRef obj;       // Const value, Object, Function code, Method function, Record class
  int source = -1; // SourceTable id when read from the frame, -1 when made by the trace
  std::string name;  // Method name, Function qualname

  // Tensor
  graph::NodeId node = -1;
  PyRef meta;                       // a meta tensor with the same metadata
  PyRef device;                     // the real torch.device
  PyTypeObject* tensor_type = nullptr;  // exact type of the real tensor (Parameter, Tensor, ...)
  graph::SymShape shape;                // sizes and strides as expressions when dynamic (empty: static)

  graph::Sym sym;  // SymInt

  std::vector<ValueRef> items;  // container elements, Slice bounds, Method self, Cell content, Record fields
  std::vector<ValueRef> keys;   // Dict keys, Record field names (Const)
  PyRef globals;                // Function: globals dict; Method of Function: unused
  ValueRef defaults;            // Function: tuple of defaults (Tuple Value) or null
  ValueRef kwdefaults;          // Function: Dict Value or null
  ValueRef closure;             // Function: Tuple Value of Cells or null
  size_t pos = 0;               // Iterator position
  IterKind iter = IterKind::Snapshot;   // Iterator
  std::shared_ptr<TraceFrame> frame;    // Iterator of a generator: its suspended frame (null once finished)
  // GradCtx / CtxExit grad mode; Set: frozen; Iterator of zip(): strict; Const: an id() made up (see identity_of); Object: frozen (frozen.cpp)
  bool flag = false;
  // Instance attributes. UserObject: its whole __dict__ (a Dict Value, so `obj.__dict__` stays live). Object
  // read from the frame: null until the trace assigns an attribute; then a Dict Value of the assigned (and,
  // once `obj.__dict__` was read, all) attributes, consulted before the real object; `inst_dict_complete`
  // says which. A Null Value in it marks a deleted attribute.
  ValueRef inst_dict;
  bool inst_dict_complete = false;
  bool mutated = false;  // an object from outside the trace that the trace changed (see Tracer::note_mutation)
  // Set: a real set of the same constants built by the same operations, whose iteration order is CPython's (it
  // depends on the set's history, not only its items); null when an item is not a constant.
  PyRef set_order;
  bool made_in_trace = false;  // Object: built for real at trace time (construct_stateless_module); must not leave it

  bool is(VKind k) const { return kind == k; }
};

ValueRef make_null();
ValueRef make_const(PyRef v);
ValueRef make_const_borrowed(PyObject* v);
ValueRef make_object(PyRef obj, int source);
// Whether `v` is or holds (in a tuple, list or slice) a size computed from dynamic sizes or a dynamic tensor.
bool has_sym(const ValueRef& v);
ValueRef make_seq(VKind kind, std::vector<ValueRef> items);  // Tuple or List
ValueRef make_cell(ValueRef content);
ValueRef make_grad_ctx(bool enabled);  // torch.no_grad() (false) or enable_grad() (true), not yet entered
ValueRef make_symint(graph::Sym e, int64_t hint);  // a Const when `e` is a constant
ValueRef make_dict();                              // an empty Dict
ValueRef make_method(ValueRef self, PyRef fn, std::string name);  // a bound method (fn may be null: by name)

// Whether two Values are the same dict key or set member: equal constants, the same object, the same tensor.
// Throws Unsupported when the trace cannot tell (a symbolic size, a container).
bool same_key(const Value& a, const Value& b);
// Index of `key` among a dict-like Value's keys (Dict, dict-derived UserObject), -1 when absent.
int dict_find(const Value& dict, const Value& key);
int dict_find(const Value& dict, PyObject* key);
// d[key] = v with Python's dict semantics: an equal key keeps its place (and its first key object); a new one is
// appended.
void dict_put(Value& dict, ValueRef key, ValueRef v);
// The value of attribute `name` in an instance-dict Value, null when absent (a Null Value when deleted).
ValueRef inst_dict_get(const Value& dict, PyObject* name);
void inst_dict_set(Value& dict, PyObject* name, ValueRef v);

// Python-level description for messages: "Tensor(f32[8])", "int 3", "Linear".
std::string describe(const Value& v);

}  // namespace fastcomp::frontend
