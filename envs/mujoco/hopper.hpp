// Hopper-v4 (gymnasium/envs/mujoco/hopper_v4.py): make a planar one-legged
// hopper hop forward. Model models/hopper.xml (RK4, timestep 0.002), frame
// skip 4, so dt = 0.008. Observation: qpos without rootx (5 values), then
// qvel clipped to [-10, 10] (6). Reward: forward_reward_weight * x velocity
// + healthy_reward - ctrl_cost_weight * sum(action^2); the healthy reward is
// paid on every step, the terminal one too. Terminated when unhealthy: rootz
// <= 0.7, |rooty| >= 0.2, or any of qpos[2:] and qvel outside (-100, 100)
// (or a non-finite state); truncated at 1000 steps. Reset: qpos0 and zero
// velocities plus U(-0.005, 0.005) on each.
#pragma once

#include <algorithm>
#include <limits>

#include "envs/mujoco/planar_walker.hpp"

namespace troupe::envs::mujoco {

/// The Hopper-v4 task, with v4's default weights and healthy ranges.
struct hopper : planar_walker<hopper, 6, 6, 3> {
  static constexpr double healthy_state_min = -100.0, healthy_state_max = 100.0;
  static constexpr double healthy_z_min = 0.7;
  static constexpr double healthy_angle_min = -0.2, healthy_angle_max = 0.2;

  /// The model file, in envs/mujoco/models/.
  static constexpr const char* model_file = "hopper.xml";

  hopper() : planar_walker(model_file) {}

  /// Id, spaces (Box(-inf, inf, (11,)); Box(-1, 1, (3,))) and time limit 1000.
  static env_spec make_spec() {
    constexpr float inf = std::numeric_limits<float>::infinity();
    return {"Hopper-v4", space::box(nq - 1 + nv, -inf, inf), space::box(nu, -1.0f, 1.0f),
            1000,
            hinge_and_slide_state_names(
              {"rootx", "rootz", "rooty", "thigh_joint", "leg_joint", "foot_joint"})};
  }

  /// v4's is_healthy: rootz in (0.7, inf), rooty in (-0.2, 0.2), and qpos[2:]
  /// and qvel (unclipped) in (-100, 100).
  bool is_healthy() const noexcept {
    const mjData& d = data();
    bool healthy_state = true;
    for (int i = 2; i < nq; ++i)
      healthy_state &= healthy_state_min < d.qpos[i] && d.qpos[i] < healthy_state_max;
    for (int i = 0; i < nv; ++i)
      healthy_state &= healthy_state_min < d.qvel[i] && d.qvel[i] < healthy_state_max;
    const double z = d.qpos[1], angle = d.qpos[2];
    const bool healthy_z =
      healthy_z_min < z && z < std::numeric_limits<double>::infinity();
    const bool healthy_angle = healthy_angle_min < angle && angle < healthy_angle_max;
    return healthy_state && healthy_z && healthy_angle;
  }
};

} // namespace troupe::envs::mujoco
