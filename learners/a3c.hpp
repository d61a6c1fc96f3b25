// A3C (Mnih et al. 2016): advantage actor-critic on the learner's own fresh
// rollout. n-step advantages (GAE with gae_lambda = 1 gives the paper's
// n-step returns), then one gradient over the whole batch of the policy
// gradient, the value loss and the entropy bonus: PPO's loss at ratio 1
// (old log-probabilities from the current weights, normalized as the
// learning pass normalizes), without value clipping or advantage
// normalization. Config: [algo.a3c].
#pragma once

#include "learners/algorithm.hpp"

namespace troupe::learners {

/// A3C's hyperparameters ([algo.a3c]).
struct a3c_settings {
  double gae_lambda = 0.95; ///< GAE lambda; 1: n-step returns (the paper)
  double vf_coef = 0.5;    ///< value loss weight
  double ent_coef = 0.01;  ///< entropy bonus weight (the paper 0.01)
  /// Local batch norm: the old log-probabilities (the loss's ratio, 1 by
  /// design) are taken over the batch's valid rows with their own
  /// statistics, as the learning pass normalizes (true), or from a pass with
  /// running statistics (false: the ratio then differs from 1 and the
  /// surrogate's clip can zero rows' gradients). No effect in other modes.
  bool local_bn_same_pass = true;
};

/// A3C in the registry (learners/algorithm.cpp).
algorithm_info a3c_info();

} // namespace troupe::learners
