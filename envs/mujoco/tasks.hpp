// The MuJoCo tasks' registrations, which the registry adds to its built-ins.
#pragma once

#include <string>
#include <vector>

#include "envs/mujoco/mujoco_env.hpp"
#include "envs/registry.hpp"

namespace troupe::envs::mujoco {

/// One registration per MuJoCo task, in the order `troupe env list` prints them.
std::vector<registration> task_registrations();

/// Whether `id` is a MuJoCo task's id.
bool is_task(const std::string& id);

/// The compiled model and frame skip of the registered MuJoCo task `id`,
/// for benchmarks that step its model bare. errc::not_found naming the id
/// and the MuJoCo tasks when there is no such task.
result<task_physics> physics_of(const std::string& id);

} // namespace troupe::envs::mujoco
