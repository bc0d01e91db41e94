#include "frontend/trace/dynamic_memory.h"

#include <fmt/format.h>

#include <charconv>
#include <filesystem>
#include <map>
#include <set>

#include "cpython/pyref.h"
#include "runtime/kernel_cache.h"
#include "support/config.h"
#include "support/file_io.h"
#include "support/log.h"
#include "support/pystr.h"

namespace fastcomp::frontend {
namespace fs = std::filesystem;
namespace {

fs::path decisions_file(const std::string& code_key) {
  if (!config().automatic_dynamic_on_disk) return {};
  fs::path dir = runtime::kernel_cache().directory();
  if (dir.empty()) return {};
  return dir / "dynamic" / fmt::format("{:016x}.txt", std::hash<std::string>{}(code_key));
}

// File format: the code key on the first line (a hash collision reads as "nothing known"), then one
// "<dim>\t<source>" line per dynamic dimension.
std::map<std::string, std::set<int>> read_decisions(const std::string& code_key) {
  std::map<std::string, std::set<int>> out;
  fs::path file = decisions_file(code_key);
  if (file.empty()) return out;
  const std::string text = read_file(file);
  std::string_view rest(text);
  auto next_line = [&rest](std::string_view* line) {
    if (rest.empty()) return false;
    size_t end = rest.find('\n');
    *line = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    return true;
  };
  std::string_view line;
  if (!next_line(&line) || line != code_key) return out;
  while (next_line(&line)) {
    size_t tab = line.find('\t');
    int dim = -1;
    if (tab == std::string_view::npos || std::from_chars(line.data(), line.data() + tab, dim).ec != std::errc() || dim < 0)
      continue;  // not a line this version wrote
    out[std::string(line.substr(tab + 1))].insert(dim);
  }
  return out;
}

// Rewrites the code's file with every decision known (atomically, so a reader in another process never sees
// half a file). Failures only cost the next process a recompile.
void save(const std::string& code_key, const DynamicMemory& m) {
  fs::path file = decisions_file(code_key);
  if (file.empty()) return;
  std::map<std::string, std::set<int>> all = read_decisions(code_key);  // another process may have added some
  for (const auto& [source, dims] : m.on_disk) all[source].insert(dims.begin(), dims.end());
  for (const auto& [source, mem] : m.inputs) all[source].insert(mem.dynamic.begin(), mem.dynamic.end());
  std::string text = code_key + "\n";
  for (const auto& [source, dims] : all)
    for (int d : dims) text += fmt::format("{}\t{}\n", d, source);
  write_file_atomically(file, text);
}

}  // namespace

std::string code_identity(PyObject* code_obj) {
  auto* code = reinterpret_cast<PyCodeObject*>(code_obj);
  PyRef bytes = PyRef::steal(PyObject_GetAttrString(code_obj, "co_code"));
  std::string body;
  if (bytes && PyBytes_Check(bytes.get())) body.assign(PyBytes_AS_STRING(bytes.get()), PyBytes_GET_SIZE(bytes.get()));
  else PyErr_Clear();
  return fmt::format("{}@{}:{}#{:016x}", utf8(code->co_qualname), utf8(code->co_filename), code->co_firstlineno,
                     std::hash<std::string>{}(body));
}

std::vector<bool> automatic_dynamic_dims(DynamicMemory& m, const std::string& code_key, const std::string& source,
                                         const std::vector<int64_t>& sizes, std::vector<std::string>* became) {
  if (!m.disk_read) {
    m.on_disk = read_decisions(code_key);
    m.disk_read = true;
  }
  std::vector<bool> out(sizes.size(), false);
  auto disk = m.on_disk.find(source);
  if (disk != m.on_disk.end())
    for (int d : disk->second)
      if (d < static_cast<int>(sizes.size())) out[d] = true;
  auto [it, first] = m.inputs.try_emplace(source);
  DynamicMemory::Sizes& mem = it->second;
  if (first || mem.sizes.size() != sizes.size()) {  // first sight, or a new rank: nothing to compare with
    mem.sizes = sizes;
    for (int d : mem.dynamic)
      if (d < static_cast<int>(sizes.size())) out[d] = true;
    return out;
  }
  bool changed = false;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (mem.sizes[d] != sizes[d] && !mem.dynamic.count(static_cast<int>(d)) && !out[d]) {
      mem.dynamic.insert(static_cast<int>(d));
      changed = true;
      if (became)
        became->push_back(fmt::format("dimension {} of {} became dynamic after size {} → {}", d, source,
                                      mem.sizes[d], sizes[d]));
    }
    mem.sizes[d] = sizes[d];
  }
  for (int d : mem.dynamic)  // dimensions made dynamic at another rank (x.squeeze() of [n, 1] and of [1, 1]) too
    if (d < static_cast<int>(sizes.size())) out[d] = true;
  if (changed) save(code_key, m);
  return out;
}

}  // namespace fastcomp::frontend
