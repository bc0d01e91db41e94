#include "frontend/resume/continuation.h"

#include <fmt/format.h>

#include <stdexcept>
#include <utility>
#include <unordered_map>
#include <unordered_set>

#include "frontend/bytecode/decode.h"
#include "frontend/code_info.h"
#include "frontend/trace/torch_refs.h"
#include "frontend/trace/tracer.h"
#include "support/log.h"
#include "support/pystr.h"

namespace fastcomp::frontend {
namespace {

// The key of a spec among the continuations of its original code (code_info.h).
std::string spec_key(const ContinuationSpec& s) {
  std::string key = fmt::format("{}:", s.entry);
  for (size_t i = 0; i < s.stack.size(); ++i)
    key += s.stack[i] == Slot::Null ? 'N' : s.stack[i] == Slot::Value ? 'V' : (s.grad_inside[i] ? 'E' : 'D');
  for (const auto& l : s.locals) key += "," + l;
  if (s.region) key += fmt::format("|{}-{}", s.region->first, s.region->last);
  return key;
}

Instr make(Op op, int arg = 0, int target = -1) {
  Instr in;
  in.op = op;
  in.arg = arg;
  in.target = target;
  return in;
}


PyObject* attr(PyObject* o, const char* name) {  // new reference; throws on failure
  PyObject* v = PyObject_GetAttrString(o, name);
  if (!v) throw std::runtime_error("fastcomp.resume: " + take_error_message());
  return v;
}

class Builder {
 public:
  explicit Builder(const ContinuationSpec& spec)
      : s_(spec), code_(spec.original), src_(decoded(spec.original)) {}

  std::vector<PyRef> exit_codes() const { return exit_codes_; }

  PyRef build() {
    lay_out_locals();
    consts_ = PyRef::steal(PySequence_List(code_->co_consts));
    if (!consts_) throw std::runtime_error("fastcomp.resume: " + take_error_message());
    if (s_.region) make_exit_functions();
    emit_prefix();
    emit_body();
    if (s_.region) emit_stubs();
    return assemble();
  }

 private:
  void lay_out_locals() {
    const int n = code_->co_nlocalsplus;
    nfree_ = code_->co_nfreevars;
    // The live locals come first, in the original's slot order, so that the original's first argument keeps slot 0
    // (zero-argument super() reads slot 0), then the stack values.
    for (const auto& name : s_.locals) varnames_.push_back(name);
    for (size_t i = 0; i < s_.stack.size(); ++i)
      if (s_.stack[i] == Slot::Value) {
        stack_arg_[i] = static_cast<int>(varnames_.size());
        varnames_.push_back(fmt::format("___stack{}", i));
      }
    if (s_.region)
      for (size_t x = 0; x < s_.region->exits.size(); ++x) {
        exit_fn_.push_back(static_cast<int>(varnames_.size()));
        varnames_.push_back(fmt::format("___resume{}", x));
      }
    nargs_ = static_cast<int>(varnames_.size());
    std::vector<std::string> names(n);
    for (int i = 0; i < n; ++i) names[i] = utf8(PyTuple_GET_ITEM(code_->co_localsplusnames, i));
    for (int i = 0; i < n - nfree_; ++i) {
      bool passed = false;
      for (const auto& l : s_.locals) passed = passed || l == names[i];
      if (!passed) varnames_.push_back(names[i]);
    }
    if (s_.region) {
      size_t depth = 0;
      for (const auto& e : s_.region->exits) depth = std::max(depth, e.stack.size());
      for (size_t i = 0; i < depth; ++i) {
        tmp_.push_back(static_cast<int>(varnames_.size()));
        varnames_.push_back(fmt::format("___tmp{}", i));
      }
    }
    slot_of_.assign(n, -1);
    for (int i = 0; i < n - nfree_; ++i)
      for (size_t v = 0; v < varnames_.size(); ++v)
        if (varnames_[v] == names[i]) slot_of_[i] = static_cast<int>(v);
    for (int i = n - nfree_; i < n; ++i) slot_of_[i] = static_cast<int>(varnames_.size()) + (i - (n - nfree_));
    for (int i = 0; i < n - nfree_; ++i)
      if (slot_of_[i] < 0) throw std::runtime_error("fastcomp.resume: local " + names[i] + " has no slot");
    for (const auto& l : s_.locals) {
      int slot = -1;
      for (int i = 0; i < n - nfree_; ++i)
        if (names[i] == l) slot = slot_of_[i];
      if (slot < 0) throw std::runtime_error("fastcomp.resume: no local named " + l);
      local_args_.push_back(slot);
    }
  }

  int add_const(PyObject* obj) {
    Py_ssize_t n = PyList_GET_SIZE(consts_.get());
    for (Py_ssize_t i = 0; i < n; ++i)
      if (PyList_GET_ITEM(consts_.get(), i) == obj) return static_cast<int>(i);
    PyList_Append(consts_.get(), obj);
    return static_cast<int>(n);
  }

  // Each exit of the region continues in its resume function (made first: their code objects are constants).
  void make_exit_functions() {
    for (const auto& e : s_.region->exits) {
      ContinuationSpec r;
      r.original = s_.original;
      r.entry = e.target;
      r.stack = e.stack;
      r.grad_inside.assign(e.stack.size(), false);
      for (size_t i = 0; i < e.stack.size() && i < s_.grad_inside.size(); ++i) r.grad_inside[i] = s_.grad_inside[i];
      r.locals = s_.locals;
      exit_codes_.push_back(make_continuation(r).code);
    }
  }

  void emit(Instr in, const Instr* position) {
    if (position) {
      in.line = position->line;
      in.end_line = position->end_line;
      in.col = position->col;
      in.end_col = position->end_col;
    }
    out_.push_back(in);
  }

  void emit_prefix() {
    const Instr* pos = &src_->instrs.at(s_.entry);
    if (nfree_) emit(make(Op::COPY_FREE_VARS, nfree_), pos);
    emit(make(Op::RESUME, 0), pos);
    const auto& T = torch_refs();
    for (size_t i = 0; i < s_.stack.size(); ++i) {
      switch (s_.stack[i]) {
        case Slot::Null: emit(make(Op::PUSH_NULL), pos); break;
        case Slot::Value: emit(make(Op::LOAD_FAST, stack_arg_.at(i)), pos); break;
        case Slot::GradCtx:
          // with torch.enable_grad()/no_grad(): leaves its __exit__ in the slot, as BEFORE_WITH did originally.
          emit(make(Op::PUSH_NULL), pos);
          emit(make(Op::LOAD_CONST, add_const(s_.grad_inside[i] ? T.enable_grad.get() : T.no_grad.get())), pos);
          emit(make(Op::CALL, 0), pos);
          emit(make(Op::BEFORE_WITH), pos);
          emit(make(Op::POP_TOP), pos);
          break;
      }
    }
    prefix_ = static_cast<int>(out_.size()) + 1;
    emit(make(Op::JUMP, 0, body_index(s_.entry)), pos);
  }

  // Where original instruction `i` lands: after the prefix, and after the jump inserted behind the region.
  int body_index(int i) const {
    return prefix_ + i + (s_.region && s_.region->fallthrough_exit >= 0 && i > s_.region->last ? 1 : 0);
  }

  void emit_body() {
    const auto& src = src_->instrs;
    const int n = static_cast<int>(src.size());
    const int body_end = body_index(n);
    stub_start_ = body_end;
    for (int i = 0; i < n; ++i) {
      Instr in = src[i];
      if (uses_local_slot(in.op)) in.arg = slot_of_.at(in.arg);
      if (in.op == Op::COPY_FREE_VARS) in.arg = nfree_;
      if (in.target >= 0) in.target = body_index(in.target);
      if (s_.region)
        for (auto [at, exit] : s_.region->jumps)
          if (at == i) in.target = stub_index(exit);
      out_.push_back(in);
      if (s_.region && i == s_.region->last && s_.region->fallthrough_exit >= 0)
        emit(make(Op::JUMP, 0, stub_index(s_.region->fallthrough_exit)), &src[i]);
    }
    for (const ExceptionEntry& e : src_->exception_table)
      table_.push_back({body_index(e.start), body_index(e.end), body_index(e.target), e.depth, e.push_lasti});
  }

  // Stubs come after the body, each of a size known in advance.
  int stub_size(const BreakRegion::Exit& e) const {
    int size = static_cast<int>(e.stack.size());  // spill
    for (Slot s : e.stack) size += s == Slot::GradCtx ? 7 : 0;
    size += 2;  // NULL, the resume function
    for (Slot s : e.stack) size += s == Slot::Value ? 1 : 0;
    return size + static_cast<int>(s_.locals.size()) + 2;  // CALL, RETURN_VALUE
  }
  int stub_index(int exit) const {
    int at = stub_start_;
    for (int i = 0; i < exit; ++i) at += stub_size(s_.region->exits[i]);
    return at;
  }

  void emit_stubs() {
    const Instr* pos = &src_->instrs.at(s_.region->last);
    PyObject* none = Py_None;
    for (size_t x = 0; x < s_.region->exits.size(); ++x) {
      const auto& e = s_.region->exits[x];
      if (static_cast<int>(out_.size()) != stub_index(static_cast<int>(x)))
        throw std::runtime_error("fastcomp.resume: stub layout mismatch");
      const int depth = static_cast<int>(e.stack.size());
      for (int i = depth - 1; i >= 0; --i) emit(make(Op::STORE_FAST, tmp_.at(i)), pos);
      // Leave the with blocks (innermost first); the resume function enters them again.
      for (int i = depth - 1; i >= 0; --i) {
        if (e.stack[i] != Slot::GradCtx) continue;
        emit(make(Op::PUSH_NULL), pos);
        emit(make(Op::LOAD_FAST, tmp_.at(i)), pos);
        for (int k = 0; k < 3; ++k) emit(make(Op::LOAD_CONST, add_const(none)), pos);
        emit(make(Op::CALL, 3), pos);
        emit(make(Op::POP_TOP), pos);
      }
      emit(make(Op::PUSH_NULL), pos);
      emit(make(Op::LOAD_FAST, exit_fn_.at(x)), pos);
      int nargs = 0;
      for (int slot : local_args_) {
        emit(make(Op::LOAD_FAST, slot), pos);
        ++nargs;
      }
      for (int i = 0; i < depth; ++i)
        if (e.stack[i] == Slot::Value) {
          emit(make(Op::LOAD_FAST, tmp_.at(i)), pos);
          ++nargs;
        }
      emit(make(Op::CALL, nargs), pos);
      emit(make(Op::RETURN_VALUE), pos);
    }
  }

  PyRef assemble() {
    InstrStream stream;
    stream.code = PyRef::borrow(reinterpret_cast<PyObject*>(code_));
    stream.instrs = out_;
    stream.exception_table = table_;
    stream.first_line = code_->co_firstlineno;
    EncodedCode enc = encode(stream);

    PyRef varnames = PyRef::steal(PyTuple_New(varnames_.size()));
    for (size_t i = 0; i < varnames_.size(); ++i)
      PyTuple_SET_ITEM(varnames.get(), i, PyUnicode_FromString(varnames_[i].c_str()));
    int stacksize = std::max({code_->co_stacksize, static_cast<int>(s_.stack.size()) + 4,
                              nargs_ + nfree_ + 8});
    const Instr& at = src_->instrs.at(s_.entry);
    std::string qualname = utf8(code_->co_qualname);
    if (!s_.region) qualname += fmt::format(".__resume_at_{}", at.offset);

    PyRef kw = PyRef::steal(PyDict_New());
    auto set = [&](const char* k, PyObject* v) {
      if (!v || PyDict_SetItemString(kw.get(), k, v) < 0) throw std::runtime_error("fastcomp.resume: " + take_error_message());
      Py_DECREF(v);
    };
    set("co_argcount", PyLong_FromLong(nargs_));
    set("co_posonlyargcount", PyLong_FromLong(0));
    set("co_kwonlyargcount", PyLong_FromLong(0));
    set("co_nlocals", PyLong_FromSsize_t(static_cast<Py_ssize_t>(varnames_.size())));
    set("co_stacksize", PyLong_FromLong(stacksize));
    set("co_flags", PyLong_FromLong(code_->co_flags & ~(CO_VARARGS | CO_VARKEYWORDS)));
    set("co_code", PyBytes_FromStringAndSize(enc.co_code.data(), enc.co_code.size()));
    set("co_consts", PyList_AsTuple(consts_.get()));
    set("co_varnames", varnames.new_ref());
    set("co_cellvars", PyTuple_New(0));
    set("co_qualname", PyUnicode_FromString(qualname.c_str()));
    set("co_linetable", PyBytes_FromStringAndSize(enc.line_table.data(), enc.line_table.size()));
    set("co_exceptiontable", PyBytes_FromStringAndSize(enc.exception_table.data(), enc.exception_table.size()));
    PyRef replace = PyRef::steal(attr(reinterpret_cast<PyObject*>(code_), "replace"));
    PyRef args = PyRef::steal(PyTuple_New(0));
    PyRef code = PyRef::steal(PyObject_Call(replace.get(), args.get(), kw.get()));
    if (!code) throw std::runtime_error("fastcomp.resume: code.replace failed: " + take_error_message());
    return code;
  }

  const ContinuationSpec& s_;
  PyCodeObject* code_;
  std::shared_ptr<const InstrStream> src_;
  PyRef consts_;
  int nfree_ = 0, nargs_ = 0, prefix_ = 0, stub_start_ = 0;
  std::unordered_map<size_t, int> stack_arg_;
  std::vector<std::string> varnames_;
  std::vector<int> slot_of_, tmp_, local_args_, exit_fn_;
  std::vector<PyRef> exit_codes_;
  std::vector<Instr> out_;
  std::vector<ExceptionEntry> table_;
};

// The bytecode log, in TORCH_LOGS=bytecode's shape: the user's code once, then each code object made from it.
void log_bytecode(const ContinuationSpec& spec, PyCodeObject* made, const InstrStream& made_stream) {
  auto header = [](const char* kind, PyCodeObject* code, const std::string& name) {
    return fmt::format("{} BYTECODE {} {} line {}\n", kind, name, utf8(code->co_filename), code->co_firstlineno);
  };
  PyCodeObject* original = spec.original;
  if (CodeInfo& info = code_info(original); !std::exchange(info.bytecode_logged, true))
    log::emit(log::Topic::bytecode, log::Level::info,
              header("ORIGINAL", original, utf8(original->co_qualname)) + decoded(original)->to_string(original));
  const int line = made_stream.instrs.empty() ? -1 : made_stream.instrs.front().line;  // the break's line
  const std::string name = spec.region ? fmt::format("{} (break code at line {})", utf8(made->co_qualname), line)
                                       : utf8(made->co_qualname);
  log::emit(log::Topic::bytecode, log::Level::info, header("MODIFIED", made, name) + made_stream.to_string(made));
}

}  // namespace

Continuation make_continuation(const ContinuationSpec& spec) {
  std::string key = spec_key(spec);
  CodeInfo& original = code_info(spec.original);
  auto it = original.continuations.find(key);
  if (it != original.continuations.end()) return it->second;
  Builder builder(spec);
  PyRef code = builder.build();
  Continuation result{code, builder.exit_codes()};
  GeneratedCode info;
  info.original = spec.original;  // borrowed: see CodeInfo::generated
  info.is_break_code = spec.region != nullptr;
  info.prefix = 0;
  // The prefix is everything before the jump into the original code: find it back from the code's first jump.
  auto stream = decoded(reinterpret_cast<PyCodeObject*>(code.get()));
  for (size_t i = 0; i < stream->instrs.size(); ++i)
    if (stream->instrs[i].op == Op::JUMP) {
      info.prefix = static_cast<int>(i) + 1;
      break;
    }
  code_info(reinterpret_cast<PyCodeObject*>(code.get())).generated = info;
  original.continuations.emplace(key, result);
  if (log::enabled(log::Topic::bytecode)) log_bytecode(spec, reinterpret_cast<PyCodeObject*>(code.get()), *stream);
  return result;
}

const GeneratedCode* generated_code(PyCodeObject* code) {
  CodeInfo* info = find_code_info(code);
  return info && info->generated ? &*info->generated : nullptr;
}

}  // namespace fastcomp::frontend
