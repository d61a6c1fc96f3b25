// Building the cast of a training run from a resolved config: the model's
// shape, the supervisor's plan (statistics keeper, parameter server, metrics,
// learners with their budgets) and the factory of the actors in the runner
// slots: environment runners by default, or, per learner, actors of the
// caller's own (the seam for a game that feeds transitions itself).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "actors/policy_store.hpp"
#include "actors/supervisor.hpp"
#include "envs/registry.hpp"
#include "base/error.hpp"
#include "learners/algorithm.hpp"
#include "learners/backend.hpp"
#include "learners/model.hpp"
#include "runtime/config.hpp"
#include "runtime/resume.hpp"

namespace troupe::runtime {

/// The training model for `env` as the config describes it (no observation
/// normalizer of its own: runners hand the learners normalized observations).
result<learners::model_spec> model_spec_for(const config& cfg, const envs::env_spec& env);

/// The algorithm a learner runs: algo.name, algo.gamma and the keys of the
/// section [algo.<name>].
result<learners::algorithm_settings> algorithm_settings_for(const config& cfg);

/// Makes the configured algorithm once and checks that the run's batches
/// meet its requirements (algo.num_steps x env.num_envs transitions); the
/// error names the config file, the algorithm and the numbers.
status check_algorithm(const config& cfg, const learners::model_spec& spec);

/// The slowdown of runner slot `slot` (learner l's runner r is slot
/// l x algo.runners_per_learner + r): env.slowdown for the last
/// env.slow_runners slots of the run's layout, 1 for the others.
double runner_slowdown(const config& cfg, uint64_t slot);

/// algo.learner_threads with 0 resolved: 2 for the only learner of a sync run
/// in one process on the CPU, without batch norm, with 2 or more hardware
/// threads, whose runners are the runtime's own (`own_runners`: no runner
/// factories, so no game or remote client keeps acting meanwhile): they wait
/// while it learns, so a core is free. Else 1.
unsigned learner_threads_for(const config& cfg, const learners::model_spec& spec,
                             learners::device_kind device, bool own_runners);

/// What the factory of a runner slot gets: which slot, its learner, and what
/// an environment runner in that slot would have been given.
struct runner_slot {
  actors::runner_request request; ///< learner, index, restarts, name, consumer
                                  ///< (the learner actor), keeper
  size_t slot = 0;                ///< over all learners: learner * runners + index
  size_t envs = 0;                ///< environments the slot stands for
  size_t steps_per_batch = 0;     ///< steps per environment in one batch (algo.num_steps)
  uint64_t seed = 0;              ///< the seed an environment runner would get
  std::shared_ptr<actors::policy_store> store; ///< the newest policy versions
  learners::model_spec spec; ///< the model's shape (obs_dim, action space)
  bool obs_norm = false;     ///< observations are normalized with the keeper's "obs"
  double obs_epsilon = 1e-8; ///< normalization epsilon (model.obs_norm_eps)
  double obs_clip = 10.0;    ///< normalization clip (model.obs_norm_clip)
  std::optional<actors::env_runner_state> saved; ///< resume: its saved state, if any
  actors::log_sink log;                          ///< the run's log (cast_options::log)
};

/// Spawns the actor that stands in a runner slot in place of an environment
/// runner. The learner (slot.request.consumer) talks to it as to an
/// environment runner (actors/env_runner.hpp): (collect_atom, uint64_t n) ->
/// uint64_t asks it to send n trajectory_batch messages of
/// slot.steps_per_batch steps of slot.envs environments to the learner and
/// reply with the number sent; (state_atom) -> env_runner_state is taken for
/// checkpoints; (status_atom) -> env_runner_status. With slot.obs_norm it
/// sends the moments of its raw observations to the keeper
/// (slot.request.keeper) as an environment runner does, and normalizes with a
/// view from actors::subscribe_view. Returns an invalid actor when it cannot
/// (logging why), which the supervisor counts as the slot's failure; a
/// replacement is asked for with the next `restarts` number.
using runner_slot_factory =
  std::function<caf::actor(caf::actor_system& sys, const runner_slot& slot)>;

/// Choices of the caller beyond the config.
struct cast_options {
  /// Per learner (by index): the factory of its runner slots; a learner
  /// without an entry, or with an empty one, gets environment runners.
  std::vector<runner_slot_factory> runner_factories;
  /// Every actor's log lines and the runner slots' problems (the session
  /// sets it from session_options::log); empty: nowhere.
  actors::log_sink log;
  /// The metrics actor logs a progress line about once a second instead of
  /// a line per row (session_options::progress_line).
  bool progress_line = false;
};

/// The run's plan for the supervisor, with what its checkpoints record.
struct cast_build {
  actors::cast_plan plan;    ///< what the supervisor spawns
  learners::model_spec spec; ///< the training model
  std::string env_id;        ///< the environment
  std::string algo;          ///< algo.name
  bool obs_norm = false;     ///< model.obs_norm
};

/// Builds the plan of a run in `run_dir` continuing from `resume` on
/// `device`. The runner factory it holds spawns into `sys`, which must
/// outlive the supervisor.
cast_build build_cast(caf::actor_system& sys, const config& cfg,
                      const learners::model_spec& spec, const envs::env_spec& env,
                      learners::device_kind device, const std::string& run_dir,
                      const resume_point& resume, const cast_options& options);

} // namespace troupe::runtime
