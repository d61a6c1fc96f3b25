#include "envs/mujoco/tasks.hpp"

#include <fmt/format.h>

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

namespace troupe::envs::mujoco {

result<task_physics> physics_of(const std::string& id) {
  std::vector<std::string> ids;
  for (const auto& r : task_registrations()) {
    if (r.spec.id != id) {
      ids.push_back(r.spec.id);
      continue;
    }
    // Every task is a mujoco_task, whose constructor records its physics.
    detail::take_last_task_made();
    auto made = r.make();
    auto physics = detail::take_last_task_made();
    TROUPE_CHECK(made && physics.model, "{}: a MuJoCo task made no mujoco_task", id);
    return physics;
  }
  return make_error(errc::not_found, "no MuJoCo task '{}' (MuJoCo tasks: {})", id,
                    fmt::join(ids, ", "));
}

} // namespace troupe::envs::mujoco
