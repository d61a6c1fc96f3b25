// Humanoid-v4 (gymnasium/envs/mujoco/humanoid_v4.py, default arguments):
// make a biped walk forward without falling. Model models/humanoid.xml (RK4,
// PGS solver, timestep 0.003), frame skip 5, so dt = 0.015. Observation
// (376 values): qpos without the root's x and y (22), qvel (23), then the
// whole arrays cinert (14 bodies x 10), cvel (14 x 6), qfrc_actuator (23)
// and cfrc_ext (14 x 6), the world body's rows included. Reward: 1.25 * the
// x velocity of the mass centre (of the bodies' xipos, weighted by mass)
// + 5 (healthy reward, paid on every step, the terminal one too)
// - 0.1 * sum(ctrl^2), from the float64 ctrl; no contact cost. Terminated
// when the torso's z leaves (1.0, 2.0); truncated at 1000 steps. Reset:
// qpos0 + U(-0.01, 0.01) per position (the quaternion too), U(-0.01, 0.01)
// per velocity. State: qpos, qvel, qacc_warmstart, then the mass centre's x
// and y, which the next step's reward starts from, and the observed cinert,
// cvel, qfrc_actuator and cfrc_ext (see docs/environments.md).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "envs/mujoco/mujoco_env.hpp"

namespace troupe::envs::mujoco {

/// The Humanoid-v4 task, with v4's default arguments.
struct humanoid : mujoco_task {
  /// The model file, in envs/mujoco/models/.
  static constexpr const char* model_file = "humanoid.xml";
  static constexpr int frame_skip = 5;
  static constexpr double forward_reward_weight = 1.25;
  static constexpr double ctrl_cost_weight = 0.1;
  static constexpr double healthy_reward = 5.0;
  static constexpr double healthy_z_min = 1.0, healthy_z_max = 2.0;
  static constexpr double reset_noise_scale = 1e-2;
  static constexpr int nq = 24, nv = 23, nu = 17, nbody = 14;
  /// The model's bodies in model order, the world body first.
  static constexpr const char* body_names[nbody] = {
    "world",          "torso",         "lwaist",          "pelvis",
    "right_thigh",    "right_shin",    "right_foot",      "left_thigh",
    "left_shin",      "left_foot",     "right_upper_arm", "right_lower_arm",
    "left_upper_arm", "left_lower_arm"};
  static constexpr int observation_size =
    (nq - 2) + nv + nbody * 10 + nbody * 6 + nv + nbody * 6;

  /// The last step's reward terms, as v4's info names them.
  double reward_linvel = 0;        ///< forward_reward_weight * x_velocity
  double reward_quadctrl = 0;      ///< -ctrl_cost_weight * sum(ctrl^2)
  double reward_alive = 0;         ///< healthy_reward
  double x_position = 0;           ///< the mass centre's x after the step (or reset)
  double y_position = 0;           ///< the mass centre's y after the step (or reset)
  double distance_from_origin = 0; ///< |(x_position, y_position)|
  double x_velocity = 0;           ///< (x after - x before) / dt
  double y_velocity = 0;           ///< (y after - y before) / dt
  double forward_reward = 0;       ///< the same as reward_linvel

  humanoid() : mujoco_task(model_file, frame_skip) {}

  /// Id, spaces (Box(-inf, inf, (376,)); Box(-0.4, 0.4, (17,))), time limit
  /// 1000 and state names.
  static env_spec make_spec() {
    constexpr float inf = std::numeric_limits<float>::infinity();
    return {"Humanoid-v4", space::box(observation_size, -inf, inf),
            space::box(nu, -0.4f, 0.4f), 1000, state_names()};
  }

  /// qpos, qvel and qacc_warmstart by joint, x_position, y_position, then
  /// "cinert.<body>.<k>", "cvel.<body>.<k>", "qfrc_actuator.<dof>" and
  /// "cfrc_ext.<body>.<k>": from the model's joints and bodies listed by
  /// hand, no model compiled.
  static std::vector<std::string> state_names() {
    std::vector<named_joint> joints = {{"root", mjJNT_FREE}};
    for (const char* hinge :
         {"abdomen_z", "abdomen_y", "abdomen_x", "right_hip_x", "right_hip_z",
          "right_hip_y", "right_knee", "left_hip_x", "left_hip_z", "left_hip_y",
          "left_knee", "right_shoulder1", "right_shoulder2", "right_elbow",
          "left_shoulder1", "left_shoulder2", "left_elbow"})
      joints.push_back({hinge, mjJNT_HINGE});
    auto names = joint_state_names(joints);
    std::vector<std::string> dofs;
    for (int i = 0; i < nv; ++i) // "qvel.<dof>"
      dofs.push_back(names[static_cast<size_t>(nq + i)].substr(5));
    names.push_back("x_position");
    names.push_back("y_position");
    auto per_body = [&](const char* field, int size) {
      for (const char* body : body_names)
        for (int k = 0; k < size; ++k)
          names.push_back(fmt::format("{}.{}.{}", field, body, k));
    };
    per_body("cinert", 10);
    per_body("cvel", 6);
    for (const auto& dof : dofs)
      names.push_back("qfrc_actuator." + dof);
    per_body("cfrc_ext", 6);
    return names;
  }

  /// qpos0 + U(-0.01, 0.01) per position, then U(-0.01, 0.01) per velocity.
  void reset(rng& r) noexcept {
    double qpos_noise[nq], qvel_noise[nv];
    for (double& x : qpos_noise)
      x = r.uniform(-reset_noise_scale, reset_noise_scale);
    for (double& x : qvel_noise)
      x = r.uniform(-reset_noise_scale, reset_noise_scale);
    reset_to(qpos_noise, qvel_noise);
    double xy[2];
    mass_centre(xy);
    x_position = xy[0];
    y_position = xy[1];
  }

  /// qpos, qvel, qacc_warmstart, then the carried values.
  void get_state(double* out) const noexcept {
    mujoco_task::get_state(out);
    const mjData& d = data();
    double* extra = out + nq + 2 * nv;
    *extra++ = x_position;
    *extra++ = y_position;
    extra = std::copy(d.cinert, d.cinert + nbody * 10, extra);
    extra = std::copy(d.cvel, d.cvel + nbody * 6, extra);
    extra = std::copy(d.qfrc_actuator, d.qfrc_actuator + nv, extra);
    std::copy(d.cfrc_ext, d.cfrc_ext + nbody * 6, extra);
  }

  /// Restores what get_state wrote: the carried arrays replace those that
  /// set_state's mj_forward computed from qpos and qvel (the next mj_step
  /// recomputes them all).
  void set_state(const double* in) noexcept {
    mujoco_task::set_state(in);
    mjData& d = mutable_data();
    const double* extra = in + nq + 2 * nv;
    x_position = *extra++;
    y_position = *extra++;
    for (auto [field, size] :
         {std::pair{d.cinert, nbody * 10}, std::pair{d.cvel, nbody * 6},
          std::pair{d.qfrc_actuator, nv}, std::pair{d.cfrc_ext, nbody * 6}}) {
      std::copy(extra, extra + size, field);
      extra += size;
    }
  }

  /// The reward terms of reward_terms(), in order.
  static std::vector<std::string> reward_term_names() {
    return {"reward_linvel", "reward_quadctrl", "reward_alive"};
  }

  /// Writes the last step's reward terms (reward_linvel, reward_quadctrl, reward_alive).
  void reward_terms(double* out) const noexcept {
    out[0] = reward_linvel;
    out[1] = reward_quadctrl;
    out[2] = reward_alive;
  }

  /// One step: the mass centre's forward velocity plus the healthy reward
  /// minus the control cost; terminated when unhealthy.
  model_step step(const float* action) noexcept {
    // v4's mass_center before the step: from the xipos that the last step
    // or the reset left, kept as x_position and y_position (after mj_step,
    // the xipos of the integrator's last evaluation, not of the final qpos,
    // which a restore could not recompute).
    const double before[2] = {x_position, y_position};
    double after[2];
    simulate(action);
    mass_centre(after);
    x_position = after[0];
    y_position = after[1];
    distance_from_origin = std::sqrt(x_position * x_position + y_position * y_position);
    x_velocity = (after[0] - before[0]) / dt();
    y_velocity = (after[1] - before[1]) / dt();
    forward_reward = reward_linvel = forward_reward_weight * x_velocity;
    reward_alive = healthy_reward; // terminate_when_unhealthy: paid even when unhealthy
    // v4 takes the cost from data.ctrl (the action as float64, unclamped),
    // all in float64.
    const mjData& d = data();
    double squares[nu];
    for (int i = 0; i < nu; ++i)
      squares[i] = d.ctrl[i] * d.ctrl[i];
    const double ctrl_cost = ctrl_cost_weight * numpy_sum(squares, nu);
    reward_quadctrl = -ctrl_cost;
    return {(forward_reward + reward_alive) - ctrl_cost, !is_healthy()};
  }

  /// v4's is_healthy: the torso's z strictly between 1.0 and 2.0 (false for NaN).
  bool is_healthy() const noexcept {
    const double z = data().qpos[2];
    return healthy_z_min < z && z < healthy_z_max;
  }

  /// v4's mass_center: the mass-weighted mean of the bodies' xipos, (x, y).
  void mass_centre(double* xy) const noexcept {
    const mjModel& m = model();
    const mjData& d = data();
    const double total_mass = numpy_sum(m.body_mass, nbody);
    for (int k = 0; k < 2; ++k) {
      double weighted = 0;
      for (int b = 0; b < nbody; ++b)
        weighted += m.body_mass[b] * d.xipos[3 * b + k];
      xy[k] = weighted / total_mass;
    }
  }

  /// qpos[2:], qvel, cinert, cvel, qfrc_actuator, cfrc_ext, as float32.
  void observe(float* obs) const noexcept {
    const mjData& d = data();
    float* out = obs;
    auto append = [&out](const mjtNum* values, int n) {
      for (int i = 0; i < n; ++i)
        *out++ = static_cast<float>(values[i]);
    };
    append(d.qpos + 2, nq - 2);
    append(d.qvel, nv);
    append(d.cinert, nbody * 10);
    append(d.cvel, nbody * 6);
    append(d.qfrc_actuator, nv);
    append(d.cfrc_ext, nbody * 6);
  }
};

} // namespace troupe::envs::mujoco
