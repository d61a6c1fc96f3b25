// The metrics actor: gathers the learners' reports (counters, episode
// returns, losses, lags), writes metrics.csv and metrics.jsonl rows (and the
// same rows as TensorBoard scalars in an events file), prints
// logs a progress line about once a second when asked (a line per row
// otherwise), and tells the coordinator when a checkpoint is due and when
// the step budget is spent.
//
// Messages it handles:
//   learner_report           -> (none)
//   (row_atom)               -> metrics_counters   writes a row now (the final one)
//   (state_atom)             -> metrics_counters   for checkpoints
//   (hosts_atom, uint64_t hosts, uint64_t lost, uint64_t env_steps_lost)
//                               worker processes of a run across processes
//                               (joined and alive, lost so far) and the env
//                               steps the lost ones collected and never learned
//   (tally_atom)             -> (none)  asks the keeper and the server (when
//                               given) for their counters of refused messages;
//                               it does so itself every tally_interval_ms and
//                               before the final row
//   (status_atom)            -> std::string        the first failed open or write of
//                               metrics.csv, metrics.jsonl or the events file (path and
//                               the system's reason); empty when none. On such a failure
//                               it also sends (stop_atom) to the coordinator: the run
//                               stops.
// It sends to the coordinator: (ckpt_atom, uint64_t updates), (done_atom),
// (stop_atom).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/log.hpp"
#include "actors/messages.hpp"

namespace troupe::actors {

/// The columns of metrics.csv, in order.
extern const char* const metrics_columns[];

/// Number of entries of metrics_columns.
extern const size_t metrics_column_count;

/// The columns of metrics.csv of a run whose environment has these reward
/// terms and trouble counters (envs::env_spec::reward_terms, ::counters):
/// metrics_columns, then "episode.<term>_mean" per reward term, then the
/// counters' names. Without either, metrics_columns alone.
std::vector<std::string>
metrics_column_names(const std::vector<std::string>& reward_terms,
                     const std::vector<std::string>& counters);

/// Settings of the metrics actor.
struct metrics_options {
  std::string csv_path;   ///< metrics.csv (appended to; header when new)
  std::string jsonl_path; ///< metrics.jsonl (appended to)
  /// hosts.csv (appended to; header when new; empty: none): with each row of
  /// metrics.csv, one row per host whose learners have reported, the host
  /// named by its learners' names ("w1.learner0": w1; a name without a host
  /// part: "coordinator"); see hosts_columns.
  std::string hosts_csv_path;
  /// Folder of a new TensorBoard events file holding every row (empty: none).
  std::string tensorboard_dir;
  uint64_t log_every_updates = 10;       ///< a row every this many updates
  uint64_t checkpoint_every_updates = 0; ///< ask for a checkpoint this often (0: never)
  uint64_t total_env_steps = 0;          ///< budget, for the progress line and done_atom
  /// Where the rows' lines (info) or the progress line (progress) and a
  /// failed write (error) go; empty: nowhere.
  log_sink log;
  /// Instead of a line per row, a progress line about once a second (the
  /// caller shows it in place: `troupe train` on a terminal).
  bool progress_line = false;
  bool quiet = false;     ///< neither rows' lines nor progress lines
  metrics_counters start; ///< counters to continue from (resume)
  /// The keeper, whose duplicates feed deltas_duplicate (may be null). Weak
  /// handles: the options outlive the actor's end inside CAF's spawn, and a
  /// strong handle there would keep a detached server from ever being
  /// destroyed, so that the actor system waits forever at shutdown.
  caf::actor_addr keeper;
  caf::actor_addr server;           ///< the server, for gradients_rejected (may be null)
  uint64_t tally_interval_ms = 500; ///< how often it asks them (0: only at the end)
  /// The environment's reward terms: a column each, the mean over the episodes
  /// finished since the last row of their per-episode sums (nan when none).
  std::vector<std::string> reward_terms;
  /// The environment's trouble counters: a column each, the count since the
  /// metrics actor started (the reports' env_counters added up).
  std::vector<std::string> env_counters;
};

/// The columns of hosts.csv: wall_time_s and env_steps of the run's row,
/// then the host, its learners' env steps and updates (learned batches) since
/// the metrics actor started, their episodes, their env steps per second
/// since the last row, and the mean policy lag and mean return of the
/// batches and episodes since the last row (empty when none).
extern const char* const hosts_columns[];
extern const size_t hosts_column_count;

/// The host of learner `learner` in hosts.csv: the part before ".learner"
/// ("w1.learner0": "w1"), else "coordinator".
std::string host_of_learner(const std::string& learner);

/// Spawns the metrics actor; `coordinator` receives ckpt_atom and done_atom.
caf::actor spawn_metrics(caf::actor_system& sys, metrics_options opts,
                         caf::actor coordinator);

/// Spawns a host's report relay: the learner reports it is sent reach
/// `metrics` as one message per `interval` (a std::vector<learner_report>, in
/// the order they came), so that a remote metrics actor takes one message per
/// host per interval instead of one per learned batch; an interval of 0
/// forwards each report as it comes. (flush_atom) sends what is held and
/// answers flush_atom once it is sent. The relay ends when `metrics` does,
/// with its reason.
caf::actor spawn_report_relay(caf::actor_system& sys, caf::actor metrics,
                              std::chrono::milliseconds interval);

} // namespace troupe::actors
