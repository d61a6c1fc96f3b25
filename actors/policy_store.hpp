// Where the parameter server leaves each new version of the weights for the
// environment runners of this process, and the sampling policy that acts
// with them. Keeping the last few versions lets a learner recompute the
// behavior policy's log-probabilities and values of a batch made with a
// stale version (PPO's old_logprob; IMPALA's mu only for a batch without
// the log-probabilities the runner records when acting).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "actors/env_runner.hpp"
#include "base/mutex.hpp"
#include "learners/model.hpp"

namespace troupe::actors {

/// One version of the policy: a model whose inputs are the observations as
/// the runner hands them over (already normalized when normalization is on).
struct policy_snapshot {
  uint64_t version = 0;         ///< parameter server version
  learners::actor_critic model; ///< weights of that version
};

/// The latest versions of the policy, shared by the parameter server
/// (writer) and the runners and learners (readers) of one process.
class policy_store {
public:
  /// A store for models like `initial` (version 0), keeping `history`
  /// versions (at least 1).
  policy_store(const learners::actor_critic& initial, size_t history);

  /// Publishes a new version (params and buffers of the model's sizes).
  void publish(uint64_t version, const float* params, const float* buffers)
    TROUPE_EXCLUDES(listeners_mtx_, mtx_);

  /// The newest version.
  std::shared_ptr<const policy_snapshot> latest() const TROUPE_EXCLUDES(mtx_);

  /// Version `version`, or null when it is no longer kept.
  std::shared_ptr<const policy_snapshot> at(uint64_t version) const TROUPE_EXCLUDES(mtx_);

  /// Called with each newly published version, in version order, on the
  /// publisher's thread; returns false to be removed.
  using listener = std::function<bool(const std::shared_ptr<const policy_snapshot>&)>;

  /// Calls `l` with the newest version now, then with every version
  /// published after (for readers that keep their own wait-free copy of the
  /// latest version, such as a game agent's slots).
  void subscribe(listener l) TROUPE_EXCLUDES(listeners_mtx_, mtx_);

private:
  mutable base::mutex mtx_;
  // Serializes listener calls.
  base::mutex listeners_mtx_ TROUPE_ACQUIRED_BEFORE(mtx_);
  std::vector<listener> listeners_ TROUPE_GUARDED_BY(listeners_mtx_);
  // Oldest first.
  std::deque<std::shared_ptr<const policy_snapshot>> versions_ TROUPE_GUARDED_BY(mtx_);
  size_t history_;
};

/// A policy for an environment runner: takes the newest version from `store`
/// at the first step of every batch of `steps_per_batch` steps (so each batch
/// is acted with one version) and samples actions from it with the runner's
/// generator; `deterministic` takes the mode instead (its log-probability
/// is the mode's). A model that cannot act on the observations as given (one
/// that normalizes them itself) makes the policy return an error.
policy_fn make_store_policy(std::shared_ptr<policy_store> store, size_t steps_per_batch,
                            bool deterministic = false);

/// The divergence of the newest version in `store` between two views of the
/// same observations (run.norm_diagnostics): KL of the categorical
/// distributions, or of the Gaussians (whose state-independent standard
/// deviation cancels but for the means' distance), in float64. An error for
/// a model that cannot act on the observations as given.
divergence_fn make_store_divergence(std::shared_ptr<policy_store> store);

} // namespace troupe::actors
