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

namespace {

/// A task's spec, registration and physics, each read from the task's type.
struct task_entry {
  const env_spec& (*spec)();           ///< the spec, built once
  registration (*make_registration)(); ///< the spec and both adapters
  result<task_physics> (*physics)();   ///< its model (compiled on first use), frame skip
};

/// The built-in model and frame skip of Task, compiled on first use.
template <class Task>
result<task_physics> physics_of_task() {
  auto model = builtin_model(Task::model_file);
  if (!model)
    return model.err();
  return task_physics{*model, Task::frame_skip};
}

/// The entry of Task.
template <class Task>
constexpr task_entry entry() {
  return {&model_spec<Task>, &model_registration<Task>, &physics_of_task<Task>};
}

// One line per task, in the order `troupe env list` prints them.
constexpr task_entry tasks[] = {entry<inverted_pendulum>(),
                                entry<half_cheetah>(),
                                entry<hopper>(),
                                entry<walker2d>(),
                                entry<swimmer>(),
                                entry<reacher>(),
                                entry<inverted_double_pendulum>(),
                                entry<ant>(),
                                entry<humanoid>()};

} // namespace

std::vector<registration> task_registrations() {
  std::vector<registration> out;
  for (const auto& task : tasks)
    out.push_back(task.make_registration());
  return out;
}

bool is_task(const std::string& id) {
  for (const auto& task : tasks)
    if (task.spec().id == id)
      return true;
  return false;
}

result<task_physics> physics_of(const std::string& id) {
  std::vector<std::string> ids;
  for (const auto& task : tasks) {
    if (task.spec().id == id)
      return task.physics();
    ids.push_back(task.spec().id);
  }
  return make_error(errc::not_found, "no MuJoCo task '{}' (MuJoCo tasks: {})", id,
                    fmt::join(ids, ", "));
}

} // namespace troupe::envs::mujoco
