#include "actors/collect_protocol.hpp"

namespace troupe::actors {

void send_moments(caf::event_based_actor* self, const caf::actor& keeper,
                  const std::string& stream, const std::string& sender,
                  const kernels::moments& m) {
  self->send(keeper, moments_delta{stream, sender, m.count, m.mean, m.m2});
}

trajectory_batch shaped_batch(std::string runner, std::string env_id, uint64_t sequence,
                              size_t num_envs, size_t steps, size_t obs_dim,
                              size_t action_dim) {
  trajectory_batch b;
  b.runner = std::move(runner);
  b.env_id = std::move(env_id);
  b.sequence = sequence;
  b.num_envs = num_envs;
  b.steps = steps;
  b.obs_dim = obs_dim;
  b.action_dim = action_dim;
  const size_t rows = steps * num_envs;
  b.observations.resize((steps + 1) * num_envs * obs_dim);
  b.actions.resize(rows * action_dim);
  b.behavior_logp.resize(rows);
  b.rewards.resize(rows);
  b.terminated.resize(rows);
  b.truncated.resize(rows);
  b.autoreset.resize(rows);
  return b;
}

void count_batch(env_runner_status& status, const trajectory_batch& b,
                 uint64_t non_finite) noexcept {
  status.batches += 1;
  status.env_steps += b.steps * b.num_envs;
  status.episodes += b.episode_returns.size();
  status.non_finite += non_finite;
}

} // namespace troupe::actors
