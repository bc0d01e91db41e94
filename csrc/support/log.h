// fastcomp's logging: spdlog loggers per topic whose sink forwards to Python `logging` under the
// "fastcomp.<topic>" logger, so users' handlers and levels apply. Topics mirror TORCH_LOGS artifact names.
//
// Two filters apply, in order: the topic's threshold here (set from FASTCOMP_LOGS or fastcomp.set_logs;
// the cheap check that decides whether a message is built at all), then the Python logger's level and
// handlers. A topic starts at `kDefaultLevel`, so warnings print and everything below stays unbuilt.
#pragma once
#include <fmt/format.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <optional>
#include <source_location>
#include <string_view>

namespace fastcomp::log {

// Python reads the topic names from here (fastcomp._C.log.topic_names), so this enum is their one source.
enum class Topic : int {
  recompiles,    // why a cache entry was not reused and a new one compiled
  graph_breaks,  // each graph break with user file:line
  guards,        // the guard set of every new cache entry
  graph,         // the captured graph of every compile
  output_code,   // generated code (CUDA C) and execution plans
  bytecode,      // decoded bytecode of compiled frames
  dynamic,       // dynamic-shape decisions
  cudagraphs,    // CUDA graph capture and replay decisions
  perf_hints,    // things that make code slower than it could be
  compile,       // per-frame compile progress and timings (the "dynamo" component)
  kCount
};
// The values are Python's logging levels, so a level crosses the binding as a plain int. Any int is a valid
// threshold; messages use the named levels.
enum class Level : int { debug = 10, info = 20, warning = 30, error = 40, off = 100 };

inline constexpr std::size_t kTopicCount = static_cast<std::size_t>(Topic::kCount);
inline constexpr Level kDefaultLevel = Level::warning;

const char* topic_name(Topic t);
std::optional<Topic> topic_from_name(std::string_view name);

namespace detail {
// A struct so that every element of the array below starts at the default through the member initializer.
// Atomic (relaxed) because a topic may be checked off the GIL, e.g. by a background compile thread; on x86
// and ARM a relaxed load is a plain load.
struct Threshold {
  std::atomic<int> value{static_cast<int>(kDefaultLevel)};
};
inline constinit std::array<Threshold, kTopicCount> thresholds{};
}  // namespace detail

// Cheap check for the hot path and to avoid building messages nobody reads: one load and one compare.
inline bool enabled(Topic t, Level level = Level::info) {
  return static_cast<int>(level) >=
         detail::thresholds[static_cast<std::size_t>(t)].value.load(std::memory_order_relaxed);
}
inline Level get_level(Topic t) {
  return static_cast<Level>(detail::thresholds[static_cast<std::size_t>(t)].value.load(std::memory_order_relaxed));
}
void set_level(Topic t, Level level);
// Sends one message to the topic's logger when `enabled(t, level)`; `where` defaults to the caller's source
// line, which becomes the Python record's pathname, lineno and funcName. Takes the GIL if the calling thread
// does not hold it. A Python exception raised by a handler is reported through sys.unraisablehook and
// cleared; an exception already pending in the caller is kept.
void emit(Topic t, Level level, std::string_view message,
          std::source_location where = std::source_location::current());

}  // namespace fastcomp::log

// FC_LOG(topic, level, fmt-style format, args...) builds the message only when the topic is enabled.
#define FC_LOG(topic, level, ...)                                                              \
  do {                                                                                         \
    if (::fastcomp::log::enabled(::fastcomp::log::Topic::topic, ::fastcomp::log::Level::level)) \
      ::fastcomp::log::emit(::fastcomp::log::Topic::topic, ::fastcomp::log::Level::level,      \
                            ::fmt::format(__VA_ARGS__));                                       \
  } while (0)
