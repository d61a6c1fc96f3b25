// PPO (Schulman et al. 2017, CleanRL's ppo.py): generalized advantage
// estimation over the batch, then update_epochs passes over it in
// num_minibatches shuffled minibatches, one gradient of the clipped
// surrogate, the (optionally clipped) value loss and the entropy bonus per
// minibatch (learners/losses.hpp, ppo_loss_and_grad). Config: [algo.ppo].
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "learners/algorithm.hpp"

namespace troupe::learners {

/// PPO's hyperparameters ([algo.ppo]; CleanRL's defaults).
struct ppo_settings {
  ppo_config loss;             ///< clip_coef, vf_coef, ent_coef, clip_vloss, norm_adv
  double gae_lambda = 0.95;    ///< GAE lambda
  size_t num_minibatches = 4;  ///< minibatches per epoch
  size_t update_epochs = 4;    ///< passes over each batch
  /// Local batch norm: the ratio's old log-probability and the value clip's
  /// old value are taken over each minibatch with the acting weights and the
  /// minibatch's own statistics, as the learning pass normalizes (true), or
  /// from the acting pass with running statistics (false: the two sides of
  /// the ratio then normalize differently). No effect in other modes.
  bool local_bn_same_pass = true;
};

/// PPO in the registry (learners/algorithm.cpp).
algorithm_info ppo_info();

/// A batch's GAE advantages and returns over its valid rows (reset steps are
/// none), gathered row by row into PPO minibatches. PPO and A3C learn from it.
class advantage_rows {
public:
  /// GAE of `batch` with the values of `acting` (acting.values: steps + 1
  /// rows); `old_logp` [rows] are the log-probabilities the ratio is taken
  /// against. Fills index() with the valid rows in order.
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
