// IMPALA (Espeholt et al. 2018): one gradient per batch of the V-trace
// actor-critic loss (learners/losses.hpp, vtrace_loss_and_grad). The
// behavior policy mu is what acted: its log-probabilities as the runner
// recorded them, or recomputed from the acting weights when a batch has none.
// Config: [algo.impala].
#pragma once

#include "learners/algorithm.hpp"

namespace troupe::learners {

/// IMPALA's hyperparameters ([algo.impala]): V-trace's clips and the
/// loss weights (baseline_coef is the key vf_coef).
using impala_settings = vtrace_config;

/// IMPALA in the registry (learners/algorithm.cpp).
algorithm_info impala_info();

} // namespace troupe::learners
