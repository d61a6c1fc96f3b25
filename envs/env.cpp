#include "envs/env.hpp"

namespace troupe::envs {

std::vector<float> env::reset(uint64_t seed) {
  std::vector<float> obs(spec().observation_space.size());
  reset(seed, obs.data());
  return obs;
}

result<transition> env::step(const std::vector<float>& action) {
  const auto& s = spec();
  if (action.size() != s.action_space.size())
    return make_error(errc::dimension_mismatch,
                      "{}: an action has {} value(s) for {}, got {}", s.id,
                      s.action_space.size(), s.action_space.describe(), action.size());
  transition t;
  t.obs.resize(s.observation_space.size());
  auto r = step(action.data(), t.obs.data());
  if (!r)
    return r.err();
  t.reward = r->reward;
  t.terminated = r->terminated;
  t.truncated = r->truncated;
  return t;
}

} // namespace troupe::envs
