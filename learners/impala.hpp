// IMPALA (Espeholt et al. 2018): one gradient per batch of the V-trace
// actor-critic loss (learners/losses.hpp, vtrace_loss_and_grad). The
// behavior policy mu is what acted: its log-probabilities as the runner
// recorded them, or recomputed from the acting weights when a batch has none
// or, with local batch norm, so that mu is normalized as the learning pass
// normalizes. Config: [algo.impala].
#pragma once

#include "learners/algorithm.hpp"

namespace troupe::learners {

/// IMPALA's hyperparameters ([algo.impala]).
struct impala_settings {
  vtrace_config loss; ///< rho_bar, c_bar, pg_rho_bar, ent_coef, vf_coef (baseline_coef)
  /// Local batch norm: mu's log-probabilities are taken again over the whole
  /// batch (bootstrap rows included) with the acting weights and the batch's
  /// own statistics, as the learning pass normalizes (true), or as recorded
  /// when acting, with running statistics (false: pi/mu then differs from 1
  /// for unchanged weights). Not for a batch acted with several versions, nor
  /// when the acting version is no longer kept: those keep the recorded ones.
  /// No effect in other modes.
  bool local_bn_same_pass = true;
};

/// IMPALA in the registry (learners/algorithm.cpp).
algorithm_info impala_info();

} // namespace troupe::learners
