// InvertedDoublePendulum-v4 (gymnasium/envs/mujoco/inverted_double_pendulum_v4.py):
// keep two chained poles upright on a cart. Model
// models/inverted_double_pendulum.xml (RK4, timestep 0.01), frame skip 5, so
// dt = 0.05. Observation: the cart's position, sin and cos of the two pole
// angles, qvel clipped to [-10, 10], qfrc_constraint clipped to [-10, 10]:
// 11 values. Reward: 10 - (0.01 x^2 + (y - 2)^2) - (1e-3 v1^2 + 5e-3 v2^2),
// where (x, y) are the tip's x and z (site_xpos) and v1, v2 the poles'
// angular velocities; paid on every step, the terminal one too. Terminated
// when the tip's z <= 1 (or on a non-finite state); truncated at 1000 steps.
// Reset: qpos0 + U(-0.1, 0.1) per position, 0.1 N(0, 1) per velocity. The
// state adds qfrc_constraint as v4 last read it (see constraint_force).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "envs/mujoco/mujoco_env.hpp"

namespace troupe::envs::mujoco {

/// The InvertedDoublePendulum-v4 task. v4's info is empty: no reward terms kept.
struct inverted_double_pendulum : mujoco_task {
  /// The model file, in envs/mujoco/models/.
  static constexpr const char* model_file = "inverted_double_pendulum.xml";
  static constexpr int frame_skip = 5;
  static constexpr double alive_bonus = 10.0;
  static constexpr double min_tip_height = 1.0; ///< terminated when the tip's z <= this
  static constexpr double reset_noise_scale = 0.1;
  /// Observed velocities and constraint forces are clipped to [-clip, clip].
  static constexpr double clip = 10.0;
  static constexpr int nq = 3, nv = 3, nu = 1;

  /// qfrc_constraint as v4's observation reads it: from the last pass of the
  /// dynamics, which after a step is RK4's last stage, not the final (qpos,
  /// qvel). Part of the state (after qacc_warmstart), so that a restored
  /// episode observes bit for bit what the saved one did.
  double constraint_force[nv] = {};

  inverted_double_pendulum() : mujoco_task(model_file, frame_skip) {}

  /// Id, spaces (Box(-inf, inf, (11,)); Box(-1, 1, (1,))) and time limit 1000.
  static env_spec make_spec() {
    constexpr float inf = std::numeric_limits<float>::infinity();
    auto names = hinge_and_slide_state_names({"slider", "hinge", "hinge2"});
    for (const char* joint : {"slider", "hinge", "hinge2"})
      names.push_back(std::string("qfrc_constraint.") + joint);
    return {"InvertedDoublePendulum-v4", space::box(11, -inf, inf),
            space::box(nu, -1.0f, 1.0f), 1000, std::move(names)};
  }

  /// Writes (qpos, qvel, qacc_warmstart, constraint_force): 12 values.
  void get_state(double* out) const noexcept {
    mujoco_task::get_state(out);
    std::copy(constraint_force, constraint_force + nv, out + nq + 2 * nv);
  }

  /// Sets the state get_state wrote.
  void set_state(const double* in) noexcept {
    mujoco_task::set_state(in);
    std::copy(in + nq + 2 * nv, in + nq + 3 * nv, constraint_force);
  }

  /// qpos0 + U(-0.1, 0.1) per position, then 0.1 N(0, 1) per velocity.
  void reset(rng& r) noexcept {
    double qpos_noise[nq], qvel_noise[nv];
    for (double& x : qpos_noise)
      x = r.uniform(-reset_noise_scale, reset_noise_scale);
    for (double& x : qvel_noise)
      x = reset_noise_scale * standard_normal(r);
    reset_to(qpos_noise, qvel_noise);
    std::copy(data().qfrc_constraint, data().qfrc_constraint + nv, constraint_force);
  }

  /// One step: the alive bonus minus the distance and velocity penalties;
  /// terminated when the tip is at or below z = 1.
  model_step step(const float* action) noexcept {
    const bool finite = simulate(action);
    const mjData& d = data();
    std::copy(d.qfrc_constraint, d.qfrc_constraint + nv, constraint_force);
    // The tip site's position from the last kinematics pass, as v4 reads it.
    const double x = d.site_xpos[0], y = d.site_xpos[2];
    const double dist_penalty = 0.01 * (x * x) + (y - 2) * (y - 2);
    const double v1 = d.qvel[1], v2 = d.qvel[2];
    const double vel_penalty = 1e-3 * (v1 * v1) + 5e-3 * (v2 * v2);
    return {alive_bonus - dist_penalty - vel_penalty, !finite || y <= min_tip_height};
  }

  /// (slider, sin hinge, sin hinge2, cos hinge, cos hinge2, clipped qvel,
  /// clipped qfrc_constraint), as float32.
  void observe(float* obs) const noexcept {
    const mjData& d = data();
    obs[0] = static_cast<float>(d.qpos[0]);
    obs[1] = static_cast<float>(std::sin(d.qpos[1]));
    obs[2] = static_cast<float>(std::sin(d.qpos[2]));
    obs[3] = static_cast<float>(std::cos(d.qpos[1]));
    obs[4] = static_cast<float>(std::cos(d.qpos[2]));
    for (int i = 0; i < nv; ++i)
      obs[5 + i] = static_cast<float>(std::clamp(d.qvel[i], -clip, clip));
    for (int i = 0; i < nv; ++i)
      obs[8 + i] = static_cast<float>(std::clamp(constraint_force[i], -clip, clip));
  }
};

} // namespace troupe::envs::mujoco
