// The environment runner actor: steps a vector of environments with a policy
// and streams fixed-length trajectory batches to a consumer (a learner).
//
// Each batch (actors/messages.hpp, trajectory_batch) holds T steps of N
// environments with the policy version and statistics version it was made
// with. With a statistics view, observations are normalized with the view's
// snapshot of the batch's start, (x - mean) / sqrt(var + eps) clipped to
// +-obs_clip; with a statistics keeper, the moments of each batch's raw
// observations go to the keeper as one delta. A non-finite observation or
// reward is counted and logged with the env id, and that batch's moments are
// never sent to the keeper.
//
// Messages it handles:
//   (collect_atom, uint64_t n) -> uint64_t   collect and send n batches, then
//                                            reply with the number sent
//   (status_atom)              -> env_runner_status
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <caf/all.hpp>

#include "actors/log.hpp"
#include "actors/messages.hpp"
#include "envs/vector_env.hpp"
#include "learners/stats_view.hpp"

namespace troupe::actors {

/// A policy: writes actions [num_envs x action_dim] for observations
/// [num_envs x obs_dim] and returns the version of the policy it used.
using policy_fn =
  std::function<uint64_t(const float* observations, size_t num_envs, float* actions)>;

/// A policy that draws uniformly random valid actions (version 0), seeded.
policy_fn make_random_policy(const envs::space& action_space, uint64_t seed);

/// Settings of an environment runner.
struct env_runner_options {
  std::string name = "env_runner";   ///< named in batches, logs and deltas
  uint64_t seed = 0;                 ///< environment i is seeded with seed + i
  size_t steps_per_batch = 128;      ///< T
  std::string stats_stream = "obs";  ///< keeper stream of observation moments
  double obs_epsilon = 1e-8;         ///< added to the variance when normalizing
  double obs_clip = 10.0;            ///< normalized values clipped to +-this; 0: no clip
  double obs_scale = 1.0;            ///< raw observations are multiplied by this first
                                     ///< (heterogeneous-worker experiments)
  log_sink log;                      ///< problem log; default stderr
};

/// Spawns an environment runner over `env` (reset with opts.seed at start).
/// `keeper` (may be invalid) receives observation moment deltas; `view` (may
/// be null) normalizes observations. Batches go to `consumer`.
caf::actor spawn_env_runner(caf::actor_system& sys, env_runner_options opts,
                            std::shared_ptr<envs::vector_env> env, policy_fn policy,
                            caf::actor consumer, caf::actor keeper = {},
                            std::shared_ptr<learners::stats_view> view = nullptr);

} // namespace troupe::actors
