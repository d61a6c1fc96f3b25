// A small game for the callback-environment tests (tests/envs, tests/actors,
// tests/runtime): a point on a line, pushed left, not at all or right
// (Discrete(3)), float64 inside, observed as (x, v) in float32. Reward
// 1 - x^2 per step; the episode terminates when |x| > 1.
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>

#include "envs/callback_env.hpp"
#include "base/rng.hpp"

namespace troupe::test {

/// The game's state and dynamics.
struct drift_game {
  double x = 0, v = 0;
  int steps = 0;               // steps of this instance, all episodes
  int nan_obs_at_step = -1;    // this instance's step whose observation is NaN
  int nan_reward_at_step = -1; // this instance's step whose reward is NaN

  void start(uint64_t seed) {
    base::rng g(seed);
    x = g.uniform(-0.5, 0.5);
    v = g.uniform(-0.05, 0.05);
  }

  void observe(float* obs) const {
    obs[0] = static_cast<float>(x);
    obs[1] = static_cast<float>(v);
  }
};

/// The game's spec: id `id`, time limit 40, state (x, v) when `with_state`.
inline envs::env_spec drift_spec(const std::string& id, bool with_state) {
  envs::env_spec s;
  s.id = id;
  s.observation_space = envs::space::box({-2.0f, -1.0f}, {2.0f, 1.0f});
  s.action_space = envs::space::discrete(3);
  s.max_episode_steps = 40;
  if (with_state)
    s.state_names = {"x", "v"};
  return s;
}

/// Callbacks over a fresh game; get_state/set_state when `with_state`.
inline envs::env_callbacks drift_callbacks(bool with_state, int nan_obs_at_step = -1,
                                           int nan_reward_at_step = -1) {
  auto game = std::make_shared<drift_game>();
  game->nan_obs_at_step = nan_obs_at_step;
  game->nan_reward_at_step = nan_reward_at_step;
  envs::env_callbacks cb;
  cb.reset = [game](uint64_t seed, float* obs) {
    game->start(seed);
    game->observe(obs);
    return status{};
  };
  cb.step = [game](const float* action, float* obs) -> result<envs::step_result> {
    auto& g = *game;
    g.v += 0.02 * (static_cast<double>(action[0]) - 1.0) - 0.01 * g.x;
    g.x += g.v;
    ++g.steps;
    g.observe(obs);
    if (g.steps == g.nan_obs_at_step)
      obs[1] = NAN;
    double reward = g.steps == g.nan_reward_at_step ? NAN : 1.0 - g.x * g.x;
    return envs::step_result{reward, std::fabs(g.x) > 1.0, false};
  };
  if (with_state) {
    cb.get_state = [game](double* values) {
      values[0] = game->x;
      values[1] = game->v;
    };
    cb.set_state = [game](const double* values, float* obs) {
      game->x = values[0];
      game->v = values[1];
      game->observe(obs);
      return status{};
    };
  }
  return cb;
}

/// Registers the drift game under `id` for the lifetime of the object.
class scoped_drift_env {
public:
  scoped_drift_env(std::string id, bool with_state) : id_(std::move(id)) {
    ok_ = envs::register_env(envs::callback_registration(
                               drift_spec(id_, with_state),
                               [with_state] { return drift_callbacks(with_state); }))
            .ok();
  }
  ~scoped_drift_env() {
    if (ok_)
      (void)envs::unregister_env(id_);
  }
  scoped_drift_env(const scoped_drift_env&) = delete;
  scoped_drift_env& operator=(const scoped_drift_env&) = delete;

  /// Whether the registration succeeded.
  bool registered() const { return ok_; }

private:
  std::string id_;
  bool ok_ = false;
};

} // namespace troupe::test
