// Acrobot-v1 (Sutton 1996) with Gymnasium 1.x's book dynamics and one RK4 step
// of 0.2 s (docs/environments.md, "Semantics").
#pragma once

#include <algorithm>
#include <cmath>

#include "envs/model.hpp"

namespace troupe::envs {

/// The Acrobot-v1 model. State: (theta1, theta2, dtheta1, dtheta2).
struct acrobot {
  static constexpr double dt = 0.2;
  static constexpr double link_length_1 = 1.0;
  static constexpr double link_mass_1 = 1.0;
  static constexpr double link_mass_2 = 1.0;
  static constexpr double link_com_pos_1 = 0.5;
  static constexpr double link_com_pos_2 = 0.5;
  static constexpr double link_moi = 1.0;
  static constexpr double max_vel_1 = 4 * M_PI;
  static constexpr double max_vel_2 = 9 * M_PI;
  static constexpr double g = 9.8;

  double s[4] = {0, 0, 0, 0};

  /// Id, spaces (Discrete(3); Box of 6 with bounds 1, 1, 1, 1, 4 pi, 9 pi)
  /// and time limit 500.
  static env_spec make_spec();

  /// Uniform in [-0.1, 0.1) for each value, rounded to float32.
  void reset(rng& r) noexcept {
    for (auto& v : s)
      v = static_cast<double>(static_cast<float>(r.uniform(-0.1, 0.1)));
  }

  /// Time derivative of (theta1, theta2, dtheta1, dtheta2) under torque a.
  static void derivatives(const double* y, double a, double* dy) noexcept {
    constexpr double m1 = link_mass_1, m2 = link_mass_2, l1 = link_length_1;
    constexpr double lc1 = link_com_pos_1, lc2 = link_com_pos_2;
    constexpr double i1 = link_moi, i2 = link_moi;
    const double theta1 = y[0], theta2 = y[1], dtheta1 = y[2], dtheta2 = y[3];
    // Written in Gymnasium's operation order (acrobot.py, _dsdt); the sine
    // and cosine of theta2 are evaluated once (same values, fewer libm calls).
    const double cos_theta2 = std::cos(theta2), sin_theta2 = std::sin(theta2);
    double d1 =
      m1 * (lc1 * lc1) + m2 * (l1 * l1 + lc2 * lc2 + 2 * l1 * lc2 * cos_theta2) + i1 + i2;
    double d2 = m2 * (lc2 * lc2 + l1 * lc2 * cos_theta2) + i2;
    double phi2 = m2 * lc2 * g * std::cos(theta1 + theta2 - M_PI / 2.0);
    double phi1 = -m2 * l1 * lc2 * (dtheta2 * dtheta2) * sin_theta2 -
                  2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin_theta2 +
                  (m1 * lc1 + m2 * l1) * g * std::cos(theta1 - M_PI / 2) + phi2;
    double ddtheta2 =
      (a + d2 / d1 * phi1 - m2 * l1 * lc2 * (dtheta1 * dtheta1) * sin_theta2 - phi2) /
      (m2 * (lc2 * lc2) + i2 - (d2 * d2) / d1);
    double ddtheta1 = -(d2 * ddtheta2 + phi1) / d1;
    dy[0] = dtheta1;
    dy[1] = dtheta2;
    dy[2] = ddtheta1;
    dy[3] = ddtheta2;
  }

  /// x wrapped into [low, high] by whole periods, as Gymnasium's wrap().
  static double wrap(double x, double low, double high) noexcept {
    double diff = high - low;
    while (x > high)
      x = x - diff;
    while (x < low)
      x = x + diff;
    return x;
  }

  /// One RK4 step with torque -1, 0 or +1 for action 0, 1 or 2.
  model_step step(const float* action) noexcept {
    const double torque = static_cast<double>(static_cast<int>(action[0]) - 1);
    constexpr double h = dt - 0;
    constexpr double h2 = h / 2.0;
    double k1[4], k2[4], k3[4], k4[4], y[4];
    derivatives(s, torque, k1);
    for (int j = 0; j < 4; ++j)
      y[j] = s[j] + h2 * k1[j];
    derivatives(y, torque, k2);
    for (int j = 0; j < 4; ++j)
      y[j] = s[j] + h2 * k2[j];
    derivatives(y, torque, k3);
    for (int j = 0; j < 4; ++j)
      y[j] = s[j] + h * k3[j];
    derivatives(y, torque, k4);
    for (int j = 0; j < 4; ++j)
      s[j] = s[j] + h / 6.0 * (k1[j] + 2 * k2[j] + 2 * k3[j] + k4[j]);
    s[0] = wrap(s[0], -M_PI, M_PI);
    s[1] = wrap(s[1], -M_PI, M_PI);
    s[2] = std::min(std::max(s[2], -max_vel_1), max_vel_1);
    s[3] = std::min(std::max(s[3], -max_vel_2), max_vel_2);
    bool terminated = -std::cos(s[0]) - std::cos(s[1] + s[0]) > 1.0;
    return {terminated ? 0.0 : -1.0, terminated};
  }

  /// (cos theta1, sin theta1, cos theta2, sin theta2, dtheta1, dtheta2).
  void observe(float* obs) const noexcept {
    obs[0] = static_cast<float>(std::cos(s[0]));
    obs[1] = static_cast<float>(std::sin(s[0]));
    obs[2] = static_cast<float>(std::cos(s[1]));
    obs[3] = static_cast<float>(std::sin(s[1]));
    obs[4] = static_cast<float>(s[2]);
    obs[5] = static_cast<float>(s[3]);
  }

  /// (theta1, theta2, dtheta1, dtheta2).
  void get_state(double* out) const noexcept { std::copy(s, s + 4, out); }

  /// Sets (theta1, theta2, dtheta1, dtheta2).
  void set_state(const double* in) noexcept { std::copy(in, in + 4, s); }
};

} // namespace troupe::envs
