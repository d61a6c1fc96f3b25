// Reacher-v4 (gymnasium/envs/mujoco/reacher_v4.py): move a two-link arm's
// fingertip to a target. Model models/reacher.xml (RK4, timestep 0.01),
// frame skip 2, so dt = 0.02. Observation: cos and sin of the two arm
// angles, the target's position (qpos[2:]), the arm's two velocities, and
// fingertip - target (3 values, from the bodies' xpos): 11 values. Reward,
// taken before the step from the state the action starts in: -|fingertip -
// target| - sum(action^2). Never terminates (but on a non-finite state);
// truncated at 50 steps. Reset: the arm at qpos0 + U(-0.1, 0.1), the target
// uniform in the disc of radius 0.2 (drawn from U(-0.2, 0.2)^2 until inside),
// arm velocities U(-0.005, 0.005), the target at rest. The state adds
// fingertip - target as v4 last read it (see fingertip_minus_target).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "envs/mujoco/mujoco_env.hpp"

namespace troupe::envs::mujoco {

/// The Reacher-v4 task.
struct reacher : mujoco_task {
  /// The model file, in envs/mujoco/models/.
  static constexpr const char* model_file = "reacher.xml";
  static constexpr int frame_skip = 2;
  static constexpr double arm_reset_noise = 0.1; ///< half-width of the arm angles' noise
  static constexpr double arm_velocity_noise = 0.005; ///< the arm velocities' half-width
  static constexpr double goal_radius = 0.2; ///< the target is drawn inside this disc
  static constexpr int nq = 4, nv = 4, nu = 2;
  /// The body ids of the fingertip and the target in models/reacher.xml.
  static constexpr int fingertip_body = 3, target_body = 4;

  /// The last step's reward terms, as v4's info names them.
  double reward_dist = 0; ///< -|fingertip - target| before the step
  double reward_ctrl = 0; ///< -sum(action^2)

  /// fingertip - target as v4's get_body_com reads it: the bodies' xpos from
  /// the last kinematics pass, which after a step is that of RK4's last stage,
  /// not of the final (qpos, qvel). Observed, paid for by the next step, and
  /// part of the state (after qacc_warmstart), so that a restored episode
  /// continues bit for bit.
  double fingertip_minus_target[3] = {};

  reacher() : mujoco_task(model_file, frame_skip) {}

  /// Id, spaces (Box(-inf, inf, (11,)); Box(-1, 1, (2,))), time limit 50; the
  /// state is (qpos, qvel, qacc_warmstart, fingertip_minus_target).
  static env_spec make_spec() {
    constexpr float inf = std::numeric_limits<float>::infinity();
    auto names =
      hinge_and_slide_state_names({"joint0", "joint1", "target_x", "target_y"});
    for (const char* axis : {"x", "y", "z"})
      names.push_back(std::string("fingertip_minus_target.") + axis);
    return {"Reacher-v4", space::box(11, -inf, inf), space::box(nu, -1.0f, 1.0f), 50,
            std::move(names)};
  }

  /// Writes (qpos, qvel, qacc_warmstart, fingertip_minus_target): 15 values.
  void get_state(double* out) const noexcept {
    mujoco_task::get_state(out);
    std::copy(fingertip_minus_target, fingertip_minus_target + 3, out + nq + 2 * nv);
  }

  /// Sets the state get_state wrote.
  void set_state(const double* in) noexcept {
    mujoco_task::set_state(in);
    std::copy(in + nq + 2 * nv, in + nq + 2 * nv + 3, fingertip_minus_target);
  }

  /// v4's reset_model: the draws in v4's order (four position noises, of
  /// which the target's two are overwritten, the goal, four velocity noises).
  void reset(rng& r) noexcept {
    double qpos_noise[nq], qvel_noise[nv];
    for (double& x : qpos_noise)
      x = r.uniform(-arm_reset_noise, arm_reset_noise);
    double goal[2];
    do {
      goal[0] = r.uniform(-goal_radius, goal_radius);
      goal[1] = r.uniform(-goal_radius, goal_radius);
    } while (!(std::sqrt(goal[0] * goal[0] + goal[1] * goal[1]) < goal_radius));
    for (double& x : qvel_noise)
      x = r.uniform(-arm_velocity_noise, arm_velocity_noise);
    qvel_noise[2] = qvel_noise[3] = 0.0;
    reset_to(qpos_noise, qvel_noise);
    // v4 sets the target's qpos to the goal itself, not qpos0 + a noise:
    // set it exactly and derive again from the state v4's mj_forward starts
    // from (mj_resetData's zero warm start).
    const mjModel& m = model();
    mjData& d = mutable_data();
    d.qpos[2] = goal[0];
    d.qpos[3] = goal[1];
    std::fill(d.qacc_warmstart, d.qacc_warmstart + nv, 0.0);
    mj_forward(&m, &d);
    read_bodies();
  }

  /// The reward terms of reward_terms(), in order.
  static std::vector<std::string> reward_term_names() {
    return {"reward_dist", "reward_ctrl"};
  }

  /// Writes the last step's reward terms (reward_dist, reward_ctrl).
  void reward_terms(double* out) const noexcept {
    out[0] = reward_dist;
    out[1] = reward_ctrl;
  }

  /// One step: the distance and control rewards of the state before it.
  model_step step(const float* action) noexcept {
    double distance_sq = 0;
    for (double v : fingertip_minus_target)
      distance_sq += v * v;
    reward_dist = -std::sqrt(distance_sq);
    // -np.square(a).sum(): float32 from the float32 action (weight 1).
    reward_ctrl = -static_cast<double>(float32_control_cost<nu>(1.0, action));
    const bool finite = simulate(action);
    read_bodies();
    return {reward_dist + reward_ctrl, !finite};
  }

  /// cos(qpos[0:2]), sin(qpos[0:2]), qpos[2:4], qvel[0:2], fingertip - target.
  void observe(float* obs) const noexcept {
    const mjData& d = data();
    obs[0] = static_cast<float>(std::cos(d.qpos[0]));
    obs[1] = static_cast<float>(std::cos(d.qpos[1]));
    obs[2] = static_cast<float>(std::sin(d.qpos[0]));
    obs[3] = static_cast<float>(std::sin(d.qpos[1]));
    obs[4] = static_cast<float>(d.qpos[2]);
    obs[5] = static_cast<float>(d.qpos[3]);
    obs[6] = static_cast<float>(d.qvel[0]);
    obs[7] = static_cast<float>(d.qvel[1]);
    for (int k = 0; k < 3; ++k)
      obs[8 + k] = static_cast<float>(fingertip_minus_target[k]);
  }

private:
  /// fingertip_minus_target from the data's body positions (xpos).
  void read_bodies() noexcept {
    for (int k = 0; k < 3; ++k)
      fingertip_minus_target[k] =
        data().xpos[3 * fingertip_body + k] - data().xpos[3 * target_body + k];
  }
};

} // namespace troupe::envs::mujoco
