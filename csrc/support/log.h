// fastcomp's logging: spdlog loggers per topic whose sink forwards to Python `logging` under the
// "fastcomp.<topic>" logger, so users' handlers and levels apply. Topics mirror TORCH_LOGS artifact names.
#pragma once
#include <string>
#include <string_view>

namespace fastcomp::log {

// Keep in sync with python/fastcomp/_logging.py (TOPICS).
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
enum class Level : int { debug = 10, info = 20, warning = 30, error = 40, off = 100 };

const char* topic_name(Topic t);
// Cheap check for the hot path and to avoid building messages nobody reads.
bool enabled(Topic t, Level level = Level::info);
void set_level(Topic t, Level level);
// Sends one message to the topic's logger (the GIL must be held).
void emit(Topic t, Level level, std::string_view message);

}  // namespace fastcomp::log

// FC_LOG(topic, level, fmt-style format, args...) builds the message only when the topic is enabled.
#define FC_LOG(topic, level, ...)                                                              \
  do {                                                                                         \
    if (::fastcomp::log::enabled(::fastcomp::log::Topic::topic, ::fastcomp::log::Level::level)) \
      ::fastcomp::log::emit(::fastcomp::log::Topic::topic, ::fastcomp::log::Level::level,      \
                            ::fmt::format(__VA_ARGS__));                                       \
  } while (0)
