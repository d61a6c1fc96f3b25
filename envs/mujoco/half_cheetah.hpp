// HalfCheetah-v4 (gymnasium/envs/mujoco/half_cheetah_v4.py): make a planar
// cheetah run forward. Model models/half_cheetah.xml (Euler, timestep 0.01),
// frame skip 5, so dt = 0.05. Observation: qpos without rootx (8 values),
// then qvel (9). Reward: forward_reward_weight * x velocity (the change of
// rootx over dt) - ctrl_cost_weight * sum(action^2). Never terminates (but
// on a non-finite state); truncated at 1000 steps. Reset: qpos0 + U(-0.1,
// 0.1) per position, 0.1 * N(0, 1) per velocity.
//
// The template for a new task: a spec, the reset noise, the step's reward
// and termination, the observation, over mujoco_task.
#pragma once

#include <limits>

#include "envs/mujoco/mujoco_env.hpp"

namespace troupe::envs::mujoco {

/// The HalfCheetah-v4 task, with v4's default weights.
struct half_cheetah : mujoco_task {
  /// The model file, in envs/mujoco/models/.
  static constexpr const char* model_file = "half_cheetah.xml";
  static constexpr int frame_skip = 5;
  static constexpr double forward_reward_weight = 1.0;
  static constexpr double ctrl_cost_weight = 0.1;
  static constexpr double reset_noise_scale = 0.1;
  static constexpr int nq = 9, nv = 9, nu = 6;

  /// The last step's reward terms, as v4's info names them.
  double x_position = 0;  ///< rootx after the step
  double x_velocity = 0;  ///< (rootx after - rootx before) / dt
  double reward_run = 0;  ///< forward_reward_weight * x_velocity
  double reward_ctrl = 0; ///< -ctrl_cost_weight * sum(action^2)

  half_cheetah() : mujoco_task(model_file, frame_skip) {}

  /// Id, spaces (Box(-inf, inf, (17,)); Box(-1, 1, (6,))) and time limit 1000.
  static env_spec make_spec() {
    constexpr float inf = std::numeric_limits<float>::infinity();
    return {"HalfCheetah-v4", space::box(nq - 1 + nv, -inf, inf),
            space::box(nu, -1.0f, 1.0f), 1000,
            hinge_and_slide_state_names({"rootx", "rootz", "rooty", "bthigh", "bshin",
                                         "bfoot", "fthigh", "fshin", "ffoot"})};
  }

  /// qpos0 + U(-0.1, 0.1) per position, then 0.1 N(0, 1) per velocity.
  void reset(rng& r) noexcept {
    double qpos_noise[nq], qvel_noise[nv];
    for (double& x : qpos_noise)
      x = r.uniform(-reset_noise_scale, reset_noise_scale);
    for (double& x : qvel_noise)
      x = reset_noise_scale * standard_normal(r);
    reset_to(qpos_noise, qvel_noise);
  }

  /// The reward terms of reward_terms(), in order.
  static std::vector<std::string> reward_term_names() {
    return {"reward_run", "reward_ctrl"};
  }

  /// Writes the last step's reward terms (reward_run, reward_ctrl).
  void reward_terms(double* out) const noexcept {
    out[0] = reward_run;
    out[1] = reward_ctrl;
  }

  /// One step: the run reward minus the control cost.
  model_step step(const float* action) noexcept {
    const double x_before = data().qpos[0];
    const bool finite = simulate(action);
    x_position = data().qpos[0];
    x_velocity = (x_position - x_before) / dt();
    // v4 computes the cost from the float32 action in float32 (NumPy 2).
    const float ctrl_cost = float32_control_cost<nu>(ctrl_cost_weight, action);
    reward_run = forward_reward_weight * x_velocity;
    reward_ctrl = -static_cast<double>(ctrl_cost);
    return {reward_run - static_cast<double>(ctrl_cost), !finite};
  }

  /// qpos[1:] then qvel, as float32.
  void observe(float* obs) const noexcept {
    const mjData& d = data();
    for (int i = 1; i < nq; ++i)
      obs[i - 1] = static_cast<float>(d.qpos[i]);
    for (int i = 0; i < nv; ++i)
      obs[nq - 1 + i] = static_cast<float>(d.qvel[i]);
  }
};

} // namespace troupe::envs::mujoco
