// The bridge from fastcomp's C++ log calls to Python's `logging`: spdlog carries each record (message, level,
// source location) to a sink that hands it to logging.getLogger("fastcomp.<topic>").

// Python.h first: it sets feature macros that the standard headers read.
#include "cpython/pyref.h"
#include "support/log.h"

#include <spdlog/details/null_mutex.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/base_sink.h>

#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace fastcomp::log {
namespace {

// Python's logging.CRITICAL. Not a Level: C++ code logs errors at most, but tests and Python may pass it.
constexpr int kCritical = 50;

// spdlog has one level per named Python level; a level between two named ones rounds down.
spdlog::level::level_enum to_spdlog(Level level) {
  const int l = static_cast<int>(level);
  if (l >= kCritical) return spdlog::level::critical;
  if (l >= static_cast<int>(Level::error)) return spdlog::level::err;
  if (l >= static_cast<int>(Level::warning)) return spdlog::level::warn;
  if (l >= static_cast<int>(Level::info)) return spdlog::level::info;
  return spdlog::level::debug;
}

int to_python(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::critical: return kCritical;
    case spdlog::level::err: return static_cast<int>(Level::error);
    case spdlog::level::warn: return static_cast<int>(Level::warning);
    case spdlog::level::info: return static_cast<int>(Level::info);
    default: return static_cast<int>(Level::debug);  // to_spdlog() produces nothing lower
  }
}

// Forwards each record to one Python logger. No mutex: records reach Python under the GIL, which already
// serializes them, and a mutex held across Python code would deadlock against the GIL (a handler doing I/O
// releases the GIL; a second thread logging would take it and then wait on the mutex forever).
class PythonSink final : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
 public:
  explicit PythonSink(std::string logger_name) : logger_name_(std::move(logger_name)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const PyGILState_STATE gil = PyGILState_Ensure();
    // The caller may log on its error path with a Python error pending: park it so the calls below start
    // clean, and give it back untouched.
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    // A raising handler must never unwind into C++ or replace the caller's error: report it like an
    // exception in __del__ (sys.unraisablehook prints it) and carry on.
    if (!forward(msg)) PyErr_WriteUnraisable(logger_.get());
    PyErr_Restore(type, value, traceback);
    PyGILState_Release(gil);
  }
  void flush_() override {}  // Python's handlers decide when to flush

 private:
  // Hands the record over the way Logger.log would, but carrying the C++ source location (Logger.log would
  // name whichever Python frame happens to be running). Returns false with a Python error set.
  bool forward(const spdlog::details::log_msg& msg) {
    PyObject* logger = python_logger();
    if (!logger) return false;
    const int level = to_python(msg.level);
    PyRef on = PyRef::steal(PyObject_CallMethod(logger, "isEnabledFor", "i", level));
    if (!on) return false;
    const int is_on = PyObject_IsTrue(on.get());
    if (is_on <= 0) return is_on == 0;
    // "replace" so that a message quoting odd bytes from user data still arrives.
    PyRef text = PyRef::steal(
        PyUnicode_DecodeUTF8(msg.payload.data(), static_cast<Py_ssize_t>(msg.payload.size()), "replace"));
    if (!text) return false;
    // makeRecord(name, level, fn, lno, msg, args, exc_info, func): honours a user's setLogRecordFactory.
    PyRef record = PyRef::steal(PyObject_CallMethod(logger, "makeRecord", "sisiO()Os", logger_name_.c_str(),
                                                    level, msg.source.filename, msg.source.line, text.get(),
                                                    Py_None, msg.source.funcname));
    if (!record) return false;
    return static_cast<bool>(PyRef::steal(PyObject_CallMethod(logger, "handle", "O", record.get())));
  }

  // Borrowed; null with a Python error set. Looked up once: getLogger takes logging's module lock.
  PyObject* python_logger() {
    if (!logger_) {
      PyRef logging = PyRef::steal(PyImport_ImportModule("logging"));
      if (!logging) return nullptr;
      PyRef logger = PyRef::steal(PyObject_CallMethod(logging.get(), "getLogger", "s", logger_name_.c_str()));
      if (!logger) return nullptr;
      // getLogger may release the GIL, so another thread may have filled logger_ meanwhile; it holds the
      // same object, so replacing it is harmless.
      logger_ = std::move(logger);
    }
    return logger_.get();
  }

  std::string logger_name_;
  PyRef logger_;
};

// One spdlog logger per topic, each with its own sink: the topic has to travel with the record, and a sink
// per topic knows its Python logger without a lookup. Built on first use and never destroyed: the sinks hold
// Python references, and static destructors run after the interpreter has finalized.
spdlog::logger& logger_for(Topic t) {
  static const auto* const loggers = [] {
    auto* table = new std::array<std::unique_ptr<spdlog::logger>, kTopicCount>;
    for (std::size_t i = 0; i < kTopicCount; ++i) {
      const std::string name = std::string("fastcomp.") + topic_name(static_cast<Topic>(i));
      auto& logger = (*table)[i];
      logger = std::make_unique<spdlog::logger>(name, std::make_shared<PythonSink>(name));
      logger->set_level(spdlog::level::trace);  // the topic thresholds filter, in emit(), not spdlog
    }
    return table;
  }();
  return *(*loggers)[static_cast<std::size_t>(t)];
}

}  // namespace

const char* topic_name(Topic t) {
  // A switch rather than a table so that -Wswitch flags a topic added to the enum without a name.
  switch (t) {
    case Topic::recompiles: return "recompiles";
    case Topic::graph_breaks: return "graph_breaks";
    case Topic::guards: return "guards";
    case Topic::graph: return "graph";
    case Topic::output_code: return "output_code";
    case Topic::bytecode: return "bytecode";
    case Topic::dynamic: return "dynamic";
    case Topic::cudagraphs: return "cudagraphs";
    case Topic::perf_hints: return "perf_hints";
    case Topic::compile: return "compile";
    case Topic::kCount: break;
  }
  throw std::invalid_argument(fmt::format("fastcomp::log::topic_name: {} is not a topic", static_cast<int>(t)));
}

std::optional<Topic> topic_from_name(std::string_view name) {
  for (std::size_t i = 0; i < kTopicCount; ++i) {
    if (name == topic_name(static_cast<Topic>(i))) return static_cast<Topic>(i);
  }
  return std::nullopt;
}

void set_level(Topic t, Level level) {
  detail::thresholds[static_cast<std::size_t>(t)].value.store(static_cast<int>(level), std::memory_order_relaxed);
}

struct DeferredRecords::Impl {
  struct Record {
    Topic topic;
    Level level;
    std::string message;
    std::source_location where;
  };
  std::mutex mutex;
  std::vector<Record> records;
};

namespace {
thread_local DeferredRecords* deferred_here = nullptr;  // the Scope alive on this thread, if any
}  // namespace

DeferredRecords::DeferredRecords() : impl_(std::make_unique<Impl>()) {}
DeferredRecords::~DeferredRecords() = default;
DeferredRecords::Scope::Scope(DeferredRecords& into) : previous_(deferred_here) { deferred_here = &into; }
DeferredRecords::Scope::~Scope() { deferred_here = previous_; }

void DeferredRecords::replay() {
  std::vector<Impl::Record> records;
  {
    std::lock_guard lock(impl_->mutex);
    records.swap(impl_->records);
  }
  for (const Impl::Record& r : records) emit(r.topic, r.level, r.message, r.where);
}

void emit(Topic t, Level level, std::string_view message, std::source_location where) {
  if (!enabled(t, level)) return;
  if (DeferredRecords* deferred = deferred_here) {
    std::lock_guard lock(deferred->impl_->mutex);
    deferred->impl_->records.push_back({t, level, std::string(message), where});
    return;
  }
  logger_for(t).log(spdlog::source_loc{where.file_name(), static_cast<int>(where.line()), where.function_name()},
                    to_spdlog(level), spdlog::string_view_t(message.data(), message.size()));
}

}  // namespace fastcomp::log
