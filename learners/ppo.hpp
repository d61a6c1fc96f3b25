// PPO (Schulman et al. 2017, CleanRL's ppo.py): GAE over the batch, then
// update_epochs passes of num_minibatches shuffled minibatches, one gradient
// each (docs/training.md, "Algorithms"). Config: [algo.ppo].
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "learners/algorithm.hpp"

namespace troupe::learners {

/// PPO's hyperparameters ([algo.ppo]; CleanRL's defaults).
struct ppo_settings {
  ppo_config loss;            ///< clip_coef, vf_coef, ent_coef, clip_vloss, norm_adv
  double gae_lambda = 0.95;   ///< GAE lambda
  size_t num_minibatches = 4; ///< minibatches per epoch
  size_t update_epochs = 4;   ///< passes over each batch
  /// Local batch norm only: take the ratio's old log-probabilities and the
  /// value clip's old values over each minibatch with the acting weights and
  /// its own statistics, as the learning pass normalizes.
  bool local_bn_same_pass = true;
};

/// PPO in the registry (learners/algorithm.cpp).
algorithm_info ppo_info();

/// A batch's GAE advantages and returns over its valid rows (reset steps are
/// none), gathered row by row into the minibatches PPO and A3C learn from.
class advantage_rows {
public:
  /// GAE of `batch` with the values of `acting` (steps + 1 rows), keeping
  /// `old_logp` [rows] for the ratio and filling index() with the valid rows.
  void compute(const rollout_view& batch, const behavior_outputs& acting,
               const float* old_logp, double gamma, double lambda);

  /// The valid rows (shuffle it to draw minibatches).
  std::vector<size_t>& index() noexcept { return index_; }

  /// Rows index()[lo, hi) as a minibatch (valid until the next gather).
  ppo_batch<float> gather(const rollout_view& batch, bool discrete, size_t lo, size_t hi);

private:
  const behavior_outputs* acting_ = nullptr;
  const float* old_logp_ = nullptr;
  std::vector<float> adv_, ret_;
  std::vector<uint8_t> valid_;
  std::vector<size_t> index_;
  std::vector<float> obs_, box_, logp_, mb_adv_, mb_ret_, val_;
  std::vector<int64_t> act_;
};

/// Valid rows (transitions, not reset steps) of a batch.
size_t count_valid_rows(const rollout_view& batch);

} // namespace troupe::learners
