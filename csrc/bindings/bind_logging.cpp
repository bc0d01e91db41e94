// fastcomp._C.log: topic thresholds for python/fastcomp/_logging.py, and emit() so that tests can drive the
// C++ -> Python logging bridge. Topics cross as their names and levels as Python's logging ints.
#include <pybind11/stl.h>

#include <string>
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
}

}  // namespace fastcomp::bindings
