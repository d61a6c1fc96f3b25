// The learner actor: learns its runners' trajectory batches with its algorithm
// and sends the gradients to the parameter server (docs/learners.md).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/all.hpp>

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
  /// Gives back `steps` claimed steps that will not be collected (a batch
  /// asked of a guest runner that another learner took over).
  void release(uint64_t steps) { claimed_.fetch_sub(steps); }
  /// Steps claimed so far.
  uint64_t claimed() const { return claimed_.load(); }
  /// The total.
  uint64_t total() const { return total_; }

private:
  uint64_t total_;
  std::atomic<uint64_t> claimed_;
};

/// How a learner takes part in a run across processes (learner_options::cluster).
struct learner_cluster {
  /// The worker process it runs in; its gradients carry (worker,
  /// incarnation, sequence) so that the server applies each at most once.
  std::string worker;
  uint64_t incarnation = 0; ///< the host's incarnation; 0: gradients unsequenced
  /// The last sequence number sent, shared with the learner's replacements
  /// (required when incarnation != 0).
  std::shared_ptr<std::atomic<uint64_t>> gradient_sequence;
  /// Gradients sent before the answer to the last one is in (0 or 1; docs/learners.md).
  size_t gradients_in_flight = 0;
};

/// Settings of a learner.
struct learner_options {
  std::string name = "learner";           ///< named in gradients, reports and logs
  learners::algorithm_settings algorithm; ///< what it computes (by name)
  learners::model_spec spec;              ///< the model (observations arrive normalized)
  double learning_rate = 2.5e-4;          ///< initial learning rate
  bool anneal_lr = true;                  ///< linear annealing over the budget
  size_t num_runners = 1;                 ///< runners it is handed
  uint64_t steps_per_runner_batch = 512;  ///< environment steps in one runner batch
  /// Per runner (heterogeneous batch sizes); empty: steps_per_runner_batch each.
  std::vector<uint64_t> runner_batch_steps;
  bool pipelined = false; ///< ask for the next batch before learning this one
  /// The only learner of a run in one process: it applies each gradient
  /// itself (Adam with `adam` and `max_grad_norm`, the parameter server's
  /// settings, so the result is the same to the bit) and hands the weights
  /// and Adam's state to the server once per batch (local_steps) instead of
  /// a round trip per gradient. A backend that cannot hand out its optimizer
  /// state falls back to the round trips (logged).
  bool local_optimizer = false;
  learners::adam_config adam; ///< local_optimizer: the server's Adam settings
  double max_grad_norm = 0.5; ///< local_optimizer: the server's clip
  uint64_t seed = 1;          ///< minibatch shuffling
  /// Resume: the shuffling generator's words to continue from (instead of seed).
  std::optional<std::array<uint64_t, 4>> start_gen;
  caf::actor report_to; ///< receives the learner's learner_state when it ends
  learners::device_kind device =
    learners::device_kind::cpu; ///< where gradients are computed
  /// CPU: threads of the backend. 2 runs a PPO minibatch's actor and critic
  /// at once (learners::backend_options::split_networks, the same floats as 1).
  unsigned compute_threads = 1;
  /// Global batch norm: one view per batch-norm layer (batch_norm_layers()
  /// order, streams named by the layer prefix); the learner normalizes with
  /// them and sends each minibatch's layer moments to `keeper`.
  std::vector<std::shared_ptr<learners::stats_view>> batch_norm_views;
  caf::actor keeper; ///< receives batch-norm moment deltas
  /// Set in a run across processes only (a worker's learners).
  std::optional<learner_cluster> cluster;
  log_sink log; ///< empty: nowhere
};

/// Spawns a learner (detached: it blocks on the parameter server's answers).
/// `view` (may be null) is its statistics view, read for the statistics lag.
caf::actor spawn_learner(caf::actor_system& sys, learner_options opts, caf::actor server,
                         caf::actor metrics, std::shared_ptr<policy_store> store,
                         std::shared_ptr<step_budget> budget,
                         std::shared_ptr<learners::stats_view> view = nullptr);

} // namespace troupe::actors
