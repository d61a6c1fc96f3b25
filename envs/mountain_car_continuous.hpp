// MountainCarContinuous-v0 with Gymnasium 1.x's dynamics (docs/environments.md,
// "Semantics"), including its float32 state after a step, which `narrow` tracks.
#pragma once

#include <cmath>

#include "envs/model.hpp"

namespace troupe::envs {

/// The MountainCarContinuous-v0 model. State: (position, velocity).
struct mountain_car_continuous {
  static constexpr double min_position = -1.2;
  static constexpr double max_position = 0.6;
  static constexpr double max_speed = 0.07;
  static constexpr double goal_position = 0.45;
  static constexpr double goal_velocity = 0.0;
  static constexpr double power = 0.0015;

  double position = 0, velocity = 0;
  bool narrow = false; // state holds float32 values typed float32, as after a step

  /// Id, spaces (Box(-1, 1, (1,)); Box([-1.2 -0.07], [0.6 0.07])), limit 999.
  static env_spec make_spec();

  /// Position uniform in [-0.6, -0.4), velocity 0 (float64, as Gymnasium).
  void reset(rng& r) noexcept {
    position = r.uniform(-0.6, -0.4);
    velocity = 0.0;
    narrow = false;
  }

  /// One step with force action[0] clipped to [-1, 1].
  model_step step(const float* action) noexcept {
    const float a = action[0];
    // force * power: float32 when the action passes through the clip as a
    // float32, a Python float when the clip replaced it by a bound.
    const bool clipped = a < -1.0f || a > 1.0f;
    double gravity_term =
      0.0025 * std::cos(narrow ? static_cast<double>(3.0f * static_cast<float>(position))
                               : 3 * position);
    double accel;
    if (clipped) {
      accel = (a < 0 ? -1.0 : 1.0) * power - gravity_term;
    } else {
      float force_term = a * static_cast<float>(power);
      accel = static_cast<double>(force_term - static_cast<float>(gravity_term));
    }
    if (narrow)
      velocity =
        static_cast<double>(static_cast<float>(velocity) + static_cast<float>(accel));
    else
      velocity = velocity + accel;
    if (velocity > max_speed)
      velocity = max_speed;
    if (velocity < -max_speed)
      velocity = -max_speed;
    if (narrow)
      position =
        static_cast<double>(static_cast<float>(position) + static_cast<float>(velocity));
    else
      position = position + velocity;
    if (position > max_position)
      position = max_position;
    if (position < min_position)
      position = min_position;
    if (position == min_position && velocity < 0)
      velocity = 0.0;
    bool terminated = position >= goal_position && velocity >= goal_velocity;
    double reward = terminated ? 100.0 : 0.0;
    reward -= std::pow(static_cast<double>(a), 2.0) * 0.1;
    position = static_cast<double>(static_cast<float>(position));
    velocity = static_cast<double>(static_cast<float>(velocity));
    narrow = true;
    return {reward, terminated};
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

  /// Sets (position, velocity) as float64 values.
  void set_state(const double* in) noexcept {
    position = in[0];
    velocity = in[1];
    narrow = false;
  }

  /// After set_state of a saved state: after the episode's first step the
  /// state is float32, as step() leaves it.
  void resume(int elapsed_steps) noexcept { narrow = elapsed_steps > 0; }
};

} // namespace troupe::envs
