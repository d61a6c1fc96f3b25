// The one driver of a run: it owns the actor system, spawns the supervisor of
// a cast and runs the loop of its messages, reporting through run_events to
// its clients, the session and the cluster worker (docs/architecture.md,
// "The run driver and its events").
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/log.hpp"
#include "actors/messages.hpp"
#include "actors/supervisor.hpp"
#include "base/error.hpp"
#include "runtime/checkpoint_files.hpp"
#include "runtime/system_shutdown.hpp"

namespace troupe::runtime {

/// How often the driver refreshes the progress counters (and looks at its
/// deadlines) while a run goes on.
inline constexpr std::chrono::milliseconds progress_every{200};

/// Settings of a driver's actor system.
struct driver_settings {
  /// Further settings of the system's config, applied after the project's
  /// messages are registered and before CAF's logger is set quiet; may be empty.
  std::function<void(caf::actor_system_config&)> configure;
  /// How the system ends with the driver (system_shutdown.hpp).
  system_end end = system_end::wait;
  /// With system_end::bounded: how long the end is waited for.
  std::chrono::milliseconds end_limit{0};
};

/// What one run of the driver's loop needs.
struct run_settings {
  actors::cast_plan plan; ///< the cast the supervisor spawns
  /// The cast's model and normalization (its actors come with ready).
  cast_handles handles;
  /// The supervisor polls it; nonzero stops the run. Null: one of its own.
  std::shared_ptr<std::atomic<int>> stop_flag;
  actors::log_sink log;             ///< the supervisor's restarts and failures
  bool periodic_checkpoints = true; ///< a checkpoint at each ckpt_atom
  bool first_checkpoint = false;    ///< and one as soon as the cast is ready
  bool refresh_progress = true;     ///< ask the counters every progress_every
  /// Monitored as well: the end of one ends the loop (run_end::lost).
  std::vector<caf::actor> watched;
  /// After a stop_atom (the run's end told from outside): how long the cast
  /// may take to end before the loop gives up on it; zero: as long as it takes.
  std::chrono::milliseconds stop_grace{0};
};

/// The counters one progress refresh read (a busy actor's may be missing).
struct run_progress {
  std::optional<actors::metrics_counters> counters; ///< the metrics actor's
  std::optional<uint64_t> stats_version; ///< the observation statistics' version
};

/// How the loop of a run ended.
struct run_end {
  bool ready = false;        ///< the cast came up
  bool interrupted = false;  ///< stopped before its budget (the stop flag)
  bool stop_asked = false;   ///< a stop_atom came (a coordinator ended the run)
  bool grace_spent = false;  ///< the cast did not end within stop_grace of it
  std::string failure;       ///< why the run failed (empty: it did not)
  std::string write_failure; ///< a periodic checkpoint that could not be written
  std::string lost;          ///< why a watched actor ended (empty: none did)
  std::optional<actors::cast_snapshot> last_snapshot; ///< the supervisor's final one
  caf::actor supervisor; ///< the run's supervisor (ended by now)
  cast_handles handles;  ///< the cast's shared actors (from ready)
};

/// The status a run ends with when nothing follows its loop: the cast could
/// not start, the run failed, a checkpoint could not be written, or fine.
status end_status(const run_end& end);

/// What a run reports, on the thread that runs the driver's loop, each event
/// doing nothing by default (on_end: end_status).
class run_events {
public:
  virtual ~run_events() = default;
  /// The cast is up (`handles` holds its keeper, server and metrics actor);
  /// a non-empty answer is a problem that stops the run as its failure.
  virtual std::string on_ready(caf::scoped_actor& self, const caf::actor& supervisor,
                               const cast_handles& handles);
  /// The cast is held at a consistent cut: writes the checkpoint of `snap`
  /// and returns its folder, or why it could not (the run then stops).
  virtual result<std::string> on_checkpoint(caf::scoped_actor& self,
                                            const actors::cast_snapshot& snap);
  /// A line of the driver's own at `level`.
  virtual void on_log(actors::log_level level, const std::string& line);
  /// The counters of one refresh (every progress_every once ready, and once
  /// after the loop).
  virtual void on_progress(const run_progress& progress);
  /// The loop has ended: what follows before the run is done (the final
  /// checkpoint, a worker's leaving); returns the run's status.
  virtual status on_end(caf::scoped_actor& self, run_end& end);
  /// The run is over with `outcome` (what on_end returned).
  virtual void on_done(const run_end& end, const status& outcome);
};

/// Owns a run's actor system and drives runs in it (see the file comment).
class driver {
public:
  /// Makes the actor system; an error when CAF cannot (its message).
  static result<std::unique_ptr<driver>> create(driver_settings settings);

  /// Ends the system as its settings say, unless end_system() did already.
  ~driver();
  driver(const driver&) = delete;
  driver& operator=(const driver&) = delete;

  /// The actor system (valid until end_system()).
  caf::actor_system& system();

  /// Spawns the supervisor of `settings.plan`, runs the loop on this thread
  /// (`self` made on it) until the run ends, then on_end, the end of the
  /// cast's shared actors and on_done, returning on_done's outcome (never throws).
  status run(caf::scoped_actor& self, run_settings settings, run_events& events);

  /// Changes how the system will end (a worker's, once it has reached a
  /// coordinator whose actors its own may come to wait on).
  void set_end(system_end how, std::chrono::milliseconds limit = {});

  /// Ends the system now as the settings say (once; every actor handle of it
  /// must be gone): true when it was destroyed, false when it was left
  /// running (system_end::leave, or a bounded end that ran out).
  bool end_system();

private:
  explicit driver(driver_settings settings);
  driver_settings settings_;
  std::unique_ptr<caf::actor_system_config> cfg_;
  std::unique_ptr<caf::actor_system> sys_;
};

} // namespace troupe::runtime
