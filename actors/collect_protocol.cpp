#include "actors/collect_protocol.hpp"

namespace troupe::actors {

void send_moments(caf::event_based_actor* self, const caf::actor& keeper,
                  const std::string& stream, const std::string& sender,
                  const kernels::moments& m) {
  self->send(keeper, moments_delta{stream, sender, m.count, m.mean, m.m2});
}

void count_batch(env_runner_status& status, const trajectory_batch& b,
                 uint64_t non_finite) noexcept {
  status.batches += 1;
  status.env_steps += b.steps * b.num_envs;
  status.episodes += b.episode_returns.size();
  status.non_finite += non_finite;
}

} // namespace troupe::actors
