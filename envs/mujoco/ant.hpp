// Ant-v4 (gymnasium/envs/mujoco/ant_v4.py, default arguments): make a
// four-legged ant walk forward. Model models/ant.xml (RK4, timestep 0.01),
// frame skip 5, so dt = 0.05. Observation: qpos without the root's x and y
// (13 values), then qvel (14); use_contact_forces is off, so no contact
// forces are observed and no contact cost is paid. Reward: the torso's x
// velocity (the change of its body position xpos over dt) + 1 (healthy
// reward, paid on every step, the terminal one too) - 0.5 * sum(action^2).
// Terminated when the state is not finite or the torso's z leaves
// [0.2, 1.0]; truncated at 1000 steps. Reset: qpos0 + U(-0.1, 0.1) per
// position (the quaternion too), 0.1 * N(0, 1) per velocity. State: qpos,
// qvel, qacc_warmstart, then the torso's x and y position, which the next
// step's reward starts from (see docs/environments.md).
#pragma once

#include <cmath>
#include <limits>
#include <utility>

#include "envs/mujoco/mujoco_env.hpp"

namespace troupe::envs::mujoco {

/// The Ant-v4 task, with v4's default arguments.
struct ant : mujoco_task {
  /// The model file, in envs/mujoco/models/.
  static constexpr const char* model_file = "ant.xml";
  static constexpr int frame_skip = 5;
  static constexpr double ctrl_cost_weight = 0.5;
  static constexpr double healthy_reward = 1.0;
  static constexpr double healthy_z_min = 0.2, healthy_z_max = 1.0;
  static constexpr double reset_noise_scale = 0.1;
  static constexpr int nq = 15, nv = 14, nu = 8;
  static constexpr int torso_body = 1; ///< the body whose position v4 tracks

  /// The last step's reward terms, as v4's info names them.
  double reward_forward = 0;       ///< x_velocity (forward_reward_weight is 1)
  double reward_ctrl = 0;          ///< -ctrl_cost_weight * sum(action^2)
  double reward_survive = 0;       ///< healthy_reward
  double x_position = 0;           ///< the torso's x after the step (or reset)
  double y_position = 0;           ///< the torso's y after the step (or reset)
  double distance_from_origin = 0; ///< |(x_position, y_position)|
  double x_velocity = 0;           ///< (x after - x before) / dt
  double y_velocity = 0;           ///< (y after - y before) / dt
  double forward_reward = 0;       ///< the same as reward_forward

  ant() : mujoco_task(model_file, frame_skip) {}

  /// Id, spaces (Box(-inf, inf, (27,)); Box(-1, 1, (8,))), time limit 1000
  /// and state names.
  static env_spec make_spec() {
    constexpr float inf = std::numeric_limits<float>::infinity();
    auto names = joint_state_names({{"root", mjJNT_FREE},
                                    {"hip_1", mjJNT_HINGE},
                                    {"ankle_1", mjJNT_HINGE},
                                    {"hip_2", mjJNT_HINGE},
                                    {"ankle_2", mjJNT_HINGE},
                                    {"hip_3", mjJNT_HINGE},
                                    {"ankle_3", mjJNT_HINGE},
                                    {"hip_4", mjJNT_HINGE},
                                    {"ankle_4", mjJNT_HINGE}});
    names.push_back("x_position");
    names.push_back("y_position");
    return {"Ant-v4", space::box(nq - 2 + nv, -inf, inf), space::box(nu, -1.0f, 1.0f),
            1000, std::move(names)};
  }

  /// qpos0 + U(-0.1, 0.1) per position, then 0.1 N(0, 1) per velocity.
  void reset(rng& r) noexcept {
    double qpos_noise[nq], qvel_noise[nv];
    for (double& x : qpos_noise)
      x = r.uniform(-reset_noise_scale, reset_noise_scale);
    for (double& x : qvel_noise)
      x = reset_noise_scale * standard_normal(r);
    reset_to(qpos_noise, qvel_noise);
    x_position = data().xpos[3 * torso_body];
    y_position = data().xpos[3 * torso_body + 1];
  }

  /// qpos, qvel, qacc_warmstart, then x_position and y_position.
  void get_state(double* out) const noexcept {
    mujoco_task::get_state(out);
    out[nq + 2 * nv] = x_position;
    out[nq + 2 * nv + 1] = y_position;
  }

  /// Restores what get_state wrote.
  void set_state(const double* in) noexcept {
    mujoco_task::set_state(in);
    x_position = in[nq + 2 * nv];
    y_position = in[nq + 2 * nv + 1];
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

  /// One step: forward velocity plus the healthy reward minus the control
  /// cost; terminated when unhealthy.
  model_step step(const float* action) noexcept {
    const mjData& d = data();
    // v4's get_body_com("torso") before the step: the body's xpos that the
    // last step or the reset left, kept as x_position and y_position (after
    // mj_step, the xpos of the integrator's last evaluation, not of the
    // final qpos, which a restore could not recompute).
    const double x_before = x_position, y_before = y_position;
    simulate(action);
    x_position = d.xpos[3 * torso_body];
    y_position = d.xpos[3 * torso_body + 1];
    distance_from_origin = std::sqrt(x_position * x_position + y_position * y_position);
    x_velocity = (x_position - x_before) / dt();
    y_velocity = (y_position - y_before) / dt();
    forward_reward = reward_forward = x_velocity;
    reward_survive = healthy_reward; // terminate_when_unhealthy: paid even when unhealthy
    // v4 computes the cost from the float32 action in float32 (NumPy 2:
    // np.sum of eight float32 squares, pairwise, times 0.5 as float32).
    const float ctrl_cost = float32_control_cost<nu>(ctrl_cost_weight, action);
    reward_ctrl = -static_cast<double>(ctrl_cost);
    return {(forward_reward + reward_survive) - static_cast<double>(ctrl_cost),
            !is_healthy()};
  }

  /// v4's is_healthy: qpos and qvel finite and the torso's z in [0.2, 1.0].
  bool is_healthy() const noexcept {
    const mjData& d = data();
    bool finite = true;
    for (int i = 0; i < nq; ++i)
      finite &= std::isfinite(d.qpos[i]);
    for (int i = 0; i < nv; ++i)
      finite &= std::isfinite(d.qvel[i]);
    return finite && healthy_z_min <= d.qpos[2] && d.qpos[2] <= healthy_z_max;
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
