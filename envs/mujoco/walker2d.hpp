// Walker2d-v4 (gymnasium/envs/mujoco/walker2d_v4.py): make a planar biped
// walk forward. Model models/walker2d.xml (RK4, timestep 0.002), frame skip
// 4, so dt = 0.008. Observation: qpos without rootx (8 values), then qvel
// clipped to [-10, 10] (9). Reward: forward_reward_weight * x velocity +
// healthy_reward - ctrl_cost_weight * sum(action^2); the healthy reward is
// paid on every step, the terminal one too. Terminated when unhealthy: rootz
// outside (0.8, 2.0) or rooty outside (-1, 1) (or a non-finite state);
// truncated at 1000 steps. Reset: qpos0 and zero velocities plus
// U(-0.005, 0.005) on each.
#pragma once

#include <algorithm>
#include <limits>

#include "envs/mujoco/planar_walker.hpp"

namespace troupe::envs::mujoco {

/// The Walker2d-v4 task, with v4's default weights and healthy ranges.
struct walker2d : planar_walker<walker2d, 9, 9, 6> {
  static constexpr double healthy_z_min = 0.8, healthy_z_max = 2.0;
  static constexpr double healthy_angle_min = -1.0, healthy_angle_max = 1.0;

  /// The model file, in envs/mujoco/models/.
  static constexpr const char* model_file = "walker2d.xml";

  walker2d() : planar_walker(model_file) {}

  /// Id, spaces (Box(-inf, inf, (17,)); Box(-1, 1, (6,))) and time limit 1000.
  static env_spec make_spec() {
    constexpr float inf = std::numeric_limits<float>::infinity();
    return {"Walker2d-v4", space::box(nq - 1 + nv, -inf, inf),
            space::box(nu, -1.0f, 1.0f), 1000,
            hinge_and_slide_state_names({"rootx", "rootz", "rooty", "thigh_joint",
                                         "leg_joint", "foot_joint", "thigh_left_joint",
                                         "leg_left_joint", "foot_left_joint"})};
  }

  /// v4's is_healthy: rootz in (0.8, 2.0) and rooty in (-1, 1).
  bool is_healthy() const noexcept {
    const double z = data().qpos[1], angle = data().qpos[2];
    return healthy_z_min < z && z < healthy_z_max && healthy_angle_min < angle &&
           angle < healthy_angle_max;
  }
};

} // namespace troupe::envs::mujoco
