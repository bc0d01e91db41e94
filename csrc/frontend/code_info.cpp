#include "frontend/code_info.h"

#include <stdexcept>
#include <unordered_set>
#include <vector>

#include "cpython/code_extra.h"

namespace fastcomp::frontend {
namespace {

// Every CodeInfo alive, for reset_continuations(). Never destroyed: code objects may die after exit() starts.
std::unordered_set<CodeInfo*>& live_infos() {
  static auto* infos = new std::unordered_set<CodeInfo*>();
  return *infos;
}

void destroy_info(void* p) { delete static_cast<CodeInfo*>(p); }

// Requested on first use (with the GIL, which the request does not release); constant-initialised.
cpython::CodeExtraSlot slot;

const cpython::CodeExtraSlot& info_slot() {
  if (!slot.valid()) {
    slot = cpython::CodeExtraSlot::request(&destroy_info);
    if (!slot.valid()) {
      PyErr_Clear();
      throw std::runtime_error("fastcomp: no co_extra index left in this interpreter");
    }
  }
  return slot;
}

// Marks the codes made from a dying original as orphans, so nothing reads the original through them.
void orphan(const Continuation& c) {
  auto forget = [](PyObject* code) {
    CodeInfo* info = find_code_info(reinterpret_cast<PyCodeObject*>(code));
    if (info && info->generated) info->generated->original = nullptr;
  };
  forget(c.code.get());
  for (const PyRef& exit : c.exits) forget(exit.get());
}

}  // namespace

CodeInfo::CodeInfo() { live_infos().insert(this); }

CodeInfo::~CodeInfo() {
  live_infos().erase(this);
  for (const auto& [key, c] : continuations) orphan(c);
  // `continuations` is released after this body; that can free the generated codes, whose infos go too.
}

CodeInfo& code_info(PyCodeObject* code) {
  const cpython::CodeExtraSlot& s = info_slot();
  if (void* p = s.get(code)) return *static_cast<CodeInfo*>(p);
  auto* info = new CodeInfo();
  if (!s.set(code, info)) {  // set() destroyed `info`
    PyErr_Clear();
    throw std::runtime_error("fastcomp: could not store per-code data");
  }
  return *info;
}

CodeInfo* find_code_info(PyCodeObject* code) {
  if (!slot.valid()) return nullptr;
  return static_cast<CodeInfo*>(slot.get(code));
}

void reset_code_infos() {
  // Releasing a continuation can free codes and their infos (leaving live_infos()): released after the walk.
  std::vector<Continuation> dropped;
  for (CodeInfo* info : live_infos()) {
    info->dynamic.forget();
    for (auto& [key, c] : info->continuations) {
      orphan(c);
      dropped.push_back(std::move(c));
    }
    info->continuations.clear();
  }
  dropped.clear();
}

}  // namespace fastcomp::frontend
