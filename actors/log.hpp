// Where the library's log lines go: to the sink its user sets, or nowhere.
// The library itself never prints (docs/architecture.md); the `troupe`
// command line is one listener, an embedding program another.
#pragma once

#include <functional>
#include <string>
#include <type_traits>
#include <utility>

namespace troupe::actors {

/// How much a log line matters, from least to most (the C API's TROUPE_LOG_*
/// and troupe::log_level have the same values).
enum class log_level : int {
  /// A status line that replaces the one before it (the metrics actor's
  /// once-a-second line when the caller asked for one).
  progress = 0,
  /// The run's normal course: the run folder, a metrics row, a host joining.
  info = 1,
  /// Normal but worth telling apart (as syslog's notice): resuming from a
  /// checkpoint, starting over, a run's closing summaries.
  notice = 2,
  /// Something went wrong and the run goes on: a dropped message, a restart.
  warning = 3,
  /// Something failed: the run stops, or a file it must write is not written.
  error = 4,
};

/// The level's lower-case name ("progress", "info", ...).
inline const char* to_string(log_level level) noexcept {
  switch (level) {
  case log_level::progress:
    return "progress";
  case log_level::info:
    return "info";
  case log_level::notice:
    return "notice";
  case log_level::warning:
    return "warning";
  case log_level::error:
    return "error";
  }
  return "unknown";
}

namespace detail {
template <class T>
struct is_std_function : std::false_type {};
template <class Signature>
struct is_std_function<std::function<Signature>> : std::true_type {};
} // namespace detail

/// A receiver of log lines (one line each, without a newline); empty means
/// nowhere. Made from a callable taking (log_level, const std::string&), or
/// from one taking the line only (the level is then dropped). Called from
/// whichever thread logs: it must be safe to call concurrently.
class log_sink {
public:
  using function = std::function<void(log_level, const std::string&)>;

  log_sink() = default;
  log_sink(std::nullptr_t) {}

  /// A sink that gets the level and the line.
  template <class F, std::enable_if_t<
                       std::is_invocable_v<F&, log_level, const std::string&>, int> = 0>
  log_sink(F f) {
    if constexpr (may_be_empty<F>)
      if (!static_cast<bool>(f))
        return;
    fn_ = std::move(f);
  }

  /// A sink that gets the line only.
  template <class F,
            std::enable_if_t<!std::is_invocable_v<F&, log_level, const std::string&> &&
                               std::is_invocable_v<F&, const std::string&> &&
                               !std::is_same_v<std::decay_t<F>, log_sink>,
                             int> = 0>
  log_sink(F f) {
    if constexpr (may_be_empty<F>)
      if (!static_cast<bool>(f))
        return;
    fn_ = [f = std::move(f)](log_level, const std::string& line) mutable { f(line); };
  }

  /// Hands `line` at `level` to the receiver, if any.
  void operator()(log_level level, const std::string& line) const {
    if (fn_)
      fn_(level, line);
  }

  /// Hands `line` at warning level to the receiver, if any.
  void operator()(const std::string& line) const { (*this)(log_level::warning, line); }

  /// Whether a receiver is set.
  explicit operator bool() const noexcept { return static_cast<bool>(fn_); }

private:
  // A callable that may hold nothing: an empty one makes an empty sink.
  template <class F>
  static constexpr bool may_be_empty =
    detail::is_std_function<F>::value || std::is_pointer_v<F>;

  function fn_;
};

/// Writes `line` at `level` to `sink`; nothing when no sink is set.
inline void write_log(const log_sink& sink, log_level level, const std::string& line) {
  sink(level, line);
}

/// Writes `line` to `sink` at warning level (the actors' problem reports).
inline void write_log(const log_sink& sink, const std::string& line) {
  sink(log_level::warning, line);
}

} // namespace troupe::actors
