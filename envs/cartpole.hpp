// CartPole-v1 (Barto, Sutton and Anderson 1983) with Gymnasium 1.x's dynamics
// (docs/environments.md, "Semantics"), and the template for adding an
// environment (docs/environments.md, "Adding an environment").
#pragma once

#include <cmath>

#include "envs/model.hpp"

namespace troupe::envs {

/// The CartPole-v1 model. State: (x, x_dot, theta, theta_dot).
struct cartpole {
  static constexpr double gravity = 9.8;
  static constexpr double masscart = 1.0;
  static constexpr double masspole = 0.1;
  static constexpr double total_mass = masspole + masscart;
  static constexpr double length = 0.5; // half the pole's length
  static constexpr double polemass_length = masspole * length;
  static constexpr double force_mag = 10.0;
  static constexpr double tau = 0.02;
  static constexpr double theta_threshold = 12 * 2 * M_PI / 360;
  static constexpr double x_threshold = 2.4;

  double x = 0, x_dot = 0, theta = 0, theta_dot = 0;
  bool terminated_before = false; // Gymnasium's steps_beyond_terminated is set

  /// Id, spaces (Discrete(2); Box of 4 with bounds 4.8, f32 max, 0.419, f32
  /// max) and time limit 500.
  static env_spec make_spec();

  /// Uniform initial state in [-0.05, 0.05) for each of the four values.
  void reset(rng& r) noexcept {
    x = r.uniform(-0.05, 0.05);
    x_dot = r.uniform(-0.05, 0.05);
    theta = r.uniform(-0.05, 0.05);
    theta_dot = r.uniform(-0.05, 0.05);
    terminated_before = false;
  }

  /// Gymnasium's Euler update of (x, x_dot, theta, theta_dot) under `force`,
  /// given sin(theta) and cos(theta) (libm's, or envs/fast_math.hpp's in the
  /// vectorized kernel of envs/cartpole_vector.cpp).
  static void euler_update(double force, double sintheta, double costheta, double& x,
                           double& x_dot, double& theta, double& theta_dot) noexcept {
    // Same operations in the same order as Gymnasium, so that the float64
    // state matches bit for bit where sin and cos match Python's.
    double temp =
      (force + polemass_length * (theta_dot * theta_dot) * sintheta) / total_mass;
    double thetaacc =
      (gravity * sintheta - costheta * temp) /
      (length * (4.0 / 3.0 - masspole * (costheta * costheta) / total_mass));
    double xacc = temp - polemass_length * thetaacc * costheta / total_mass;
    x = x + tau * x_dot;
    x_dot = x_dot + tau * xacc;
    theta = theta + tau * theta_dot;
    theta_dot = theta_dot + tau * thetaacc;
  }

  /// One Euler step with the force of action 0 (left) or 1 (right).
  model_step step(const float* action) noexcept {
    double force = action[0] == 1.0f ? force_mag : -force_mag;
    euler_update(force, std::sin(theta), std::cos(theta), x, x_dot, theta, theta_dot);
    bool terminated = x < -x_threshold || x > x_threshold || theta < -theta_threshold ||
                      theta > theta_threshold;
    double reward = 1.0;
    if (terminated) {
      reward = terminated_before ? 0.0 : 1.0;
      terminated_before = true;
    }
    return {reward, terminated};
  }

  /// The state cast to float32.
  void observe(float* obs) const noexcept {
    obs[0] = static_cast<float>(x);
    obs[1] = static_cast<float>(x_dot);
    obs[2] = static_cast<float>(theta);
    obs[3] = static_cast<float>(theta_dot);
  }

  /// (x, x_dot, theta, theta_dot).
  void get_state(double* out) const noexcept {
    out[0] = x;
    out[1] = x_dot;
    out[2] = theta;
    out[3] = theta_dot;
  }

  /// Sets (x, x_dot, theta, theta_dot); the episode counts as not terminated.
  void set_state(const double* in) noexcept {
    x = in[0];
    x_dot = in[1];
    theta = in[2];
    theta_dot = in[3];
    terminated_before = false;
  }
};

} // namespace troupe::envs
