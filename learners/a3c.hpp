// A3C (Mnih et al. 2016): one gradient of PPO's loss at ratio 1 over the
// learner's own fresh rollout, without value clipping or advantage
// normalization (docs/training.md, "Algorithms"). Config: [algo.a3c].
#pragma once

#include "learners/algorithm.hpp"

namespace troupe::learners {

/// A3C's hyperparameters ([algo.a3c]).
struct a3c_settings {
  double gae_lambda = 0.95; ///< GAE lambda; 1: n-step returns (the paper)
  double vf_coef = 0.5;     ///< value loss weight
  double ent_coef = 0.01;   ///< entropy bonus weight (the paper 0.01)
  /// Local batch norm only: take the old log-probabilities over the batch's
  /// valid rows with their own statistics, as the learning pass normalizes,
  /// so that the ratio is 1 (docs/training.md, "Hyperparameters").
  bool local_bn_same_pass = true;
};

/// A3C in the registry (learners/algorithm.cpp).
algorithm_info a3c_info();

} // namespace troupe::learners
