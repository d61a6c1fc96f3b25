// The collect protocol (actors/collect_protocol.hpp) as both actors that
// stand in a learner's runner slot answer it: the environment runner and the
// game feeder.
#include <doctest/doctest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/env_runner.hpp"
#include "actors/game_feeder.hpp"
#include "actors/messages.hpp"
#include "actors/policy_store.hpp"
#include "edge/game_agent.hpp"
#include "envs/registry.hpp"
#include "tests/actors/ask.hpp"
#include "tests/edge/game_agent_helpers.hpp"
#include "tests/seed.hpp"

using namespace troupe;
using namespace troupe::actors;
using test::ask;
using test::receive_one;

namespace {

struct actor_system_fixture {
  actor_system_fixture() {
    register_messages(cfg);
    cfg.set("scheduler.max-threads", 2);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
};

// Asks `dest` for one batch while a request is open: the refusal's message
// (the test fails when the request is answered with a count instead).
std::string refusal(caf::scoped_actor& self, const caf::actor& dest) {
  std::string message;
  self->request(dest, test::wait_limit, collect_atom::value, uint64_t{1})
    .receive([&](uint64_t n) { FAIL("a second request was answered with " << n); },
             [&](caf::error& e) { message = error_message(self->system(), e); });
  return message;
}

// Receives the `n` batches of an open request and its reply; checks they come
// from `runner`, numbered from `first`, and that the reply is n.
void receive_request(caf::scoped_actor& self, const std::string& runner, uint64_t first,
                     uint64_t n) {
  for (uint64_t k = 0; k < n; ++k) {
    auto b = receive_one<trajectory_batch>(self, "a batch of the open request");
    CHECK(b.runner == runner);
    CHECK(b.sequence == first + k);
  }
  CHECK(receive_one<uint64_t>(self, "the open request's reply") == n);
}

} // namespace

TEST_CASE("an env runner and a game feeder answer the collect protocol alike: 0 batches "
          "at once, a second request while one is open refused naming the actor, the "
          "open one answered with its count") {
  const uint64_t seed = test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const uint64_t n = std::uniform_int_distribution<uint64_t>(2, 5)(gen);
  const size_t steps = std::uniform_int_distribution<size_t>(2, 6)(gen);
  CAPTURE(n);
  CAPTURE(steps);
  actor_system_fixture fx;
  caf::scoped_actor self{*fx.sys};
  auto me = caf::actor_cast<caf::actor>(self);

  // The env runner, held first so that its open request cannot end before
  // the second one arrives.
  std::shared_ptr<envs::vector_env> vec = envs::make_vector_env("CartPole-v1", 2).value();
  env_runner_options ro;
  ro.name = "L.runner0";
  ro.seed = seed;
  ro.steps_per_batch = steps;
  auto runner =
    spawn_env_runner(*fx.sys, ro, vec, make_random_policy(vec->spec().action_space), me);
  CHECK(ask<uint64_t>(self, runner, collect_atom::value, uint64_t{0}) == 0);
  ask<env_runner_state>(self, runner, hold_atom::value, uint64_t{0});
  self->send(runner, collect_atom::value, n);
  CHECK(refusal(self, runner).find("env runner 'L.runner0' is already collecting") !=
        std::string::npos);
  self->send(runner, release_atom::value);
  receive_request(self, "L.runner0", 0, n);
  CHECK(ask<env_runner_status>(self, runner, status_atom::value).batches == n);

  // The feeder over an empty queue: its open request waits for segments.
  auto store = std::make_shared<policy_store>(test::make_model(seed), 2);
  edge::game_agent_options ao;
  ao.steps_per_segment = steps;
  ao.queue_capacity = n;
  auto agent = test::make_agent(ao, store);
  game_feeder_options fo;
  fo.name = "L.runner1";
  auto feeder = spawn_game_feeder(*fx.sys, fo, agent->queue(), me);
  CHECK(ask<uint64_t>(self, feeder, collect_atom::value, uint64_t{0}) == 0);
  self->send(feeder, collect_atom::value, n);
  CHECK(refusal(self, feeder).find("game feeder 'L.runner1' is already collecting") !=
        std::string::npos);
  // n segments complete at act n T + 1 (the last one's bootstrap observation).
  std::normal_distribution<float> normal;
  for (size_t i = 0; i < n * steps + 1; ++i) {
    float obs[4] = {normal(gen), normal(gen), normal(gen), normal(gen)}, action = 0;
    REQUIRE(agent->act(0, obs, &action).ok());
    REQUIRE(agent->report(0, 1.0, false, false).ok());
  }
  receive_request(self, "L.runner1", 0, n);
  CHECK(ask<env_runner_status>(self, feeder, status_atom::value).batches == n);
  for (auto& a : {runner, feeder})
    self->send_exit(a, caf::exit_reason::user_shutdown);
}
