// IMPALA (Espeholt et al. 2018): one gradient per batch of the V-trace
// actor-critic loss, with the behavior policy's log-probabilities as the
// runner recorded them or recomputed (docs/learners.md). Config: [algo.impala].
#pragma once

#include "learners/algorithm.hpp"

namespace troupe::learners {

/// IMPALA's hyperparameters ([algo.impala]).
struct impala_settings {
  /// rho_bar, c_bar, pg_rho_bar, ent_coef, vf_coef (baseline_coef), policy_clip
  vtrace_config loss;
  /// Local batch norm only: take mu's log-probabilities again with the acting
  /// weights and the batch's own statistics, as the learning pass normalizes
  /// (docs/training.md, "Hyperparameters", says when the recorded ones stay).
  bool local_bn_same_pass = true;
};

/// IMPALA in the registry (learners/algorithm.cpp).
algorithm_info impala_info();

} // namespace troupe::learners
