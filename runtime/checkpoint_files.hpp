// Checkpoint files of a run: writing checkpoints/<updates>/ from the live
// cast and reading back the parts a resume needs (docs/checkpoints.md).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include <caf/all.hpp>

#include "actors/metrics.hpp"
#include "actors/parameter_server.hpp"
#include "actors/supervisor.hpp"
#include "base/error.hpp"
#include "learners/model.hpp"

namespace troupe::runtime {

/// The actors a checkpoint reads from, and what it records about the model.
struct cast_handles {
  caf::actor keeper;         ///< the statistics keeper
  caf::actor server;         ///< the parameter server
  caf::actor metrics;        ///< the metrics actor
  learners::model_spec spec; ///< the training model (no normalizer of its own)
  std::string env_id;        ///< recorded in the policy file
  std::string algo;          ///< recorded in the policy file
  bool obs_norm = false;     ///< the checkpoint's model normalizes observations
};

/// Writes <run_dir>/checkpoints/<updates>/, with the random states of `snap`,
/// through a ".tmp" folder renamed when complete (nothing half written stays).
result<std::string> write_checkpoint(caf::scoped_actor& self, const cast_handles& c,
                                     const std::string& run_dir, uint64_t run_seed,
                                     const actors::cast_snapshot& snap);

/// Removes all but the `keep` newest checkpoints of `run_dir` (keep 0: none).
void prune_checkpoints(const std::string& run_dir, size_t keep);

/// What counters.txt holds.
struct saved_counters {
  actors::metrics_counters counters;                           ///< the metrics
  std::map<std::string, std::array<uint64_t, 4>> learner_gens; ///< by learner name
};

/// Reads a checkpoint's counters.txt; errors name the path and line.
result<saved_counters> read_counters(const std::string& path);

/// Reads a checkpoint's optimizer.safetensors: the parameter server's state.
result<actors::parameter_server_state> read_optimizer(const std::string& path);

} // namespace troupe::runtime
