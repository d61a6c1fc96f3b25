// Resume: finding the newest checkpoint of a run folder that reads back whole
// and loading what the cast continues from, all read and checked before
// anything in the folder changes (docs/training.md, "Resume").
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "actors/env_runner.hpp"
#include "actors/log.hpp"
#include "actors/metrics.hpp"
#include "actors/parameter_server.hpp"
#include "base/error.hpp"
#include "learners/model.hpp"

namespace troupe::runtime {

/// Where a run starts: from nothing (a new run, or a run folder killed before
/// its first complete checkpoint) or from a checkpoint.
struct resume_point {
  std::string checkpoint;         ///< the checkpoint folder; empty: start fresh
  actors::metrics_counters start; ///< counters to continue from
  std::map<std::string, std::array<uint64_t, 4>> learner_gens; ///< by learner name
  /// Saved runner states by runner name (shared with the runner factory).
  std::shared_ptr<std::map<std::string, actors::env_runner_state>> runners =
    std::make_shared<std::map<std::string, actors::env_runner_state>>();
  std::optional<actors::parameter_server_state> server; ///< set with a checkpoint

  /// Salt for the seeds of a resumed run, so that it does not repeat the
  /// random streams of the run it continues (0 for a fresh start).
  uint64_t seed_salt() const noexcept { return start.updates * 0x9e3779b97f4a7c15ull; }
};

/// Reads the newest complete checkpoint of `resume_dir` for a model like
/// `spec` (a fresh start when there is none, an error when all fail or the
/// model differs), logging each damaged one to `log` (docs/design-notes.md,
/// "runtime/").
result<resume_point> read_resume_point(const std::string& resume_dir,
                                       const learners::model_spec& spec,
                                       const std::string& env_id,
                                       const actors::log_sink& log = {});

/// Prepares a resumed run folder to continue from `point`: checkpoints/
/// exists, and the metrics rows after its update count are dropped
/// (metrics.csv kept under `metrics_columns`, see trim_metrics).
status prepare_resumed_folder(const std::string& run_dir, const resume_point& point,
                              const std::vector<std::string>& metrics_columns);

} // namespace troupe::runtime
