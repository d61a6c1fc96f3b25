// An environment implemented by a game or simulator through callbacks, the
// adapter that the C++ embedding API and the C API both build on (ownership,
// threads, validation and state: docs/environments.md, "Registering your own
// environment").
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "envs/env.hpp"
#include "envs/registry.hpp"
#include "base/rng.hpp"

namespace troupe::envs {

/// The callbacks of one instance of a game's environment; the game's objects
/// they refer to must outlive the environment that owns them.
struct env_callbacks {
  /// Required: starts an episode drawn from `seed` and writes its first
  /// observation (spec.observation_space.size() floats) into `obs`.
  std::function<status(uint64_t seed, float* obs)> reset;

  /// Required: applies `action` (spec.action_space.size() floats, inside the
  /// space) and writes the next observation into `obs`; returns the reward
  /// and whether the episode terminated (or truncated on the game's own).
  std::function<result<step_result>(const float* action, float* obs)> step;

  /// Optional, with set_state: writes the game's spec.state_dim() float64
  /// state values into `values`.
  std::function<void(double* values)> get_state;

  /// Optional, with get_state: replaces the game's state with `values`
  /// (spec.state_dim() finite values) and writes its observation into `obs`
  /// (never null).
  std::function<status(const double* values, float* obs)> set_state;
};

/// An `env` whose dynamics are a game's callbacks, called by one thread at a
/// time (different instances may run concurrently and must not share
/// unsynchronized state).
class callback_env final : public env {
public:
  /// An environment of `spec` over `callbacks`, or errc::invalid_argument
  /// naming the id for an invalid spec, a missing reset or step, or state
  /// callbacks without their pair or without spec.state_names.
  static result<std::unique_ptr<callback_env>> make(env_spec spec,
                                                    env_callbacks callbacks);

  const env_spec& spec() const noexcept override { return spec_; }
  void reset(uint64_t seed, float* obs) override;
  void reset(float* obs) override;
  result<step_result> step(const float* action, float* obs) override;
  bool can_save_state() const noexcept override;
  std::vector<double> state() const override;
  status set_state(const std::vector<double>& values, float* obs = nullptr) override;
  int elapsed_steps() const noexcept override { return elapsed_; }
  void set_elapsed_steps(int steps) noexcept override { elapsed_ = steps; }
  std::array<uint64_t, 4> rng_state() const noexcept override { return seeds_.state(); }
  status set_rng_state(const std::array<uint64_t, 4>& words) override;

private:
  callback_env(env_spec spec, env_callbacks callbacks);

  // Draws the episode's seed and calls the reset callback.
  void start_episode(float* obs);
  // The first non-finite observation value as an error, or ok.
  status check_observation(const float* obs, const char* call) const;

  env_spec spec_;
  env_callbacks callbacks_;
  base::rng seeds_;
  std::vector<float> scratch_;       // clipped actions, set_state's observation
  std::optional<error> reset_error_; // a failed reset, reported by the next step
  uint64_t episode_ = 0;             // episodes started (1 after the first reset)
  uint64_t steps_ = 0;               // steps taken by this instance, all episodes
  uint64_t episode_seed_ = 0;        // the seed the current episode started from
  int elapsed_ = 0;
  bool ready_ = false;
};

/// A registration for register_env whose environments are callback_envs of
/// `spec` over the callbacks `make_callbacks` returns, called once per
/// instance so that each instance gets its own game state.
registration callback_registration(env_spec spec,
                                   std::function<env_callbacks()> make_callbacks);

} // namespace troupe::envs
