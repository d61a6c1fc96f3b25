#include "runtime/embed/log.hpp"

#include "base/mutex.hpp"

namespace troupe::embed {

namespace {

// The process-wide callback. The lock is held while it runs, so that calls
// never overlap and a callback replaced is never called again; recursive, so
// that a callback may set another.
struct process_log {
  base::recursive_mutex mtx;
  troupe_log_callback callback TROUPE_GUARDED_BY(mtx) = nullptr;
  void* user TROUPE_GUARDED_BY(mtx) = nullptr;
};

process_log& the_process_log() {
  static process_log log; // never destroyed before the threads that log end
  return log;
}

static_assert(static_cast<int>(actors::log_level::progress) == TROUPE_LOG_PROGRESS &&
                static_cast<int>(actors::log_level::info) == TROUPE_LOG_INFO &&
                static_cast<int>(actors::log_level::notice) == TROUPE_LOG_NOTICE &&
                static_cast<int>(actors::log_level::warning) == TROUPE_LOG_WARNING &&
                static_cast<int>(actors::log_level::error) == TROUPE_LOG_ERROR,
              "the runtime's log levels are the C API's");
static_assert(static_cast<int>(log_level::progress) == TROUPE_LOG_PROGRESS &&
                static_cast<int>(log_level::error) == TROUPE_LOG_ERROR,
              "the C++ API's log levels are the C API's");

} // namespace

void set_process_log(troupe_log_callback callback, void* user) noexcept {
  auto& log = the_process_log();
  base::recursive_mutex_lock lock(log.mtx);
  log.callback = callback;
  log.user = user;
}

actors::log_sink session_log(const log_sink& own) {
  if (own)
    return [own](actors::log_level level, const std::string& line) {
      try {
        own(static_cast<log_level>(level), line);
      } catch (...) {
      }
    };
  return [](actors::log_level level, const std::string& line) {
    auto& log = the_process_log();
    base::recursive_mutex_lock lock(log.mtx);
    if (log.callback)
      log.callback(static_cast<int>(level), line.c_str(), log.user);
  };
}

} // namespace troupe::embed
