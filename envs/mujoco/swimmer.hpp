// Swimmer-v4 (gymnasium/envs/mujoco/swimmer_v4.py): make a three-link chain
// swim forward through a viscous fluid. Model models/swimmer.xml (RK4,
// timestep 0.01), frame skip 4, so dt = 0.04. Observation: qpos without the
// torso's x and y (3 values), then qvel (5). Reward: forward_reward_weight *
// x velocity - ctrl_cost_weight * sum(action^2). Never terminates (but on a
// non-finite state); truncated at 1000 steps. Reset: qpos0 and zero
// velocities plus U(-0.1, 0.1) on each.
#pragma once

#include <cmath>
#include <limits>

#include "envs/mujoco/mujoco_env.hpp"

namespace troupe::envs::mujoco {

/// The Swimmer-v4 task, with v4's default weights.
struct swimmer : mujoco_task {
  /// The model file, in envs/mujoco/models/.
  static constexpr const char* model_file = "swimmer.xml";
  static constexpr int frame_skip = 4;
  static constexpr double forward_reward_weight = 1.0;
  static constexpr double ctrl_cost_weight = 1e-4;
  static constexpr double reset_noise_scale = 0.1;
  static constexpr int nq = 5, nv = 5, nu = 2;

  /// The last step's terms, as v4's info names them.
  double reward_fwd = 0;           ///< forward_reward_weight * x_velocity
  double reward_ctrl = 0;          ///< -ctrl_cost_weight * sum(action^2)
  double x_position = 0;           ///< the torso's x (slider1) after the step
  double y_position = 0;           ///< the torso's y (slider2) after the step
  double distance_from_origin = 0; ///< the norm of (x_position, y_position)
  double x_velocity = 0;           ///< (x after - x before) / dt
  double y_velocity = 0;           ///< (y after - y before) / dt
  double forward_reward = 0;       ///< the same as reward_fwd, as v4 reports it twice

  swimmer() : mujoco_task(model_file, frame_skip) {}

  /// Id, spaces (Box(-inf, inf, (8,)); Box(-1, 1, (2,))) and time limit 1000.
  static env_spec make_spec() {
    constexpr float inf = std::numeric_limits<float>::infinity();
    return {"Swimmer-v4", space::box(nq - 2 + nv, -inf, inf), space::box(nu, -1.0f, 1.0f),
            1000,
            hinge_and_slide_state_names(
              {"slider1", "slider2", "free_body_rot", "motor1_rot", "motor2_rot"})};
  }

  /// qpos0 + U(-0.1, 0.1) per position, then U(-0.1, 0.1) per velocity.
  void reset(rng& r) noexcept {
    double qpos_noise[nq], qvel_noise[nv];
    for (double& x : qpos_noise)
      x = r.uniform(-reset_noise_scale, reset_noise_scale);
    for (double& x : qvel_noise)
      x = r.uniform(-reset_noise_scale, reset_noise_scale);
    reset_to(qpos_noise, qvel_noise);
  }

  /// The reward terms of reward_terms(), in order.
  static std::vector<std::string> reward_term_names() {
    return {"reward_fwd", "reward_ctrl"};
  }

  /// Writes the last step's reward terms (reward_fwd, reward_ctrl).
  void reward_terms(double* out) const noexcept {
    out[0] = reward_fwd;
    out[1] = reward_ctrl;
  }

  /// One step: the forward reward minus the control cost.
  model_step step(const float* action) noexcept {
    const double x_before = data().qpos[0], y_before = data().qpos[1];
    const bool finite = simulate(action);
    x_position = data().qpos[0];
    y_position = data().qpos[1];
    x_velocity = (x_position - x_before) / dt();
    y_velocity = (y_position - y_before) / dt();
    // np.linalg.norm of a vector: sqrt(x . x).
    distance_from_origin = std::sqrt(x_position * x_position + y_position * y_position);
    // As HalfCheetah: the cost in float32 from the float32 action (NumPy 2).
    const float ctrl_cost = float32_control_cost<nu>(ctrl_cost_weight, action);
    forward_reward = reward_fwd = forward_reward_weight * x_velocity;
    reward_ctrl = -static_cast<double>(ctrl_cost);
    return {reward_fwd - static_cast<double>(ctrl_cost), !finite};
  }

  /// qpos[2:] then qvel, as float32.
  void observe(float* obs) const noexcept {
    const mjData& d = data();
    for (int i = 2; i < nq; ++i)
      obs[i - 2] = static_cast<float>(d.qpos[i]);
    for (int i = 0; i < nv; ++i)
      obs[nq - 2 + i] = static_cast<float>(d.qvel[i]);
  }
};

} // namespace troupe::envs::mujoco
