// Environment runners over a game's callback environment (registered by id):
// batches, an error from the game ending the runner with its message, and
// resume with or without the game's state.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/env_runner.hpp"
#include "actors/messages.hpp"
#include "envs/registry.hpp"
#include "base/rng.hpp"
#include "tests/actors/ask.hpp"
#include "tests/envs/drift_game.hpp"
#include "tests/seed.hpp"

using namespace troupe;
using namespace troupe::actors;
using troupe::test::ask;
using troupe::test::fresh_seed;
using troupe::test::scoped_drift_env;

namespace {

struct fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::vector<std::string> log;
  std::mutex log_mtx;

  fixture() {
    register_messages(cfg);
    cfg.set("scheduler.max-threads", 2);
    sys = std::make_unique<caf::actor_system>(cfg);
  }

  std::function<void(const std::string&)> logger() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> g(log_mtx);
      log.push_back(line);
    };
  }

  std::string all_log() {
    std::lock_guard<std::mutex> g(log_mtx);
    std::string out;
    for (auto& l : log)
      out += l + "\n";
    return out;
  }
};

std::vector<trajectory_batch> collect(caf::scoped_actor& self, const caf::actor& runner,
                                      uint64_t n) {
  CHECK(ask<uint64_t>(self, runner, collect_atom::value, n) == n);
  std::vector<trajectory_batch> out;
  for (uint64_t k = 0; k < n; ++k)
    self->receive([&](trajectory_batch& b) { out.push_back(std::move(b)); },
                  test::fail_after("a collected trajectory batch"));
  return out;
}

caf::actor spawn_runner(fixture& fx, caf::scoped_actor& self, const std::string& id,
                        size_t n, uint64_t seed,
                        std::optional<env_runner_state> start = {}) {
  std::shared_ptr<envs::vector_env> vec = envs::make_vector_env(id, n).value();
  env_runner_options o;
  o.name = "drift-runner";
  o.seed = seed;
  o.steps_per_batch = 16;
  o.log = fx.logger();
  o.start_state = std::move(start);
  return spawn_env_runner(*fx.sys, o, vec, make_random_policy(vec->spec().action_space),
                          caf::actor_cast<caf::actor>(self));
}

// The first observation of the drift game for episode seed `s`, in float64.
std::pair<double, double> drift_start(uint64_t episode_seed) {
  base::rng g(episode_seed);
  const double x = g.uniform(-0.5, 0.5);
  return {x, g.uniform(-0.05, 0.05)};
}

} // namespace

TEST_CASE("a runner over a callback env without state resumes with fresh episodes and "
          "continued counters") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  scoped_drift_env game("DriftRunner-v0", false);
  REQUIRE(game.registered());
  fixture fx;
  caf::scoped_actor self{*fx.sys};
  const size_t n = 3;
  auto a = spawn_runner(fx, self, "DriftRunner-v0", n, seed);
  auto first = collect(self, a, 2);
  auto saved = ask<env_runner_state>(self, a, state_atom::value);
  self->send_exit(a, caf::exit_reason::user_shutdown);
  CHECK_FALSE(saved.env.with_state);
  CHECK(saved.env.rng.empty());
  CHECK(saved.status.batches == 2);

  const uint64_t resumed_seed = seed ^ 0x5555;
  auto b = spawn_runner(fx, self, "DriftRunner-v0", n, resumed_seed, saved);
  auto more = collect(self, b, 3); // 48 steps: every episode hits the limit of 40
  auto status = ask<env_runner_status>(self, b, status_atom::value);
  self->send_exit(b, caf::exit_reason::user_shutdown);
  CHECK(more[0].sequence == 2);
  CHECK(status.batches == 5);
  CHECK(status.env_steps == 5 * 16 * n);
  CHECK(status.episodes == saved.status.episodes + [&] {
    uint64_t e = 0;
    for (auto& batch : more)
      e += batch.episode_returns.size();
    return e;
  }());

  // Fresh episodes: environment i reset with resume_seed + i, whose first
  // episode seed is the first draw of rng(that seed), as documented.
  const uint64_t base =
    base::rng(resumed_seed ^ (uint64_t{2} * 0x9e3779b97f4a7c15ull)).next();
  CHECK(resume_seed(resumed_seed, 2) == base);
  for (size_t i = 0; i < n; ++i) {
    CAPTURE(i);
    auto [x, v] = drift_start(base::rng(base + i).next());
    CHECK(more[0].observations[i * 2] == static_cast<float>(x));
    CHECK(more[0].observations[i * 2 + 1] == static_cast<float>(v));
  }
  // The episode returns under way restarted at 0: every episode finished
  // after the resume returns the sum of its rewards counted from the resume
  // (or from its own start), in the order the batches report them.
  std::vector<double> since(n, 0.0);
  std::vector<double> expected, got;
  for (auto& batch : more) {
    for (size_t t = 0; t < batch.steps; ++t)
      for (size_t i = 0; i < n; ++i) {
        const size_t k = t * n + i;
        if (batch.autoreset[k])
          continue;
        since[i] += batch.rewards[k];
        if (batch.terminated[k] || batch.truncated[k]) {
          expected.push_back(since[i]);
          since[i] = 0.0;
        }
      }
    got.insert(got.end(), batch.episode_returns.begin(), batch.episode_returns.end());
  }
  REQUIRE(expected.size() >= n); // the time limit of 40 ends every first episode
  REQUIRE(got.size() == expected.size());
  for (size_t k = 0; k < got.size(); ++k)
    CHECK(got[k] == doctest::Approx(expected[k]).epsilon(1e-12));
  CHECK(fx.all_log().find("saved no environment state") != std::string::npos);
  CHECK(first.size() == 2);
}

TEST_CASE("a runner over a callback env with state callbacks resumes mid-episode bit for "
          "bit") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  scoped_drift_env game("DriftRunnerState-v0", true);
  REQUIRE(game.registered());
  fixture fx;
  caf::scoped_actor self{*fx.sys};
  const size_t n = 3;
  auto a = spawn_runner(fx, self, "DriftRunnerState-v0", n, seed);
  collect(self, a, 1 + seed % 3);
  auto saved = ask<env_runner_state>(self, a, state_atom::value);
  CHECK(saved.env.with_state);
  auto go_on = collect(self, a, 2);
  self->send_exit(a, caf::exit_reason::user_shutdown);
  auto b = spawn_runner(fx, self, "DriftRunnerState-v0", n, seed + 99, saved);
  auto resumed = collect(self, b, 2);
  self->send_exit(b, caf::exit_reason::user_shutdown);
  for (size_t k = 0; k < 2; ++k) {
    CAPTURE(k);
    CHECK(resumed[k].sequence == go_on[k].sequence);
    CHECK(resumed[k].observations == go_on[k].observations);
    CHECK(resumed[k].actions == go_on[k].actions);
    CHECK(resumed[k].rewards == go_on[k].rewards);
    CHECK(resumed[k].episode_returns == go_on[k].episode_returns);
  }
}

TEST_CASE(
  "a game that returns a NaN reward ends its runner with an error naming the env, "
  "the step and the value") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  const int bad_step = 5 + static_cast<int>(seed % 20);
  REQUIRE(envs::register_env(
    envs::callback_registration(test::drift_spec("DriftPoison-v0", false), [bad_step] {
      return test::drift_callbacks(false, -1, bad_step);
    })));
  fixture fx;
  caf::scoped_actor self{*fx.sys};
  auto runner = spawn_runner(fx, self, "DriftPoison-v0", 2, seed);
  (void)envs::unregister_env("DriftPoison-v0");
  self->monitor(runner);
  self->send(runner, collect_atom::value, uint64_t{4});
  std::string message;
  bool down = false;
  while (!down)
    self->receive([&](trajectory_batch&) {}, [&](uint64_t) {},
                  [&](caf::error& e) { message = fx.sys->render(e); },
                  [&](caf::down_msg& d) {
                    down = true;
                    message = error_message(*fx.sys, d.reason);
                  },
                  test::fail_after("the runner over a poisoned game to end"));
  CAPTURE(message);
  CHECK(message.find("drift-runner") != std::string::npos);
  CHECK(message.find("DriftPoison-v0") != std::string::npos);
  CHECK(message.find("reward must be finite") != std::string::npos);
  CHECK(message.find("nan") != std::string::npos);
  CHECK(message.find("of batch") != std::string::npos);
  CHECK(message.find("step (episode") != std::string::npos);
}
