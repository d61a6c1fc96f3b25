// Catcher (examples/catcher.hpp) as training sees it: its description, which
// examples/game_loop.cpp (the game drives) registers alone, and a
// troupe::environment, which examples/simulator.cpp (the runtime drives)
// registers with it.
#pragma once

#include <memory>

#include <troupe/troupe.hpp>

#include "catcher.hpp"

namespace catcher {

/// One lane as an environment: training resets and steps it.
class environment : public troupe::environment {
public:
  void reset(uint64_t seed, float* obs) override {
    lane_.gen.s = seed;
    lane_.reset();
    lane_.observe(obs);
  }
  troupe::status step(const float* action, float* obs, double& reward, bool& terminated,
                      bool& truncated) override {
    const int a = static_cast<int>(action[0]);
    if (a < 0 || a >= num_actions)
      return troupe::error(troupe::errc::invalid_argument,
                           "Catcher-v0 step: action must be 0, 1 or 2, got " +
                             std::to_string(action[0]));
    bool over = false;
    reward = lane_.step(a, over);
    terminated = over && lane_.fruits >= fruits_per_round;
    truncated = over && !terminated;
    lane_.observe(obs);
    return {};
  }

private:
  lane lane_;
};

/// The id, spaces and time limit of Catcher-v0.
inline troupe::env_description description() {
  troupe::env_description d;
  d.id = "Catcher-v0";
  d.obs_low = {-1, -2, -1, -1};
  d.obs_high = {1, 2, 1, 1};
  d.num_actions = num_actions;
  d.max_episode_steps = max_frames;
  return d;
}

/// Registers Catcher-v0, so that a config's env.id = "Catcher-v0" trains it.
inline troupe::status register_catcher() {
  return troupe::register_environment(description(),
                                      [] { return std::make_unique<environment>(); });
}

/// Registers Catcher-v0's spaces alone, for a game that steps its lanes itself.
inline troupe::status register_catcher_spaces() {
  return troupe::register_environment_spaces(description());
}

} // namespace catcher
