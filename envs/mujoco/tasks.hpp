// The MuJoCo tasks' registrations, which the registry adds to its built-ins.
#pragma once

#include <vector>

#include "envs/registry.hpp"

namespace troupe::envs::mujoco {

/// One registration per MuJoCo task, in the order `troupe env list` prints them.
std::vector<registration> task_registrations();

/// Whether `id` is a MuJoCo task's id.
bool is_task(const std::string& id);

} // namespace troupe::envs::mujoco
