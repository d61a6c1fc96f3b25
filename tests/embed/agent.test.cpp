// The game-driven form through the public C++ API: a session's agent acts
// and reports from the test's own loop (CartPole stepped by the caller), its
// errors name the call, slot, rule and value, the learners learn from what
// the game reports, and a slot whose thread stops calling stalls nothing.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include <troupe/troupe.hpp>

#include "envs/registry.hpp"
#include "tests/seed.hpp"
#include "tests/temp_folder.hpp"

namespace fs = std::filesystem;
using troupe::test::fresh_seed;
using troupe::test::temp_folder;

namespace {

std::string game_config(const temp_folder& dir, uint64_t seed) {
  return fmt::format(
    "[run]\nseed = {}\noutput_dir = \"{}\"\ncheckpoint_every_updates = 0\n"
    "[env]\nid = \"CartPole-v1\"\nnum_envs = 2\n"
    "[algo]\nname = \"ppo\"\nmode = \"sync\"\n"
    "total_env_steps = 100000000\nnum_steps = 16\n",
    seed, (dir.path / "runs").string());
}

bool contains(const troupe::status& s, const std::string& text) {
  return !s.ok() && s.err().message.find(text) != std::string::npos;
}

} // namespace

TEST_CASE("a game-driven session acts from the caller's loop and learns from what it "
          "reports") {
  temp_folder dir("embed-agent");
  auto opened =
    troupe::session::open_toml(game_config(dir, fresh_seed() % 1000), "game.toml");
  REQUIRE_MESSAGE(opened.ok(), (opened ? std::string() : opened.err().message));
  troupe::session s = std::move(*opened);
  constexpr size_t slots = 3;
  auto made = s.make_agent(slots);
  REQUIRE_MESSAGE(made.ok(), (made ? std::string() : made.err().message));
  troupe::agent agent = *made;
  CHECK(agent.slots() == slots);
  CHECK(agent.obs_dim() == 4);
  CHECK(agent.action_dim() == 1);
  CHECK(contains(s.make_agent(2).err(), "already has an agent of 3 slots"));

  float obs[4] = {0, 0, 0, 0}, action = -1;
  // Before start(): the agent says so.
  CHECK(contains(agent.act(0, obs, &action), "has not started"));
  REQUIRE(s.start().ok());
  CHECK(contains(s.make_agent(2).err(), "before start()"));

  // Errors name the call, the slot and the value; the agent goes on.
  CHECK(contains(agent.act(slots, obs, &action), "slot"));
  float bad[4] = {0, std::numeric_limits<float>::quiet_NaN(), 0, 0};
  CHECK(contains(agent.act(0, bad, &action), "nan"));
  CHECK_FALSE(agent.report(1, 1.0, false, false).ok()); // no act before it
  REQUIRE(agent.act(1, obs, &action).ok());
  CHECK(contains(agent.act(1, obs, &action), "report")); // act twice without report
  REQUIRE(agent.report(1, 1.0, false, false).ok());

  // The game: CartPole stepped by the caller, one environment per slot.
  std::vector<std::unique_ptr<troupe::envs::env>> games;
  std::vector<std::vector<float>> o(slots, std::vector<float>(4));
  for (size_t i = 0; i < slots; ++i) {
    auto e = troupe::envs::make_env("CartPole-v1");
    REQUIRE(e.ok());
    games.push_back(std::move(*e));
    games[i]->reset(100 + i, o[i].data());
  }
  uint64_t acted = 0;
  bool learned = false;
  // The last slot's "game thread" acts once and then stops calling (it never
  // reports): the other slots' transitions must keep training going.
  const size_t stalled = slots - 1;
  REQUIRE(agent.act(stalled, o[stalled].data(), &action).ok());
  ++acted;
  // The game never waits for the learner (a full queue drops segments), so
  // the bound is time, not steps: 3 updates need a few thousand steps and
  // well under a second; 2 minutes is far beyond, even under a sanitizer on
  // a loaded machine.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  for (uint64_t step = 0; !learned; ++step) {
    if (step % 512 == 0 && std::chrono::steady_clock::now() > deadline)
      break;
    const size_t i = step % (slots - 1);
    REQUIRE(agent.act(i, o[i].data(), &action).ok());
    ++acted;
    auto r = games[i]->step(&action, o[i].data());
    REQUIRE(r.ok());
    float final_obs[4];
    std::copy(o[i].begin(), o[i].end(), final_obs);
    REQUIRE(agent.report(i, r->reward, r->terminated, r->truncated, final_obs).ok());
    if (r->terminated || r->truncated)
      games[i]->reset(o[i].data());
    if (step % 512 == 0)
      learned = s.progress().updates >= 3;
  }
  REQUIRE_MESSAGE(learned, "the learners made no 3 updates from "
                             << acted << " game steps in 2 minutes");
  const auto p = s.progress();
  CHECK(p.running);
  CHECK(p.episodes > 0);
  CHECK(std::isfinite(p.return_mean_100));
  CHECK(p.policy_version >= 3);
  CHECK(p.transitions_dropped == agent.dropped());

  auto closed = s.close();
  REQUIRE_MESSAGE(closed.ok(), (closed ? std::string() : closed.err().message));
  CHECK(closed->updates >= 3);
  CHECK(closed->env_steps <= acted);
  // After close the agent refuses, naming why.
  CHECK_FALSE(agent.act(0, o[0].data(), &action).ok());
  // The final checkpoint is a policy the game can ship.
  auto shipped = troupe::policy::load(s.run_dir());
  REQUIRE_MESSAGE(shipped.ok(), (shipped ? std::string() : shipped.err().message));
  CHECK(shipped->obs_dim() == 4);
}

TEST_CASE("an environment registered with its spaces only trains in the game-driven form "
          "and is refused, saying so, by a session without an agent") {
  temp_folder dir("embed-spaces");
  const auto id = fmt::format("Spaces{}-v0", fresh_seed() % 1000000);
  troupe::env_description d;
  d.id = id;
  d.obs_low = {-5, -5, -5};
  d.obs_high = {5, 5, 5};
  d.num_actions = 2;
  d.max_episode_steps = 50;
  REQUIRE(troupe::register_environment_spaces(d).ok());
  auto ids = troupe::environment_ids();
  CHECK(std::find(ids.begin(), ids.end(), id) != ids.end());
  // Its description goes through register_environment's checks, named after the call.
  auto bad = d;
  bad.id = id + "-bad";
  bad.obs_high = {5};
  auto refused = troupe::register_environment_spaces(bad);
  CHECK(contains(refused, "register_environment_spaces('" + bad.id + "')"));
  CHECK(contains(refused, "got 3 and 1"));
  // Nothing can make an instance of it.
  auto made = troupe::envs::make_env(id);
  REQUIRE_FALSE(made.ok());
  CHECK(made.err().message.find("registered with its spaces only") != std::string::npos);
  CHECK_FALSE(troupe::envs::make_vector_env(id, 2).ok());

  const auto config =
    fmt::format("[run]\nseed = {}\noutput_dir = \"{}\"\ncheckpoint_every_updates = 0\n"
                "[env]\nid = \"{}\"\nnum_envs = 2\n"
                "[algo]\nname = \"ppo\"\nmode = \"sync\"\ntotal_env_steps = 100000000\n"
                "num_steps = 16\n",
                fresh_seed() % 1000, (dir.path / "runs").string(), id);

  // The runtime-driven form: start() refuses before any runner tries to make it.
  {
    auto opened = troupe::session::open_toml(config, "spaces.toml");
    REQUIRE_MESSAGE(opened.ok(), (opened ? std::string() : opened.err().message));
    auto started = opened->start();
    REQUIRE_FALSE(started.ok());
    CHECK(started.err().code == troupe::errc::invalid_argument);
    CHECK(contains(started, "env.id '" + id + "' (spaces.toml:"));
    CHECK(contains(started, "registered with its spaces only"));
    CHECK(contains(started, "make_agent()"));
    CHECK(opened->close().ok());
  }

  // The game-driven form: the game's own walker, two slots.
  auto opened = troupe::session::open_toml(config, "spaces.toml");
  REQUIRE_MESSAGE(opened.ok(), (opened ? std::string() : opened.err().message));
  troupe::session s = std::move(*opened);
  auto agent_made = s.make_agent(2);
  REQUIRE_MESSAGE(agent_made.ok(),
                  (agent_made ? std::string() : agent_made.err().message));
  troupe::agent agent = *agent_made;
  CHECK(agent.obs_dim() == 3);
  CHECK(agent.action_dim() == 1);
  auto started = s.start();
  REQUIRE_MESSAGE(started.ok(), started.err().message);
  float x[2] = {0, 0};
  bool learned = false;
  // Bounded by time, as above (the game never waits): one update needs 32
  // transitions; 2 minutes of them is far beyond.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  uint64_t step = 0;
  for (; !learned; ++step) {
    if (step % 64 == 0 && std::chrono::steady_clock::now() > deadline)
      break;
    const size_t i = step % 2;
    float obs[3] = {x[i], 1.0f, -1.0f}, action = -1;
    REQUIRE(agent.act(i, obs, &action).ok());
    REQUIRE((action == 0.0f || action == 1.0f));
    x[i] += action > 0.5f ? 1.0f : -1.0f;
    const bool terminated = x[i] >= 3 || x[i] <= -3;
    REQUIRE(agent.report(i, terminated && x[i] > 0 ? 1.0 : 0.0, terminated, false).ok());
    if (terminated)
      x[i] = 0;
    if (step % 64 == 0)
      learned = s.progress().updates >= 1;
  }
  CHECK_MESSAGE(learned, "no update from " << step << " game steps in 2 minutes");
  auto closed = s.close();
  REQUIRE_MESSAGE(closed.ok(), (closed ? std::string() : closed.err().message));
  CHECK(troupe::unregister_environment(id).ok());
}
