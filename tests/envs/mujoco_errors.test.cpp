// MuJoCo's fatal errors (mju_error) under troupe's handler: a provoked one
// (a model whose stack is too small for its contacts) becomes an error value
// naming the environment and MuJoCo's message, and the process goes on.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "envs/model.hpp"
#include "envs/mujoco/mujoco_env.hpp"

using namespace troupe;
using namespace troupe::envs;

namespace {

constexpr int boxes = 10;

// Ten free boxes over a plane, with a stack of 1000 doubles: enough to
// compile and to step them in the air, too small for their contacts, at
// which MuJoCo 2.2.2 stops with "Stack overflow" (mju_error).
const mujoco::model_ptr& stack_starved_model() {
  static const mujoco::model_ptr model = [] {
    std::string bodies;
    for (int b = 0; b < boxes; ++b)
      bodies += fmt::format("<body pos=\"{} 0 1\"><freejoint/>"
                            "<geom type=\"box\" size=\".1 .1 .1\"/></body>",
                            0.3 * b);
    auto m = mujoco::compile_model(
      "<mujoco><size nstack=\"1000\"/><worldbody>" + bodies +
        "<geom type=\"plane\" size=\"5 5 .1\"/></worldbody></mujoco>",
      "stack-starved boxes");
    REQUIRE(m);
    return *m;
  }();
  return model;
}

// A task on that model: observes qpos, never terminates on its own.
struct starved_boxes : mujoco::mujoco_task {
  static constexpr int nq = 7 * boxes, nv = 6 * boxes;

  starved_boxes() : mujoco_task(stack_starved_model(), 10) {}

  static env_spec make_spec() {
    constexpr float inf = std::numeric_limits<float>::infinity();
    return {"StarvedBoxes-v0", space::box(nq, -inf, inf), space::box(1, -1.0f, 1.0f),
            1000, mujoco::joint_state_names(*stack_starved_model())};
  }

  void reset(rng&) noexcept {
    const std::vector<double> zero(nq, 0.0);
    reset_to(zero.data(), zero.data());
  }

  model_step step(const float* action) noexcept { return {0.0, !simulate(action)}; }

  void observe(float* obs) const noexcept {
    for (int i = 0; i < nq; ++i)
      obs[i] = static_cast<float>(data().qpos[i]);
  }

  using mujoco_task::get_state;
  using mujoco_task::set_state;
};

// A state of the boxes at height z (qpos, qvel, qacc_warmstart), falling
// at `speed`.
std::vector<double> boxes_at(double z, double speed) {
  const mjModel& m = *stack_starved_model();
  std::vector<double> state(static_cast<size_t>(m.nq + 2 * m.nv), 0.0);
  std::copy(m.qpos0, m.qpos0 + m.nq, state.begin());
  for (int b = 0; b < boxes; ++b) {
    state[static_cast<size_t>(7 * b + 2)] = z;
    state[static_cast<size_t>(m.nq + 6 * b + 2)] = -speed;
  }
  return state;
}

} // namespace

TEST_CASE("a MuJoCo fatal error in a task resets its simulation and is kept as its "
          "failure") {
  starved_boxes task;
  // troupe's handler is in place (none was set before in this program).
  const bool handler_installed = mju_user_error != nullptr;
  CHECK(handler_installed);
  rng r;
  task.reset(r);
  CHECK_FALSE(task.failed());

  // Boxes sunk into the plane: set_state's mj_forward meets their contacts.
  task.set_state(boxes_at(0.05, 0.0).data());
  REQUIRE(task.failed());
  const std::string message = task.take_failure();
  CHECK(message.find("MuJoCo error in set_state") != std::string::npos);
  CHECK(message.find("Stack overflow") != std::string::npos);
  CHECK_FALSE(task.failed());
  CHECK(task.take_failure().empty());
  // The simulation is as mj_resetData leaves it: the stack free, qpos0.
  const mjModel& m = task.model();
  CHECK(task.data().pstack == 0);
  for (int i = 0; i < m.nq; ++i)
    CHECK(task.data().qpos[i] == m.qpos0[i]);

  // Falling boxes are stepped until they touch the plane.
  task.set_state(boxes_at(0.3, 10.0).data());
  REQUIRE_FALSE(task.failed());
  const float action = 0;
  int steps = 0;
  while (!task.failed() && steps < 10) {
    task.step(&action);
    ++steps;
  }
  REQUIRE(task.failed());
  CHECK(task.take_failure().find("MuJoCo error in step: Stack overflow") !=
        std::string::npos);
  CHECK(task.data().pstack == 0);
  // Reset, it steps again (in the air).
  task.reset(r);
  CHECK(task.step(&action).terminated == false);
  CHECK_FALSE(task.failed());
}

TEST_CASE("a MuJoCo fatal error is an environment's error value and the environment "
          "needs a reset") {
  model_env<starved_boxes> env;
  std::vector<float> obs(starved_boxes::nq);
  env.reset(3, obs.data());
  const float action = 0;
  REQUIRE(env.step(&action, obs.data()));

  auto sunk = env.set_state(boxes_at(0.05, 0.0), obs.data());
  REQUIRE_FALSE(sunk);
  CHECK(sunk.err().code == errc::invalid_argument);
  CHECK(sunk.err().message.find("StarvedBoxes-v0: MuJoCo error in set_state: Stack "
                                "overflow") != std::string::npos);
  auto refused = env.step(&action, obs.data());
  REQUIRE_FALSE(refused);
  CHECK(refused.err().message.find("before reset()") != std::string::npos);

  REQUIRE(env.set_state(boxes_at(0.3, 10.0), obs.data()));
  result<step_result> out = step_result{};
  for (int t = 0; t < 10 && out; ++t)
    out = env.step(&action, obs.data());
  REQUIRE_FALSE(out);
  CHECK(out.err().message.find("StarvedBoxes-v0: MuJoCo error in step: Stack overflow") !=
        std::string::npos);
  CHECK_FALSE(env.step(&action, obs.data()));
  env.reset(obs.data());
  CHECK(env.step(&action, obs.data()));
}

TEST_CASE("a MuJoCo fatal error in a vector env fails the step naming the environment, "
          "which starts over") {
  model_vector_env<starved_boxes> envs(2, 1);
  envs.reset(5);
  const float actions[2] = {0, 0};
  // Dropped from a height of 1 m, the boxes reach the plane within 50 steps
  // of 20 ms; both environments fail at the same step, the first is named.
  int t = 0;
  status stepped;
  for (; t < 50 && stepped; ++t)
    stepped = envs.step(actions);
  REQUIRE_FALSE(stepped);
  CHECK(stepped.err().code == errc::invalid_argument);
  CHECK(
    stepped.err().message.find("StarvedBoxes-v0: environment 0: MuJoCo error in step: "
                               "Stack overflow") != std::string::npos);
  CHECK(envs.terminated()[0] == 1);
  CHECK(envs.terminated()[1] == 1);
  // The next step resets them, and the boxes fall again.
  REQUIRE(envs.step(actions));
  CHECK(envs.autoreset()[0] == 1);
  CHECK(envs.autoreset()[1] == 1);
  REQUIRE(envs.step(actions));
  CHECK(envs.observations()[2] < 1.0f);
}
