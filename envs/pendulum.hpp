// Pendulum-v1 with Gymnasium 1.x's dynamics (docs/environments.md, "Semantics").
#pragma once

#include <algorithm>
#include <cmath>

#include "envs/model.hpp"

namespace troupe::envs {

/// The Pendulum-v1 model. State: (th, thdot).
struct pendulum {
  static constexpr double max_speed = 8.0;
  static constexpr float max_torque = 2.0f;
  static constexpr double dt = 0.05;
  static constexpr double g = 10.0;
  static constexpr double m = 1.0;
  static constexpr double l = 1.0;

  double th = 0, thdot = 0;

  /// Id, spaces (Box(-2, 2, (1,)); Box([-1 -1 -8], [1 1 8])) and time limit 200.
  static env_spec make_spec();

  /// Uniform th in [-pi, pi), thdot in [-1, 1).
  void reset(rng& r) noexcept {
    th = r.uniform(-M_PI, M_PI);
    thdot = r.uniform(-1.0, 1.0);
  }

  /// ((x + pi) mod 2 pi) - pi with numpy's floored remainder.
  static double angle_normalize(double x) noexcept {
    const double period = 2 * M_PI;
    double mod = std::fmod(x + M_PI, period);
    if (mod != 0.0) {
      if (mod < 0.0)
        mod += period;
    } else {
      mod = 0.0;
    }
    return mod - M_PI;
  }

  /// One step with torque action[0] clipped to [-2, 2].
  model_step step(const float* action) noexcept {
    // The torque stays float32 as in Gymnasium (np.clip of a float32 array),
    // and products of it with Python floats are float32 (NumPy 2 promotion).
    float u = std::min(std::max(action[0], -max_torque), max_torque);
    double normalized = angle_normalize(th);
    float torque_cost = 0.001f * (u * u);
    double costs =
      normalized * normalized + 0.1 * (thdot * thdot) + static_cast<double>(torque_cost);
    float torque_term = 3.0f * u; // 3 / (m l^2) * u
    double newthdot =
      thdot + (3 * g / (2 * l) * std::sin(th) + static_cast<double>(torque_term)) * dt;
    newthdot = std::min(std::max(newthdot, -max_speed), max_speed);
    double newth = th + newthdot * dt;
    th = newth;
    thdot = newthdot;
    return {-costs, false};
  }

  /// (cos th, sin th, thdot) as float32.
  void observe(float* obs) const noexcept {
    obs[0] = static_cast<float>(std::cos(th));
    obs[1] = static_cast<float>(std::sin(th));
    obs[2] = static_cast<float>(thdot);
  }

  /// (th, thdot).
  void get_state(double* out) const noexcept {
    out[0] = th;
    out[1] = thdot;
  }

  /// Sets (th, thdot).
  void set_state(const double* in) noexcept {
    th = in[0];
    thdot = in[1];
  }
};

} // namespace troupe::envs
