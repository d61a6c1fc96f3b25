// The C++ embedding API around training: environments registered with a
// context-carrying factory, sessions opened from configs (bad ones open
// nothing), a short run on a registered environment, checkpoints and stop on
// request, unregistering.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include <troupe/troupe.h>
#include <troupe/troupe.hpp>

#include "envs/registry.hpp"
#include "tests/temp_folder.hpp"

namespace fs = std::filesystem;
using troupe::test::fresh_seed;
using troupe::test::temp_folder;

namespace {

// A walker on a line: action 1 steps right, 0 left; reward 1 on the goal at
// +goal, which ends the episode. The context counts instances and steps.
struct walk_context {
  std::atomic<int> made{0};
  std::atomic<int64_t> steps{0};
  std::atomic<int64_t> resets{0};
  float goal = 3;
};

class walk final : public troupe::environment {
public:
  explicit walk(walk_context& c) : c_(c) { ++c_.made; }
  void reset(uint64_t seed, float* obs) override {
    ++c_.resets;
    x_ = static_cast<float>(seed % 3) - 1.0f;
    obs[0] = x_;
    obs[1] = c_.goal;
  }
  troupe::status step(const float* action, float* obs, double& reward, bool& terminated,
                      bool& truncated) override {
    ++c_.steps;
    x_ += action[0] > 0.5f ? 1.0f : -1.0f;
    obs[0] = x_;
    obs[1] = c_.goal;
    terminated = x_ >= c_.goal;
    truncated = false;
    reward = terminated ? 1.0 : 0.0;
    return troupe::ok_status();
  }

private:
  walk_context& c_;
  float x_ = 0;
};

troupe::env_description walk_description(const std::string& id) {
  troupe::env_description d;
  d.id = id;
  d.obs_low = {-100, -100};
  d.obs_high = {100, 100};
  d.num_actions = 2;
  d.max_episode_steps = 20;
  return d;
}

// An id no other case of this process registers.
std::string fresh_id(const char* base) {
  return fmt::format("{}{}-v0", base, fresh_seed() % 1000000);
}

// One type for a count of actions, wherever the API states one.
static_assert(std::is_same_v<decltype(troupe::env_description::num_actions),
                             decltype(std::declval<troupe::policy>().num_actions())>);
static_assert(std::is_same_v<decltype(troupe_env_description::num_actions),
                             decltype(troupe_policy_info::num_actions)>);

} // namespace

TEST_CASE("an environment registered with a factory is listed, made and stepped with its "
          "context") {
  walk_context context;
  context.goal = 2;
  const auto id = fresh_id("Walk");
  auto ok = troupe::register_environment(
    walk_description(id), [&context] { return std::make_unique<walk>(context); });
  REQUIRE_MESSAGE(ok.ok(), ok.err().message);
  auto ids = troupe::environment_ids();
  CHECK(std::find(ids.begin(), ids.end(), id) != ids.end());
  CHECK(ids.front() == "CartPole-v1"); // built-in ones first

  auto env = troupe::envs::make_env(id);
  REQUIRE(env.ok());
  CHECK(context.made == 1);
  float obs[2], first[2];
  // The adapter derives the episode's seed from the reset seed: the same
  // seed starts the same episode.
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  (*env)->reset(seed, first);
  (*env)->reset(seed, obs);
  CHECK(obs[0] == first[0]);
  CHECK((obs[0] == -1.0f || obs[0] == 0.0f || obs[0] == 1.0f));
  CHECK(obs[1] == 2.0f);
  const int start = static_cast<int>(obs[0]);
  // Walk right until the goal: terminated with reward 1 after goal - x steps.
  float right = 1;
  int steps = 0;
  troupe::envs::step_result out;
  do {
    auto s = (*env)->step(&right, obs);
    REQUIRE_MESSAGE(s.ok(), s.err().message);
    out = *s;
    ++steps;
  } while (!out.terminated && steps < 10);
  CHECK(out.terminated);
  CHECK(out.reward == 1.0);
  CHECK(obs[0] == 2.0f);
  CHECK(steps == 2 - start);
  CHECK(context.steps == steps);

  // The batch form: one instance per environment, time limit and autoreset.
  auto batch = troupe::envs::make_vector_env(id, 3, 1);
  REQUIRE(batch.ok());
  CHECK(context.made == 4);
  (*batch)->reset(11);
  std::vector<float> left(3, 0.0f);
  for (int t = 0; t < 20; ++t)
    REQUIRE((*batch)->step(left.data()).ok());
  for (size_t i = 0; i < 3; ++i) {
    CHECK((*batch)->truncated()[i] == 1); // walking left never reaches the goal
    CHECK((*batch)->terminated()[i] == 0);
  }
  REQUIRE((*batch)->step(left.data()).ok());
  for (size_t i = 0; i < 3; ++i)
    CHECK((*batch)->autoreset()[i] == 1);
}

TEST_CASE("max_episode_steps = 0 registers an environment without a time limit") {
  walk_context context;
  auto d = walk_description(fresh_id("NoLimit"));
  d.max_episode_steps = 0;
  auto ok = troupe::register_environment(
    d, [&context] { return std::make_unique<walk>(context); });
  REQUIRE_MESSAGE(ok.ok(), ok.err().message);
  auto env = troupe::envs::make_env(d.id);
  REQUIRE(env.ok());
  float obs[2], left = 0;
  (*env)->reset(fresh_seed(), obs);
  // Walking left never reaches the goal; without a limit nothing cuts it short.
  for (int t = 0; t < 200; ++t) {
    auto s = (*env)->step(&left, obs);
    REQUIRE(s.ok());
    REQUIRE_FALSE(s->truncated);
    REQUIRE_FALSE(s->terminated);
  }
  d.max_episode_steps = -1;
  d.id = fresh_id("Negative");
  auto negative = troupe::register_environment(
    d, [&context] { return std::make_unique<walk>(context); });
  REQUIRE_FALSE(negative.ok());
  CHECK(negative.err().message.find("max_episode_steps must be >= 0, got -1") !=
        std::string::npos);
  CHECK(troupe::unregister_environment(d.id).err().code == troupe::errc::not_found);
}

TEST_CASE("register_environment refuses a taken id, bad bounds and an empty factory") {
  walk_context context;
  auto factory = [&context] { return std::make_unique<walk>(context); };

  auto taken = troupe::register_environment(walk_description("CartPole-v1"), factory);
  REQUIRE_FALSE(taken.ok());
  CHECK(taken.err().code == troupe::errc::invalid_argument);
  CHECK(taken.err().message.find("'CartPole-v1'") != std::string::npos);
  CHECK(taken.err().message.find("already registered") != std::string::npos);

  auto d = walk_description(fresh_id("BadBounds"));
  d.obs_low = {500, 0};
  auto bounds = troupe::register_environment(d, factory);
  REQUIRE_FALSE(bounds.ok());
  CHECK(bounds.err().message.find("obs bounds 0: low 500 must be <= high 100") !=
        std::string::npos);

  d = walk_description(fresh_id("Sizes"));
  d.obs_high = {1};
  auto sizes = troupe::register_environment(d, factory);
  REQUIRE_FALSE(sizes.ok());
  CHECK(sizes.err().message.find("got 2 and 1") != std::string::npos);

  d = walk_description(fresh_id("BoxNoBounds"));
  d.num_actions = 0;
  auto box = troupe::register_environment(d, factory);
  REQUIRE_FALSE(box.ok());
  CHECK(box.err().message.find("action_low and action_high") != std::string::npos);

  auto empty = troupe::register_environment(walk_description(fresh_id("Empty")), {});
  REQUIRE_FALSE(empty.ok());
  CHECK(empty.err().message.find("the factory is empty") != std::string::npos);

  // Nothing of the refused ones was registered.
  auto ids = troupe::environment_ids();
  for (auto& id : ids)
    CHECK(id.rfind("BadBounds", 0) != 0);
}

TEST_CASE("a bad config opens no session and the error names file:line and the key") {
  temp_folder dir("embed-config");
  auto path = dir.path / "bad.toml";
  std::ofstream(path) << "[run]\nseed = 1\n\n[algo]\nlearning_rate = -3.0\n";
  auto opened = troupe::session::open(path.string());
  REQUIRE_FALSE(opened.ok());
  CHECK(opened.err().code == troupe::errc::bad_config);
  CHECK(opened.err().message.find(path.string() + ":5") != std::string::npos);
  CHECK(opened.err().message.find("algo.learning_rate") != std::string::npos);
  CHECK(opened.err().message.find("-3") != std::string::npos);

  auto text = troupe::session::open_toml("[env]\nid = \"NoSuchGame-v9\"\n", "game.toml");
  REQUIRE_FALSE(text.ok());
  CHECK(text.err().code == troupe::errc::bad_config);
  CHECK(text.err().message.find("game.toml:2") != std::string::npos);
  CHECK(text.err().message.find("env.id") != std::string::npos);
  CHECK(text.err().message.find("NoSuchGame-v9") != std::string::npos);

  auto missing = troupe::session::open((dir.path / "missing.toml").string());
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.err().message.find("missing.toml") != std::string::npos);

  auto no_run = troupe::session::resume((dir.path / "no-run").string());
  REQUIRE_FALSE(no_run.ok());
  CHECK(no_run.err().code == troupe::errc::not_found);
}

TEST_CASE("a session trains a registered environment on its own thread and closes with "
          "a final checkpoint") {
  temp_folder dir("embed-session");
  walk_context context;
  const auto id = fresh_id("SessionWalk");
  REQUIRE(troupe::register_environment(walk_description(id), [&context] {
            return std::make_unique<walk>(context);
          }).ok());
  const std::string toml = fmt::format(
    "[run]\nname = \"walk\"\nseed = {}\noutput_dir = \"{}\"\ncheckpoint_every_updates = "
    "2\n"
    "[env]\nid = \"{}\"\nnum_envs = 2\n"
    "[algo]\nname = \"ppo\"\nmode = \"sync\"\ntotal_env_steps = 1024\nnum_steps = 64\n",
    fresh_seed() % 1000, (dir.path / "runs").string(), id);
  auto opened = troupe::session::open_toml(toml, "walk.toml");
  REQUIRE_MESSAGE(opened.ok(), (opened ? std::string() : opened.err().message));
  auto& s = *opened;
  CHECK_FALSE(s.progress().running);
  CHECK_FALSE(s.progress().finished);
  auto w = s.wait(std::chrono::milliseconds(0));
  CHECK_FALSE(w.ok()); // not started

  REQUIRE(s.start().ok());
  auto again = s.start();
  CHECK(again.err().message.find("already started") != std::string::npos);
  // Bounded: the run is 1024 steps; 300 s covers a loaded machine many times over.
  auto finished = s.wait(std::chrono::seconds(300));
  REQUIRE(finished.ok());
  REQUIRE_MESSAGE(*finished, "training did not end within 300 s");
  auto closed = s.close();
  REQUIRE_MESSAGE(closed.ok(), (closed ? std::string() : closed.err().message));
  CHECK(closed->finished);
  CHECK(closed->env_steps >= 1024);
  // Every step training counted stepped the game or reset it (next-step autoreset).
  CHECK(context.steps > 0);
  CHECK(static_cast<uint64_t>(context.steps + context.resets) >= closed->env_steps);
  CHECK(context.made >= 2);
  const auto run = fs::path(s.run_dir());
  CHECK(run.parent_path() == dir.path / "runs");
  // The final checkpoint is a deployable policy for this environment.
  auto p = troupe::policy::load(run.string());
  REQUIRE_MESSAGE(p.ok(), (p ? std::string() : p.err().message));
  CHECK(p->obs_dim() == 2);
  CHECK(p->num_actions() == 2);
  auto closed_again = s.close();
  CHECK(closed_again.err().message.find("already closed") != std::string::npos);
}

TEST_CASE("a running session saves a checkpoint on request and stops on request") {
  temp_folder dir("embed-stop");
  const std::string toml =
    fmt::format("[run]\nseed = {}\noutput_dir = \"{}\"\ncheckpoint_every_updates = 0\n"
                "[env]\nid = \"CartPole-v1\"\nnum_envs = 2\n"
                "[algo]\nname = \"ppo\"\nmode = \"sync\"\ntotal_env_steps = 100000000\n"
                "num_steps = 32\n",
                fresh_seed() % 1000, (dir.path / "runs").string());
  auto opened = troupe::session::open_toml(toml, "stop.toml");
  REQUIRE_MESSAGE(opened.ok(), (opened ? std::string() : opened.err().message));
  troupe::session s = std::move(*opened);
  // Before start: errors, not crashes.
  CHECK(s.request_stop().err().message.find("not started") != std::string::npos);
  CHECK(s.save_checkpoint().err().message.find("not started") != std::string::npos);
  REQUIRE(s.start().ok());
  // Bounded: updates rise within a few seconds; 300 s covers a loaded machine.
  bool learning = false;
  for (int i = 0; i < 3000 && !learning; ++i) {
    learning = s.progress().updates >= 2;
    if (!learning)
      (void)s.wait(std::chrono::milliseconds(100));
  }
  REQUIRE_MESSAGE(learning, "no 2 updates within 300 s of start()");
  auto saved = s.save_checkpoint();
  REQUIRE_MESSAGE(saved.ok(), (saved ? std::string() : saved.err().message));
  CHECK(fs::exists(fs::path(*saved) / "manifest.txt"));
  CHECK(fs::path(*saved).parent_path().parent_path() == fs::path(s.run_dir()));
  REQUIRE(s.request_stop().ok());
  auto ended = s.wait(std::chrono::seconds(300));
  REQUIRE(ended.ok());
  REQUIRE_MESSAGE(*ended, "training did not stop within 300 s of request_stop()");
  auto closed = s.close();
  REQUIRE_MESSAGE(closed.ok(), (closed ? std::string() : closed.err().message));
  CHECK(closed->finished);
  CHECK(closed->updates >= 2);
  CHECK(closed->env_steps < 100000000u);
  // The run's folder resumes.
  auto resumed = troupe::session::resume(s.run_dir());
  CHECK_MESSAGE(resumed.ok(), (resumed ? std::string() : resumed.err().message));
}

TEST_CASE("unregister_environment removes an embedder's id and refuses built-in and "
          "unknown ones") {
  walk_context context;
  const std::string id = fmt::format("Unreg{}-v0", fresh_seed() % 100000);
  REQUIRE(troupe::register_environment(walk_description(id), [&] {
            return std::make_unique<walk>(context);
          }).ok());
  auto ids = troupe::environment_ids();
  CHECK(std::find(ids.begin(), ids.end(), id) != ids.end());
  REQUIRE(troupe::unregister_environment(id).ok());
  ids = troupe::environment_ids();
  CHECK(std::find(ids.begin(), ids.end(), id) == ids.end());
  auto again = troupe::unregister_environment(id);
  CHECK(again.err().code == troupe::errc::not_found);
  CHECK(again.err().message.find(id) != std::string::npos);
  auto builtin = troupe::unregister_environment("CartPole-v1");
  CHECK_FALSE(builtin.ok());
  CHECK(builtin.err().message.find("CartPole-v1") != std::string::npos);
  // Closing a session that never started trains nothing.
  auto opened = troupe::session::open_toml("[run]\nseed = 3\n", "plain.toml");
  REQUIRE(opened.ok());
  auto closed = opened->close();
  REQUIRE(closed.ok());
  CHECK(closed->env_steps == 0);
  CHECK_FALSE(closed->running);
}

TEST_CASE("environments register, unregister and are listed from several threads at "
          "once, through the C++ and the C API") {
  walk_context context;
  const std::string base = fmt::format("Conc{}", fresh_seed() % 1000000);
  constexpr int threads = 4, per_thread = 40;
  // Problems seen on the threads, checked after they joined (doctest's
  // assertions are not thread-safe).
  std::mutex mutex;
  std::vector<std::string> problems;
  auto problem = [&](std::string text) {
    std::lock_guard<std::mutex> lock(mutex);
    problems.push_back(std::move(text));
  };
  std::vector<std::atomic<int>> contested_wins(per_thread);
  static const float low[2] = {-100, -100}, high[2] = {100, 100};
  troupe_env_functions table{};
  table.create = [](void*) -> void* { return nullptr; };
  table.destroy = [](void*, void*) {};
  table.reset = [](void*, void*, uint64_t, float*) {};
  table.step = [](void*, void*, const float*, float*, double*, int*, int*) { return 1; };

  // A session trains meanwhile: registering is not limited to quiet times.
  temp_folder dir("embed-concurrent");
  auto opened = troupe::session::open_toml(
    fmt::format("[run]\nseed = 4\noutput_dir = \"{}\"\ncheckpoint_every_updates = 0\n"
                "[env]\nid = \"CartPole-v1\"\nnum_envs = 2\n"
                "[algo]\nname = \"ppo\"\nmode = \"sync\"\ntotal_env_steps = 100000000\n"
                "num_steps = 16\n",
                (dir.path / "runs").string()),
    "concurrent.toml");
  REQUIRE_MESSAGE(opened.ok(), (opened ? std::string() : opened.err().message));
  REQUIRE(opened->start().ok());

  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        const auto own = fmt::format("{}-t{}-{}-v0", base, t, i);
        troupe::status s;
        if (i % 3 == 0) {
          s = troupe::register_environment(walk_description(own), [&context] {
            return std::make_unique<walk>(context);
          });
        } else if (i % 3 == 1) {
          s = troupe::register_environment_spaces(walk_description(own));
        } else {
          troupe_env_description d{};
          d.id = own.c_str();
          d.obs_dim = 2;
          d.obs_low = low;
          d.obs_high = high;
          d.num_actions = 2;
          d.max_episode_steps = 20;
          if (troupe_register_environment(TROUPE_ABI_VERSION, &d, &table, nullptr) !=
              TROUPE_OK)
            s = troupe::error{troupe::errc::invalid_argument, troupe_last_error()};
        }
        if (!s.ok())
          problem(own + ": " + s.err().message);
        // Every thread claims the same contested id: exactly one may win.
        const auto contested = fmt::format("{}-contested-{}-v0", base, i);
        if (troupe::register_environment_spaces(walk_description(contested)).ok())
          ++contested_wins[i];
        auto ids = troupe::environment_ids();
        if (std::find(ids.begin(), ids.end(), own) == ids.end())
          problem(own + " is not listed after its registration");
        if (!troupe::envs::find_spec(own).ok())
          problem(own + " is not found after its registration");
        if (i % 2 == 1) {
          if (auto u = troupe::unregister_environment(own); !u.ok())
            problem(own + ": " + u.err().message);
        }
      }
    });
  for (auto& w : workers)
    w.join();
  CHECK(opened->progress().running);
  auto closed = opened->close();
  CHECK_MESSAGE(closed.ok(), (closed ? std::string() : closed.err().message));

  for (auto& p : problems)
    FAIL_CHECK(p);
  auto ids = troupe::environment_ids();
  for (int i = 0; i < per_thread; ++i) {
    CAPTURE(i);
    CHECK(contested_wins[i].load() == 1);
    for (int t = 0; t < threads; ++t) {
      const auto own = fmt::format("{}-t{}-{}-v0", base, t, i);
      CHECK((std::find(ids.begin(), ids.end(), own) != ids.end()) == (i % 2 == 0));
      if (i % 2 == 0)
        CHECK(troupe::unregister_environment(own).ok());
    }
    const auto contested = fmt::format("{}-contested-{}-v0", base, i);
    CHECK(troupe::unregister_environment(contested).ok());
  }
  CHECK(context.made == 0); // registering makes no instance
}
