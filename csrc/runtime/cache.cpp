#include "runtime/cache.h"

#include <unordered_set>
#include <vector>

#include "cpython/code_extra.h"

namespace fastcomp::runtime {
namespace {

std::unordered_set<CodeCache*>& live_caches() {
  static auto* caches = new std::unordered_set<CodeCache*>();  // never destroyed: code objects may outlive exit()
  return *caches;
}

void destroy_cache(void* p) { delete static_cast<CodeCache*>(p); }

int next_frame_id() {
  static int n = 0;
  return n++;
}

}  // namespace

CodeCache::CodeCache() { live_caches().insert(this); }

void assign_frame_id(CodeCache& cache) {
  if (cache.frame_id < 0) cache.frame_id = next_frame_id();
}
CodeCache::~CodeCache() { live_caches().erase(this); }

CodeCache& code_cache(PyCodeObject* code) {
  static bool initialized = (cpython::code_extra_init(&destroy_cache), true);
  (void)initialized;
  void* p = cpython::code_extra_get(code);
  if (p) return *static_cast<CodeCache*>(p);
  auto* cache = new CodeCache();
  cpython::code_extra_set(code, cache);
  return *cache;
}

void reset_all_caches() {
  // Dropping an entry can free code objects (resume functions), whose caches leave live_caches(): the entries
  // are dropped after the walk.
  std::vector<std::shared_ptr<CacheEntry>> dropped;
  for (CodeCache* c : live_caches()) {
    for (auto& e : c->entries) dropped.push_back(std::move(e));
    c->entries.clear();
    c->compiles = 0;
    c->warned_limit = false;
    c->warned_failure = false;
  }
  dropped.clear();
}

}  // namespace fastcomp::runtime
