// InvertedPendulum-v4 (gymnasium/envs/mujoco/inverted_pendulum_v4.py): keep a
// pole upright on a cart by pushing the cart. Model models/inverted_pendulum.xml
// (RK4, timestep 0.02), frame skip 2. Observation (qpos, qvel) = (cart
// position, pole angle, their velocities); reward 1 every step, the terminal
// one included; terminated when the pole leans more than 0.2 rad or the
// observation is not finite; truncated at 1000 steps. Reset: qpos0 and zero
// velocities plus uniform noise in [-0.01, 0.01] on each.
#pragma once

#include <cmath>
#include <limits>

#include "envs/mujoco/mujoco_env.hpp"

namespace troupe::envs::mujoco {

/// The InvertedPendulum-v4 task. State: qpos, qvel, qacc_warmstart of (slider, hinge).
struct inverted_pendulum : mujoco_task {
  /// The model file, in envs/mujoco/models/.
  static constexpr const char* model_file = "inverted_pendulum.xml";
  static constexpr int frame_skip = 2;
  static constexpr double reset_noise = 0.01;   ///< half-width of the uniform reset noise
  static constexpr double max_pole_angle = 0.2; ///< rad; beyond it the episode terminates

  inverted_pendulum() : mujoco_task(model_file, frame_skip) {}

  /// Id, spaces (Box(-inf, inf, (4,)); the actuator's ctrlrange Box(-3, 3, (1,)))
  /// and time limit 1000.
  static env_spec make_spec() {
    constexpr float inf = std::numeric_limits<float>::infinity();
    return {"InvertedPendulum-v4", space::box(4, -inf, inf), space::box(1, -3.0f, 3.0f),
            1000, hinge_and_slide_state_names({"slider", "hinge"})};
  }

  /// qpos0 + U(-0.01, 0.01) per position, then U(-0.01, 0.01) per velocity.
  void reset(rng& r) noexcept {
    double qpos_noise[2], qvel_noise[2];
    for (double& x : qpos_noise)
      x = r.uniform(-reset_noise, reset_noise);
    for (double& x : qvel_noise)
      x = r.uniform(-reset_noise, reset_noise);
    reset_to(qpos_noise, qvel_noise);
  }

  /// One step: reward 1; terminated when |hinge| > 0.2 or the state is not finite.
  model_step step(const float* action) noexcept {
    const bool finite = simulate(action);
    const bool fallen = std::fabs(data().qpos[1]) > max_pole_angle;
    return {1.0, !finite || fallen};
  }

  /// (slider, hinge, slider velocity, hinge velocity) as float32.
  void observe(float* obs) const noexcept {
    const mjData& d = data();
    obs[0] = static_cast<float>(d.qpos[0]);
    obs[1] = static_cast<float>(d.qpos[1]);
    obs[2] = static_cast<float>(d.qvel[0]);
    obs[3] = static_cast<float>(d.qvel[1]);
  }
};

} // namespace troupe::envs::mujoco
