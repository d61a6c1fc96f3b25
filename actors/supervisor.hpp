// The supervisor actor: spawns a training run's cast from its plan, watches it,
// restarts failed runners and learners within bounds, and ends the run
// (docs/training.md, "The cast and one update").
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/learner.hpp"
#include "actors/log.hpp"
#include "actors/messages.hpp"
#include "actors/metrics.hpp"
#include "actors/parameter_server.hpp"
#include "actors/policy_store.hpp"
#include "actors/replica.hpp"
#include "actors/stats_keeper.hpp"

namespace troupe::actors {

/// What the supervisor asks of a runner factory.
struct runner_request {
  size_t learner = 0;    ///< index of the learner it feeds
  size_t index = 0;      ///< index of the runner within its learner
  uint64_t restarts = 0; ///< 0 for the first, k for the k-th replacement
  std::string name;      ///< "<learner name>.runner<index>"
  caf::actor consumer;   ///< its learner
  caf::actor keeper;     ///< the statistics keeper (views subscribe to it)
  caf::actor deltas;     ///< where its moment deltas go: the keeper, or a
                         ///< host's delta outbox
  bool guest = false;    ///< it feeds a learner of another host (consumer)
};

/// Spawns one environment runner; an invalid actor when it cannot (the
/// factory logs why), which the supervisor treats as the runner's failure.
/// A factory that hands the runner a statistics view subscribes it with
/// subscribe_view, so that the view holds the keeper's current snapshot
/// before the runner's first step.
using runner_factory = std::function<caf::actor(const runner_request&)>;

/// One learner of the cast.
struct learner_plan {
  learner_options options;             ///< its settings (views and keeper are filled in)
  std::shared_ptr<step_budget> budget; ///< the steps it may collect
};

/// The statistics keeper, parameter server and metrics actor of a run that
/// exist already (a worker process of a run across processes: they live in
/// the coordinator's process).
struct shared_actors {
  caf::actor keeper;  ///< the statistics keeper
  caf::actor server;  ///< the parameter server
  caf::actor metrics; ///< the metrics actor
};

/// How a cast takes part in a run across processes (cast_plan::cluster).
struct cluster_attachment {
  /// Set (a worker): use these instead of spawning a keeper, a server and a
  /// metrics actor, which the supervisor then never stops or ends.
  std::optional<shared_actors> existing;
  caf::actor deltas; ///< where moment deltas go (a host's delta outbox); null: the keeper
  caf::actor
    views; ///< where views subscribe (a host's statistics relay); null: the keeper
  /// The coordinator: learners elsewhere share the budget, so the run goes on
  /// with no local learner alive until done_atom or a stop.
  bool end_on_done = false;
  /// An environment-only host: runners that feed `feed_learners` (round robin).
  size_t guest_runners = 0;
  std::vector<caf::actor> feed_learners; ///< the learners guest runners feed
  std::string guest_prefix;              ///< guest runner i is "PREFIX.runnerI"
};

/// Everything the supervisor spawns.
struct cast_plan {
  stats_keeper_options keeper;         ///< the statistics keeper
  std::string keeper_state;            ///< loaded first when not empty (resume)
  std::vector<stream_decl> streams;    ///< declared before anything acts
  parameter_server_options server;     ///< the parameter server
  std::vector<float> params;           ///< its initial weights
  std::vector<float> buffers;          ///< its initial buffers
  std::shared_ptr<policy_store> store; ///< where it publishes versions
  std::optional<parameter_server_state> server_state; ///< restored when set (resume)
  /// Set: a replica of the parameter server (actors/replica.hpp) in its place,
  /// all-reducing through this group with the other hosts' replicas
  /// (cluster.data_plane = "allreduce"), with `replica` as its settings.
  std::shared_ptr<collective> replica_group;
  replica_options replica; ///< the replica's settings (with replica_group)
  /// Set (and replica_group not): a standby replica in the parameter server's
  /// place (actors/replica.hpp), for a host with no learners that takes no
  /// part in the rounds; it starts from server_state when that is set.
  std::optional<standby_options> standby;
  metrics_options metrics;            ///< the metrics actor
  std::vector<learner_plan> learners; ///< the learners
  std::string obs_stream; ///< each learner's statistics view (lag); empty: none
  size_t obs_dim = 0;     ///< its dimension
  /// Global batch norm: (stream, width) of each layer; every learner gets a view of each.
  std::vector<std::pair<std::string, size_t>> batch_norm_streams;
  runner_factory make_runner; ///< spawns runners (learner_options::num_runners each)
  uint64_t max_runner_restarts = 3;  ///< per runner; one more failure ends the run
  uint64_t max_learner_restarts = 2; ///< per learner; one more failure ends the run
  /// Set in a run across processes only (the keeper's state, the streams and
  /// the server's state above are ignored when it names existing actors).
  std::optional<cluster_attachment> cluster;
};

/// Settings of a supervisor.
struct supervisor_options {
  cast_plan cast;   ///< what to spawn
  caf::actor owner; ///< receives ready_atom, ckpt_atom and the final done_atom
  std::shared_ptr<std::atomic<int>>
    stop_flag;           ///< nonzero: stop (a signal number); may be null
  uint32_t poll_ms = 50; ///< how often the flag is looked at
  log_sink log;          ///< restarts and failures; empty: nowhere
  /// How long a snapshot waits for one actor's state. A held snapshot (a
  /// checkpoint while the run goes on) that misses an answer is refused: its
  /// cut would not be consistent.
  std::chrono::milliseconds snapshot_wait{30000};
};

/// Spawns a supervisor (detached: start-up waits for the keeper's and the
/// server's answers in order).
caf::actor spawn_supervisor(caf::actor_system& sys, supervisor_options opts);

} // namespace troupe::actors
