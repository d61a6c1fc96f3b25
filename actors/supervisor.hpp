// The supervisor actor: spawns the cast of a training run from its plan (the
// statistics keeper, the parameter server, the metrics actor, the learners and
// their environment runners), monitors every one of them, restarts a failed
// environment runner (bounded per runner, counted, logged), stops the run on
// request (SIGINT/SIGTERM through a flag it polls, or stop_atom), and tells
// its owner what to do.
//
// Start-up, in order: the keeper (its state loaded when resuming, every
// stream declared before anything acts), the parameter server (its state
// restored when resuming), the metrics actor (which reports to the
// supervisor), each learner with its statistics views, then each learner's
// runners, handed to their learner with (runner_atom, index, runner).
//
// Failure policy: a runner is restarted up to max_runner_restarts times
// (the replacement gets the same name and the next `restarts` number, so the
// factory can give it fresh seeds); one more failure ends the run. A learner
// is restarted up to max_learner_restarts times: the new one takes the
// server's current weights and continues the failed one's generator, and its
// runners are replaced (next `restarts` number) so that they feed it; the
// batches the failed learner had asked for are lost. The keeper, the server
// or the metrics actor that fails ends the run: the others are stopped, and
// the owner is told which actor failed and why, so that it can write a final
// checkpoint from what is left.
//
// Messages it handles:
//   (ckpt_atom, uint64_t updates)  from the metrics actor: forwarded to the owner
//   (done_atom)                    from the metrics actor: budget spent (the
//                                  learners end by themselves; with
//                                  cast_plan::end_on_done the run stops)
//   (stop_atom)                    stop the run: learners stop after their
//                                  batch, the parameter server drains
//   (status_atom) -> supervisor_status
//   (state_atom)  -> cast_snapshot   every runner's and learner's random state,
//                                    for a checkpoint (each answers between batches)
//   (learners_atom) -> std::vector<caf::actor>  the learners alive now
//   learner_state                    a learner's last state, sent as it ends
//   down messages of the cast
// It sends to the owner: once started, (ready_atom, keeper, server, metrics);
// (ckpt_atom, uint64_t updates); and at the end, once every learner has ended,
// the final cast_snapshot, then (done_atom, bool interrupted, std::string
// failure); when start-up fails, only the done_atom.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/host_counters.hpp"
#include "actors/learner.hpp"
#include "actors/log.hpp"
#include "actors/messages.hpp"
#include "actors/metrics.hpp"
#include "actors/parameter_server.hpp"
#include "actors/policy_store.hpp"
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
  std::shared_ptr<host_counters> host; ///< the cast's host counters (may be null)
  bool guest = false;                  ///< it feeds a learner of another host (consumer)
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
  metrics_options metrics;                            ///< the metrics actor
  std::vector<learner_plan> learners;                 ///< the learners
  std::string obs_stream; ///< each learner's statistics view (lag); empty: none
  size_t obs_dim = 0;     ///< its dimension
  /// Global batch norm: (stream, width) of each layer; every learner gets a view of each.
  std::vector<std::pair<std::string, size_t>> batch_norm_streams;
  runner_factory make_runner; ///< spawns runners (learner_options::num_runners each)
  uint64_t max_runner_restarts = 3;  ///< per runner; one more failure ends the run
  uint64_t max_learner_restarts = 2; ///< per learner; one more failure ends the run
  /// Set: use these instead of spawning a keeper, a server and a metrics
  /// actor; the keeper's state, the streams and the server's state of this
  /// plan are then ignored, and the supervisor never stops or ends them.
  std::optional<shared_actors> existing;
  /// Where the runners and learners send their moment deltas (a host's delta
  /// outbox, actors/delta_outbox.hpp, on a worker of a run across
  /// processes); null: the keeper itself.
  caf::actor deltas;
  /// Where views subscribe to statistics streams (a host's statistics relay,
  /// actors/stats_relay.hpp, on a worker of a run across processes); null:
  /// the keeper itself.
  caf::actor views;
  /// Learners elsewhere share the budget (the coordinator of a run across
  /// processes): the run goes on with no local learner alive, and ends when
  /// the metrics actor says the budget is spent (done_atom) or on a stop.
  bool end_on_done = false;
  /// An environment-only host of a run across processes: this many runners
  /// that feed learners of another host (`feed_learners`, round robin), each
  /// registered with its learner as a guest, (runner_atom, name, runner).
  /// They are restarted like the others; the cast runs until it is stopped.
  size_t guest_runners = 0;
  std::vector<caf::actor> feed_learners; ///< the learners guest runners feed
  /// A worker of a run across processes: its runners and learners count
  /// their steps here (runner_request::host, learner_options::host).
  std::shared_ptr<host_counters> host;
  std::string guest_prefix;              ///< guest runner i is "PREFIX.runnerI"
};

/// Settings of a supervisor.
struct supervisor_options {
  cast_plan cast;   ///< what to spawn
  caf::actor owner; ///< receives ready_atom, ckpt_atom and the final done_atom
  std::shared_ptr<std::atomic<int>>
    stop_flag;           ///< nonzero: stop (a signal number); may be null
  uint32_t poll_ms = 50; ///< how often the flag is looked at
  log_sink log;          ///< restarts and failures; empty: nowhere
};

/// Spawns a supervisor (detached: start-up waits for the keeper's and the
/// server's answers in order).
caf::actor spawn_supervisor(caf::actor_system& sys, supervisor_options opts);

} // namespace troupe::actors
