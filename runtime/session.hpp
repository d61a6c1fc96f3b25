// A training session: one run of the runtime, driven from the caller's code,
// whose errors are values and which installs no signal handler
// (docs/architecture.md, "The runtime library: a training session").
#pragma once

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>

#include "actors/log.hpp"
#include "base/error.hpp"
#include "runtime/cast.hpp"
#include "runtime/config.hpp"

namespace troupe::runtime {

/// What a training run did.
struct training_result {
  std::string run_dir;        ///< the run folder
  uint64_t env_steps = 0;     ///< environment steps learned from
  uint64_t updates = 0;       ///< batches learned
  double return_mean_100 = 0; ///< mean of the last 100 episode returns (NaN: none)
  bool interrupted = false;   ///< stopped before its budget (request_stop, a signal)
  /// A coordinator's actor system did not shut down within its limit after
  /// the final checkpoint (the files are complete), so the program should end
  /// with std::_Exit rather than wait for it at exit.
  bool actor_system_left = false;
};

/// A snapshot of a session's progress.
struct progress_info {
  uint64_t env_steps = 0;           ///< environment steps counted by the metrics
  uint64_t updates = 0;             ///< batches learned
  uint64_t episodes = 0;            ///< episodes ended
  double return_mean_100 = NAN;     ///< mean of the last 100 returns (NaN: none yet)
  uint64_t policy_version = 0;      ///< newest published policy version
  uint64_t stats_version = 0;       ///< merges in the observation statistics (0: none)
  uint64_t transitions_dropped = 0; ///< transitions a game fed that were dropped
  bool running = false;             ///< started and not yet ended
  bool finished = false;            ///< training ended (its result is ready for close)
};

/// Choices of an embedding program beyond the config.
struct session_options {
  cast_options cast; ///< e.g. actors of its own in the runner slots (cast.hpp)
  /// Transitions a game fed that were dropped (read by progress()); null: 0.
  std::shared_ptr<const std::atomic<uint64_t>> transitions_dropped;
  /// Where the session's log lines go, called from the runtime's threads and
  /// the thread that calls open(), start() or close() (empty: nowhere).
  actors::log_sink log;
  /// A progress line (log_level::progress) about once a second instead of an
  /// info line per metrics row (`troupe train` on a terminal).
  bool progress_line = false;
};

/// One training run, movable and not copyable (a moved-from session answers
/// every call with an error).
class session {
public:
  /// Checks `cfg` and, with `resume_dir`, reads the run folder's newest
  /// complete checkpoint; a bad config or run folder opens no session (the
  /// error names the key and where its value came from).
  static result<session> open(const config& cfg, std::string resume_dir = {},
                              session_options options = {});

  session(session&&) noexcept;
  session& operator=(session&&) noexcept;
  session(const session&) = delete;
  session& operator=(const session&) = delete;
  /// Closes the session when it was not closed (its result is dropped).
  ~session();

  /// Creates the run folder and the actor system and starts training on the
  /// runtime's threads, returning at once (once only).
  status start();

  /// The counters now (refreshed a few times per second), never blocking on
  /// the actors; callable from any thread.
  progress_info progress() const;

  /// Writes a checkpoint now (the periodic ones' format) and returns its
  /// folder, or an error when the session is not running.
  result<std::string> save_checkpoint();

  /// Asks training to stop after the batches under way, returning at once
  /// (callable from any thread; a no-op when not running).
  void request_stop();

  /// Waits at most `timeout` for training to end and says whether it has
  /// (an error before start() and after close()).
  result<bool> wait(std::chrono::milliseconds timeout);

  /// Stops training if it runs, writes the final checkpoint, joins the
  /// runtime's threads and returns what the run did (empty for a session
  /// never started; a second close is an error).
  result<training_result> close();

  /// The run folder: known once started (a resumed run's from the start).
  std::string run_dir() const;

  struct state; ///< the session's state (session.cpp)

private:
  explicit session(std::unique_ptr<state> st);
  std::unique_ptr<state> st_;
};

} // namespace troupe::runtime
