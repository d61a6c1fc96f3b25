// MountainCar-v0 (Moore 1990) with Gymnasium 1.x's dynamics
// (docs/environments.md, "Semantics").
#pragma once

#include <algorithm>
#include <cmath>

#include "envs/model.hpp"

namespace troupe::envs {

/// The MountainCar-v0 model. State: (position, velocity).
struct mountain_car {
  static constexpr double min_position = -1.2;
  static constexpr double max_position = 0.6;
  static constexpr double max_speed = 0.07;
  static constexpr double goal_position = 0.5;
  static constexpr double goal_velocity = 0.0;
  static constexpr double force = 0.001;
  static constexpr double gravity = 0.0025;

  double position = 0, velocity = 0;

  /// Id, spaces (Discrete(3); Box([-1.2 -0.07], [0.6 0.07])) and time limit 200.
  static env_spec make_spec();

  /// Position uniform in [-0.6, -0.4), velocity 0.
  void reset(rng& r) noexcept {
    position = r.uniform(-0.6, -0.4);
    velocity = 0.0;
  }

  /// One step: push left (0), none (1) or right (2).
  model_step step(const float* action) noexcept {
    double push = static_cast<double>(static_cast<int>(action[0]) - 1);
    velocity += push * force + std::cos(3 * position) * (-gravity);
    velocity = std::min(std::max(velocity, -max_speed), max_speed);
    position += velocity;
    position = std::min(std::max(position, min_position), max_position);
    if (position == min_position && velocity < 0)
      velocity = 0.0;
    bool terminated = position >= goal_position && velocity >= goal_velocity;
    return {-1.0, terminated};
  }

  /// (position, velocity) as float32.
  void observe(float* obs) const noexcept {
    obs[0] = static_cast<float>(position);
    obs[1] = static_cast<float>(velocity);
  }

  /// (position, velocity).
  void get_state(double* out) const noexcept {
    out[0] = position;
    out[1] = velocity;
  }

  /// Sets (position, velocity).
  void set_state(const double* in) noexcept {
    position = in[0];
    velocity = in[1];
  }
};

} // namespace troupe::envs
