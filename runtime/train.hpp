// Launching a training run from a resolved config: the run folder, the cast
// of actors (statistics keeper, parameter server, learners with their
// environment runners, metrics), checkpoints and resume. `troupe train`
// (runtime/cli/cmd_train.cpp) is a thin wrapper around run_training().
#pragma once

#include <string>

#include "kernels/error.hpp"
#include "runtime/config.hpp"

namespace troupe::runtime {

/// What a training run did.
struct training_result {
  std::string run_dir;        ///< the run folder
  uint64_t env_steps = 0;     ///< environment steps learned from
  uint64_t updates = 0;       ///< batches learned
  double return_mean_100 = 0; ///< mean of the last 100 episode returns (NaN: none)
  bool interrupted = false;   ///< stopped by SIGINT or SIGTERM
};

/// Trains with `cfg`. With `resume_dir`, continues the run in that folder
/// from its newest complete checkpoint; otherwise creates
/// <run.output_dir>/<run.name>-<YYYYmmdd-HHMMSS>/.
result<training_result> run_training(const config& cfg,
                                     const std::string& resume_dir = {});

} // namespace troupe::runtime
