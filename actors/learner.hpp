// The learner actor: asks its environment runners (handed over by the
// supervisor, one (runner_atom, index, runner) per slot; a later one for the
// same slot is a replacement of a failed runner) for trajectory batches,
// hands each batch to its algorithm (learners/algorithm.hpp: PPO, IMPALA,
// A3C or any other of the registry; the actor names none), which computes
// the gradients; the actor sends every gradient to the parameter server and
// waits for the weights it answers with, and reports losses, returns and
// lags to the metrics actor. It starts once every slot has a runner and
// stops when the step budget is spent or on stop_atom. The last gradient of
// each batch carries the batch's environment steps, so that the parameter
// server counts learned batches together with the weights they changed.
//
// The acting weights an algorithm asks for (uses_acting_weights) are the
// batch's policy version (policy_store::at), or the current weights when the
// store no longer keeps it or when the batch was acted with several versions
// (behavior_recorded, a game-driven batch: its behavior_logp is the only
// record of the acting policy); rollout_view::acting_version_kept tells the
// algorithm which. A batch that does not meet the algorithm's
// requirements (check_batch) is skipped with a log line naming the
// algorithm and the numbers.
//
// Policy lag is the parameter server's version when the batch is learned
// minus the version the batch was acted with; statistics lag is the latest
// published statistics version minus the one the batch was normalized with.
//
// The learner is a blocking actor on its own thread (its gradient steps
// wait for the parameter server's answers in order).
//
// Messages it handles: trajectory_batch (from its runners),
// (runner_atom, uint64_t index, caf::actor runner), stop_atom, exit_msg,
// (state_atom) -> learner_state (between batches),
// (runner_atom, string name, caf::actor runner): a guest runner (of an
// environment-only host of a run across processes), asked for batches like
// the learner's own from then on, watched, and dropped when it ends (its
// batch under way is lost); the same name again replaces it.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/host_counters.hpp"
#include "actors/log.hpp"
#include "actors/messages.hpp"
#include "learners/optimizer.hpp"
#include "actors/policy_store.hpp"
#include "learners/algorithm.hpp"
#include "learners/backend.hpp"
#include "learners/stats_view.hpp"

namespace troupe::actors {

/// Environment steps that may still be collected, shared by the learners
/// that draw on one budget.
class step_budget {
public:
  /// A budget of `total` steps of which `spent` are already used.
  explicit step_budget(uint64_t total, uint64_t spent = 0)
    : total_(total), claimed_(spent) {}
  /// Claims `steps` steps; false (claiming nothing) when fewer remain.
  bool claim(uint64_t steps) {
    uint64_t now = claimed_.load();
    while (now < total_) {
      if (claimed_.compare_exchange_weak(now, now + steps))
        return true;
    }
    return false;
  }
  /// Steps claimed so far.
  uint64_t claimed() const { return claimed_.load(); }
  /// The total.
  uint64_t total() const { return total_; }

private:
  uint64_t total_;
  std::atomic<uint64_t> claimed_;
};

/// Settings of a learner.
struct learner_options {
  std::string name = "learner";          ///< named in gradients, reports and logs
  learners::algorithm_settings algorithm; ///< what it computes (by name)
  learners::model_spec spec;             ///< the model (observations arrive normalized)
  double learning_rate = 2.5e-4;         ///< initial learning rate
  bool anneal_lr = true;                 ///< linear annealing over the budget
  size_t num_runners = 1;                ///< runners it is handed
  uint64_t steps_per_runner_batch = 512; ///< environment steps in one runner batch
  /// Per runner (heterogeneous batch sizes); empty: steps_per_runner_batch each.
  std::vector<uint64_t> runner_batch_steps;
  bool pipelined = false;           ///< ask for the next batch before learning this one
  /// Gradients sent before the server's answer to the last one is in: 0 waits
  /// for each answer (the weights) before computing the next gradient; 1 (a
  /// worker of a run across processes, async) sends a gradient and computes
  /// the next one while its answer crosses the wire, so one round trip is
  /// hidden behind a gradient's computation at the cost of one version more of
  /// policy lag (bounded by max_staleness like any other). Sync runs use 0.
  size_t gradients_in_flight = 0;
  /// The only learner of a run in one process: it applies each gradient
  /// itself (Adam with `adam` and `max_grad_norm`, the parameter server's
  /// settings, so the result is the same to the bit) and hands the weights
  /// and Adam's state to the server once per batch (local_steps) instead of
  /// a round trip per gradient. A backend that cannot hand out its optimizer
  /// state falls back to the round trips (logged).
  bool local_optimizer = false;
  learners::adam_config adam;       ///< local_optimizer: the server's Adam settings
  double max_grad_norm = 0.5;       ///< local_optimizer: the server's clip
  uint64_t seed = 1;                ///< minibatch shuffling
  /// Resume: the shuffling generator's words to continue from (instead of seed).
  std::optional<std::array<uint64_t, 4>> start_gen;
  caf::actor report_to; ///< receives the learner's learner_state when it ends
  learners::device_kind device =
    learners::device_kind::cpu; ///< where gradients are computed
  /// Global batch norm: one view per batch-norm layer (batch_norm_layers()
  /// order, streams named by the layer prefix); the learner normalizes with
  /// them and sends each minibatch's layer moments to `keeper`.
  std::vector<std::shared_ptr<learners::stats_view>> batch_norm_views;
  caf::actor keeper;                           ///< receives batch-norm moment deltas
  /// A learner on a worker of a run across processes: its gradients carry
  /// (worker, incarnation, sequence 1, 2, ...), so that the parameter server
  /// applies each at most once and refuses them once the incarnation is
  /// fenced; incarnation 0: unsequenced (one process).
  std::string worker;
  uint64_t incarnation = 0; ///< the host's incarnation (see worker)
  /// The last sequence number sent, shared with the learner's replacements
  /// (a restarted learner goes on counting; required when incarnation != 0).
  std::shared_ptr<std::atomic<uint64_t>> gradient_sequence;
  /// A learner on a worker: counts the steps of each batch it learned or
  /// skipped in `finished`. Null: not counted.
  std::shared_ptr<host_counters> host;
  log_sink log; ///< empty: nowhere
};

/// Spawns a learner (detached: it blocks on the parameter server's answers).
/// `view` (may be null) is its statistics view, read for the statistics lag.
caf::actor spawn_learner(caf::actor_system& sys, learner_options opts, caf::actor server,
                         caf::actor metrics, std::shared_ptr<policy_store> store,
                         std::shared_ptr<step_budget> budget,
                         std::shared_ptr<learners::stats_view> view = nullptr);

} // namespace troupe::actors
