#include "envs/mujoco/tasks.hpp"

#include "envs/mujoco/ant.hpp"
#include "envs/mujoco/half_cheetah.hpp"
#include "envs/mujoco/humanoid.hpp"
#include "envs/mujoco/inverted_pendulum.hpp"
#include "envs/mujoco/hopper.hpp"
#include "envs/mujoco/walker2d.hpp"
#include "envs/mujoco/swimmer.hpp"
#include "envs/mujoco/reacher.hpp"
#include "envs/mujoco/inverted_double_pendulum.hpp"

namespace troupe::envs::mujoco {

std::vector<registration> task_registrations() {
  // One line per task.
  return {model_registration<inverted_pendulum>(), model_registration<half_cheetah>(),
          model_registration<hopper>(),
          model_registration<walker2d>(),
          model_registration<swimmer>(),
          model_registration<reacher>(),
          model_registration<inverted_double_pendulum>(),
          model_registration<ant>(), model_registration<humanoid>()};
}

bool is_task(const std::string& id) {
  for (const auto& r : task_registrations())
    if (r.spec.id == id)
      return true;
  return false;
}

} // namespace troupe::envs::mujoco
