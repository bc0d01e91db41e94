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
  SymInt,    // a Python int computed from dynamic sizes: `sym`, with its value while tracing in `obj`
};

struct Value;
using ValueRef = std::shared_ptr<Value>;

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
  bool flag = false;            // GradCtx / CtxExit grad mode

  bool is(VKind k) const { return kind == k; }
};

ValueRef make_null();
ValueRef make_const(PyRef v);
ValueRef make_const_borrowed(PyObject* v);
ValueRef make_object(PyRef obj, int source);
ValueRef make_seq(VKind kind, std::vector<ValueRef> items);  // Tuple or List
ValueRef make_cell(ValueRef content);
ValueRef make_symint(graph::Sym e, int64_t hint);  // a Const when `e` is a constant

// Python-level description for messages: "Tensor(f32[8])", "int 3", "Linear".
std::string describe(const Value& v);

}  // namespace fastcomp::frontend
