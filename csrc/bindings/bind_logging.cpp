// fastcomp._C.log: topic thresholds for python/fastcomp/_logging.py, and emit() so that tests can drive the
// C++ -> Python logging bridge. Topics cross as their names and levels as Python's logging ints.
#include <pybind11/stl.h>

#include <string>
#include <thread>
#include <vector>

#include "bindings/bind.h"
#include "support/log.h"

namespace fastcomp::bindings {
namespace {

std::vector<std::string> topic_names() {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < log::kTopicCount; ++i) names.emplace_back(log::topic_name(static_cast<log::Topic>(i)));
  return names;
}

log::Topic topic_arg(std::string_view name) {
  if (auto topic = log::topic_from_name(name)) return *topic;
  std::string valid;
  for (const auto& n : topic_names()) valid += (valid.empty() ? "" : ", ") + n;
  throw py::value_error("unknown fastcomp log topic '" + std::string(name) + "'; valid topics: " + valid);
}

}  // namespace

void bind_logging(py::module_& m) {
  using namespace pybind11::literals;
  auto log = m.def_submodule("log", "per-topic log thresholds and the C++ -> Python logging bridge");
  log.attr("DEFAULT_LEVEL") = static_cast<int>(log::kDefaultLevel);
  log.def("topic_names", &topic_names, "The topics in the C++ enum's order.");
  log.def(
      "set_level",
      [](std::string_view topic, int level) { log::set_level(topic_arg(topic), static_cast<log::Level>(level)); },
      "topic"_a, "level"_a, "Messages of `topic` below `level` (a logging level) are not built.");
  log.def(
      "get_level", [](std::string_view topic) { return static_cast<int>(log::get_level(topic_arg(topic))); },
      "topic"_a);
  log.def(
      "enabled",
      [](std::string_view topic, int level) { return log::enabled(topic_arg(topic), static_cast<log::Level>(level)); },
      "topic"_a, "level"_a = static_cast<int>(log::Level::info), "Whether `topic` passes messages at `level`.");
  log.def(
      "emit",
      [](std::string_view topic, int level, std::string_view message) {
        log::emit(topic_arg(topic), static_cast<log::Level>(level), message);
      },
      "topic"_a, "level"_a, "message"_a,
      "Logs `message` as C++ code does: dropped below the topic's threshold, else handed to "
      "logging.getLogger('fastcomp.<topic>').");
  log.def(
      "emit_from_threads",
      [](std::string_view topic, int level, const std::vector<std::string>& messages) {
        // As compile_plan's helper threads do, with the GIL held by this thread while it joins them.
        const log::Topic t = topic_arg(topic);
        log::DeferredRecords records;
        std::vector<std::thread> threads;
        for (const std::string& message : messages)
          threads.emplace_back([&, message] {
            log::DeferredRecords::Scope scope(records);
            log::emit(t, static_cast<log::Level>(level), message);
          });
        for (std::thread& thread : threads) thread.join();
        records.replay();
      },
      "topic"_a, "level"_a, "messages"_a,
      "Each message logged by a thread of its own under a DeferredRecords scope while this thread holds the GIL, "
      "then replayed here.");
}

}  // namespace fastcomp::bindings
