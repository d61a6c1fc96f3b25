// What a process pays for the MuJoCo tasks before it uses one: registering
// and listing the environments compiles no model (the specs name the
// tasks' joints by hand), and a task's physics is found without making it.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "envs/mujoco/mujoco_env.hpp"
#include "envs/mujoco/tasks.hpp"
#include "envs/registry.hpp"
#include "tests/temp_folder.hpp"

extern char** environ;

using namespace troupe;
using namespace troupe::envs;

namespace {

// The test case that the fresh-process case below runs alone in a child.
constexpr const char* in_process_case =
  "registering and listing every environment and running a CartPole compiles no "
  "MuJoCo model";

} // namespace

TEST_CASE("registering and listing every environment and running a CartPole compiles "
          "no MuJoCo model") {
  const uint64_t before = mujoco::models_compiled();
  auto listed = registry();
  REQUIRE(listed.size() >= 14);
  for (const auto& id : registered_ids()) {
    CAPTURE(id);
    auto spec = find_spec(id);
    REQUIRE(spec);
    CHECK((*spec)->state_dim() == (*spec)->state_names.size());
  }
  CHECK(mujoco::task_registrations().size() == 9);
  CHECK(mujoco::is_task("Humanoid-v4"));
  CHECK_FALSE(mujoco::is_task("CartPole-v1"));

  auto cartpole = make_env("CartPole-v1");
  REQUIRE(cartpole);
  std::vector<float> obs(4);
  (*cartpole)->reset(7, obs.data());
  const float action = 1;
  CHECK((*cartpole)->step(&action, obs.data()));
  auto vector = make_vector_env("CartPole-v1", 4);
  REQUIRE(vector);
  (*vector)->reset(7);
  const float actions[4] = {0, 1, 1, 0};
  CHECK((*vector)->step(actions));

  CHECK(mujoco::models_compiled() == before);
}

TEST_CASE("a fresh process registers and lists the environments without compiling a "
          "MuJoCo model") {
  // In this process other cases may have compiled the models already (and
  // the registry is built once per process): the case above is run alone in
  // a child, where the registry is built from nothing.
  test::temp_folder dir("mujoco-startup");
  const auto out_path = dir.path / "child.txt";
  std::string self = "/proc/self/exe",
              filter = std::string("--test-case=") + in_process_case;
  std::vector<char*> argv = {self.data(), filter.data(), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, self.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  REQUIRE(rc == 0);
  int wstatus = 0;
  REQUIRE(waitpid(pid, &wstatus, 0) == pid);
  std::ifstream in(out_path);
  std::stringstream output;
  output << in.rdbuf();
  const std::string child_output = output.str();
  INFO("the child's output:\n", child_output);
  REQUIRE(WIFEXITED(wstatus));
  CHECK(WEXITSTATUS(wstatus) == 0);
  // It ran the case (a filter that matched nothing would pass too).
  CHECK(child_output.find("1 passed") != std::string::npos);
}

TEST_CASE("physics_of gives a task's built-in model and frame skip without making it") {
  struct expected {
    const char* id;
    const char* file;
    int frame_skip;
  };
  for (const auto& want :
       {expected{"InvertedPendulum-v4", "inverted_pendulum.xml", 2},
        expected{"HalfCheetah-v4", "half_cheetah.xml", 5},
        expected{"Hopper-v4", "hopper.xml", 4},
        expected{"Walker2d-v4", "walker2d.xml", 4},
        expected{"Swimmer-v4", "swimmer.xml", 4},
        expected{"Reacher-v4", "reacher.xml", 2},
        expected{"InvertedDoublePendulum-v4", "inverted_double_pendulum.xml", 5},
        expected{"Ant-v4", "ant.xml", 5}, expected{"Humanoid-v4", "humanoid.xml", 5}}) {
    CAPTURE(want.id);
    auto physics = mujoco::physics_of(want.id);
    REQUIRE(physics);
    CHECK(physics->model == mujoco::builtin_model(want.file).value());
    CHECK(physics->frame_skip == want.frame_skip);
  }
  auto unknown = mujoco::physics_of("CartPole-v1");
  REQUIRE_FALSE(unknown);
  CHECK(unknown.err().code == errc::not_found);
  CHECK(unknown.err().message.find("'CartPole-v1'") != std::string::npos);
  CHECK(unknown.err().message.find("Humanoid-v4") != std::string::npos);
}
