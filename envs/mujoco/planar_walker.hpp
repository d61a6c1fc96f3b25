// What Hopper-v4 and Walker2d-v4 share (hopper_v4.py and walker2d_v4.py are
// the same task on two models): frame skip 4; reward forward_reward_weight *
// x velocity + healthy_reward - ctrl_cost_weight * sum(action^2), the healthy
// reward paid on every step, the terminal one too; terminated when the task's
// is_healthy() says no (or on a non-finite state); observation qpos without
// rootx, then qvel clipped to [-10, 10]; reset qpos0 and zero velocities plus
// U(-0.005, 0.005) on each. A task derives from planar_walker<itself, nq, nv,
// nu> and adds its model file, spec and is_healthy().
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "envs/mujoco/mujoco_env.hpp"

namespace troupe::envs::mujoco {

/// The shared part of Hopper-v4 and Walker2d-v4 (Task: the task itself).
template <class Task, int NQ, int NV, int NU>
struct planar_walker : mujoco_task {
  static constexpr int frame_skip = 4;
  static constexpr double forward_reward_weight = 1.0;
  static constexpr double ctrl_cost_weight = 1e-3;
  static constexpr double healthy_reward = 1.0;
  static constexpr double reset_noise_scale = 5e-3;
  /// Observed velocities are clipped to [-velocity_clip, velocity_clip].
  static constexpr double velocity_clip = 10.0;
  static constexpr int nq = NQ, nv = NV, nu = NU;

  /// The last step's terms, as v4's info names them.
  double x_position = 0; ///< rootx after the step
  double x_velocity = 0; ///< (rootx after - rootx before) / dt
  /// The last step's reward terms, under v5's info names (v4's info has
  /// none).
  double reward_forward = 0; ///< forward_reward_weight * x_velocity
  double reward_ctrl = 0;    ///< -ctrl_cost_weight * sum(action^2)
  double reward_survive = 0; ///< healthy_reward (paid on every step)

  /// An instance of the built-in model file `model_file`.
  explicit planar_walker(const char* model_file) : mujoco_task(model_file, frame_skip) {}

  /// qpos0 + U(-0.005, 0.005) per position, then U(-0.005, 0.005) per velocity.
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
    return {"reward_forward", "reward_ctrl", "reward_survive"};
  }

  /// Writes the last step's reward terms (reward_forward, reward_ctrl, reward_survive).
  void reward_terms(double* out) const noexcept {
    out[0] = reward_forward;
    out[1] = reward_ctrl;
    out[2] = reward_survive;
  }

  /// One step: the forward reward plus the healthy reward minus the control
  /// cost; terminated when unhealthy.
  model_step step(const float* action) noexcept {
    const double x_before = data().qpos[0];
    const bool finite = simulate(action);
    x_position = data().qpos[0];
    x_velocity = (x_position - x_before) / dt();
    // As HalfCheetah: the cost in float32 from the float32 action (NumPy 2).
    const float ctrl_cost = float32_control_cost<nu>(ctrl_cost_weight, action);
    // v4: (forward_reward + healthy_reward) - ctrl_cost, in that order.
    const double rewards = forward_reward_weight * x_velocity + healthy_reward;
    reward_forward = forward_reward_weight * x_velocity;
    reward_ctrl = -static_cast<double>(ctrl_cost);
    reward_survive = healthy_reward;
    const bool healthy = static_cast<const Task&>(*this).is_healthy();
    return {rewards - static_cast<double>(ctrl_cost), !finite || !healthy};
  }

  /// qpos[1:], then qvel clipped to [-10, 10], as float32.
  void observe(float* obs) const noexcept {
    const mjData& d = data();
    for (int i = 1; i < nq; ++i)
      obs[i - 1] = static_cast<float>(d.qpos[i]);
    for (int i = 0; i < nv; ++i)
      obs[nq - 1 + i] =
        static_cast<float>(std::clamp(d.qvel[i], -velocity_clip, velocity_clip));
  }
};

} // namespace troupe::envs::mujoco
