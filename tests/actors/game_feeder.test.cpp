// The game feeder (actors/game_feeder.hpp) over a game agent: the bounded
// queue's drops and the feeder's wake-up, acting while the learner is held
// paused, a CartPole driven from this test's thread that learns, and PPO
// taking a game-driven batch's recorded log-probabilities.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/game_feeder.hpp"
#include "actors/learner.hpp"
#include "actors/messages.hpp"
#include "actors/parameter_server.hpp"
#include "actors/policy_store.hpp"
#include "actors/stats_keeper.hpp"
#include "edge/game_agent.hpp"
#include "envs/registry.hpp"
#include "learners/model.hpp"
#include "learners/ppo.hpp"
#include "tests/actors/ask.hpp"
#include "tests/edge/game_agent_helpers.hpp"
#include "tests/seed.hpp"

using namespace troupe;
using namespace troupe::actors;
using edge::game_agent_options;
using test::ask;
using test::make_agent;
using test::make_model;
using test::ref_logp;
using test::wait_until;

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

} // namespace

TEST_CASE("a full queue drops whole segments and counts their transitions exactly, "
          "keeps the oldest, and the feeder is woken when a segment arrives") {
  const uint64_t seed = test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal;
  actor_system_fixture fx;
  caf::scoped_actor self{*fx.sys};
  const size_t steps = 3, capacity = 2, od = 4;
  auto store = std::make_shared<policy_store>(make_model(seed, od, 2, {8}), 2);
  game_agent_options opts;
  opts.steps_per_segment = steps;
  opts.queue_capacity = capacity;
  auto agent = make_agent(opts, store);
  std::vector<float> given; // every observation, in order
  auto play = [&](size_t count) {
    for (size_t i = 0; i < count; ++i) {
      float obs[od], action;
      for (auto& x : obs)
        x = static_cast<float>(normal(gen));
      given.insert(given.end(), obs, obs + od);
      REQUIRE(agent->act(0, obs, &action).ok());
      REQUIRE(agent->report(0, 1.0, false, false).ok());
    }
  };
  const size_t acts = std::uniform_int_distribution<size_t>(20, 40)(gen);
  CAPTURE(acts);
  play(acts);
  // Segment k is complete at act (k + 1) T + 1 (its bootstrap observation).
  const size_t completed = (acts - 1) / steps;
  auto c = agent->counters();
  CHECK(c.segments == capacity);
  CHECK(c.dropped_segments == completed - capacity);
  CHECK(c.dropped == (completed - capacity) * steps);
  CHECK(agent->dropped() == c.dropped);

  // The feeder hands over the two oldest segments, one per batch.
  auto keeper = spawn_stats_keeper(*fx.sys, stats_keeper_options{});
  game_feeder_options fo;
  fo.name = "L.runner0";
  fo.num_envs = 1;
  auto feeder = spawn_game_feeder(*fx.sys, fo, agent->queue(),
                                  caf::actor_cast<caf::actor>(self), keeper);
  CHECK(ask<uint64_t>(self, feeder, collect_atom::value, uint64_t{capacity}) == capacity);
  for (size_t k = 0; k < capacity; ++k) {
    auto b = test::receive_one<trajectory_batch>(self, "a batch from the feeder");
    CHECK(b.runner == "L.runner0");
    CHECK(b.sequence == k);
    CHECK(b.behavior_recorded);
    CHECK_FALSE(b.normalized);
    REQUIRE(b.observations.size() == (steps + 1) * od);
    for (size_t j = 0; j < (steps + 1) * od; ++j)
      CHECK(b.observations[j] == given[k * steps * od + j]);
  }
  // The queue is empty: the next request waits until the game queues a
  // segment. The slot's segment under way began at act `completed` T (0-based).
  self->send(feeder, collect_atom::value, uint64_t{1});
  play(steps); // completes it
  auto b = test::receive_one<trajectory_batch>(self, "the batch after the wake-up");
  for (size_t j = 0; j < (steps + 1) * od; ++j)
    CHECK(b.observations[j] == given[completed * steps * od + j]);
  CHECK(test::receive_one<uint64_t>(self, "the feeder's reply") == 1);

  auto st = ask<env_runner_status>(self, feeder, status_atom::value);
  CHECK(st.batches == capacity + 1);
  CHECK(st.env_steps == (capacity + 1) * steps);
  CHECK(st.deltas_sent == capacity + 1);
  auto state = ask<env_runner_state>(self, feeder, state_atom::value);
  CHECK(nothing_to_restore(state));
  CHECK(state.runner == "L.runner0");
  // The moments of the three batches reached the keeper.
  wait_until(
    [&] {
      return ask<stream_status>(self, keeper, status_atom::value, std::string{"obs"})
               .count == (capacity + 1) * steps;
    },
    "the keeper to merge the three batches' observation moments");
  self->send_exit(feeder, caf::exit_reason::user_shutdown);
  self->send_exit(keeper, caf::exit_reason::user_shutdown);
}

namespace {

using open_atom = caf::atom_constant<caf::atom("open")>;

struct gate_state {
  std::vector<float> params;
  std::shared_ptr<std::atomic<int>> gradients;
  std::vector<caf::typed_response_promise<weights_reply>> held;
  bool open = false;
};

// A parameter server stand-in that answers weights requests at once and holds
// every gradient's answer until the test opens the gate: the learner waiting
// for that answer is paused.
caf::behavior gate_server(caf::stateful_actor<gate_state>* self,
                          std::vector<float> params,
                          std::shared_ptr<std::atomic<int>> gradients) {
  self->state.params = std::move(params);
  self->state.gradients = std::move(gradients);
  return {
    [self](weights_atom) {
      return weights_reply{0, true, false, false, self->state.params, {}};
    },
    [self](gradient_update&) -> caf::result<weights_reply> {
      auto& s = self->state;
      s.gradients->fetch_add(1);
      if (s.open)
        return weights_reply{0, true, false, false, s.params, {}};
      s.held.push_back(self->make_response_promise<weights_reply>());
      return s.held.back();
    },
    [self](open_atom) {
      auto& s = self->state;
      s.open = true;
      for (auto& p : s.held)
        p.deliver(weights_reply{0, true, false, false, s.params, {}});
      s.held.clear();
    },
  };
}

// Takes learner reports and the learner's final state, counting the latter.
caf::behavior report_sink(caf::event_based_actor* self,
                          std::shared_ptr<std::atomic<int>> ended) {
  return {
    [](learner_report&) {},
    [ended](learner_state&) { ended->fetch_add(1); },
  };
}

} // namespace

TEST_CASE("act keeps answering while the learner is held paused, and training goes on "
          "from the queue once it is released") {
  const uint64_t seed = test::fresh_seed();
  CAPTURE(seed);
  actor_system_fixture fx;
  caf::scoped_actor self{*fx.sys};
  const size_t steps = 8, capacity = 4;
  auto model = make_model(seed);
  auto store = std::make_shared<policy_store>(model, 2);
  game_agent_options opts;
  opts.steps_per_segment = steps;
  opts.queue_capacity = capacity;
  opts.seed = seed;
  auto agent = make_agent(opts, store);
  auto gradients = std::make_shared<std::atomic<int>>(0);
  auto ended = std::make_shared<std::atomic<int>>(0);
  auto server = fx.sys->spawn(
    gate_server, std::vector<float>(model.params(), model.params() + model.param_count()),
    gradients);
  auto sink = fx.sys->spawn(report_sink, ended);
  learner_options lo;
  lo.name = "L";
  lo.spec = model.spec();
  learners::settings_of<learners::ppo_settings>(lo.algorithm).update_epochs = 1;
  learners::settings_of<learners::ppo_settings>(lo.algorithm).num_minibatches =
    1; // one gradient per batch
  lo.steps_per_runner_batch = steps;
  lo.report_to = sink;
  lo.log = [](const std::string&) {};
  auto budget = std::make_shared<step_budget>(1000000);
  auto learner = spawn_learner(*fx.sys, lo, server, sink, store, budget);
  game_feeder_options fo;
  fo.name = "L.runner0";
  fo.num_envs = 1;
  auto feeder = spawn_game_feeder(*fx.sys, fo, agent->queue(), learner);
  self->send(learner, runner_atom::value, uint64_t{0}, feeder);

  float obs[4] = {0.01f, 0.02f, -0.03f, 0.04f}, action = 0;
  auto step_once = [&] {
    bool ok = agent->act(0, obs, &action).ok();
    ok = agent->report(0, 1.0, false, false).ok() && ok;
    obs[0] = -obs[0];
    return ok;
  };
  // Play until the learner has sent its first gradient: it is now paused.
  wait_until([&] { return step_once() && gradients->load() >= 1; },
             "the learner's first gradient");
  const auto before = agent->counters();
  // Many segments more than the queue holds: every call answers, the overflow
  // is dropped and counted.
  const size_t calls = (capacity + 6) * steps;
  size_t answered = 0;
  for (size_t i = 0; i < calls; ++i)
    answered += step_once();
  CHECK(answered == calls);
  CHECK(gradients->load() == 1); // still paused
  const auto after = agent->counters();
  CHECK(after.env_steps - before.env_steps == calls);
  CHECK(after.dropped - before.dropped >= (calls / steps - capacity - 1) * steps);
  CHECK(after.dropped % steps == 0);

  // Released, the learner takes its next batch from what the queue kept.
  self->send(server, open_atom::value);
  wait_until([&] { return gradients->load() >= 2; },
             "the learner's second gradient, from the queued segments");
  self->send(learner, stop_atom::value);
  wait_until([&] { return ended->load() == 1; }, "the learner to end");
  for (auto& a : {feeder, server, sink})
    self->send_exit(a, caf::exit_reason::user_shutdown);
}

TEST_CASE("a game-driven CartPole stepped on the caller's thread learns: a 100-episode "
          "mean return above 200 within 300k learned steps") {
  actor_system_fixture fx;
  caf::scoped_actor self{*fx.sys};
  const uint64_t seed = 1;
  const size_t slots = 4, steps = 128;
  const uint64_t budget_steps = 300000;
  auto model = make_model(seed);
  auto store = std::make_shared<policy_store>(model, 8);
  auto keeper = spawn_stats_keeper(*fx.sys, stats_keeper_options{});
  parameter_server_options ps;
  ps.sync = true;
  ps.log = [](const std::string&) {};
  auto server = spawn_parameter_server(
    *fx.sys, ps, std::vector<float>(model.params(), model.params() + model.param_count()),
    {}, store);
  auto ended = std::make_shared<std::atomic<int>>(0);
  auto sink = fx.sys->spawn(report_sink, ended);
  // CleanRL's PPO settings of config/cartpole_ppo.toml: 4 columns of 128 steps.
  learner_options lo;
  lo.name = "L";
  lo.spec = model.spec();
  lo.steps_per_runner_batch = slots * steps;
  lo.seed = seed;
  lo.report_to = sink;
  lo.log = [](const std::string&) {};
  auto budget = std::make_shared<step_budget>(budget_steps);
  auto learner = spawn_learner(*fx.sys, lo, server, sink, store, budget);
  game_agent_options opts;
  opts.env_id = "CartPole-v1";
  opts.slots = slots;
  opts.steps_per_segment = steps;
  opts.queue_capacity = 2 * slots; // at most two batches of lag
  opts.seed = seed;
  auto agent = make_agent(opts, store);
  game_feeder_options fo;
  fo.name = "L.runner0";
  fo.num_envs = slots;
  auto feeder = spawn_game_feeder(*fx.sys, fo, agent->queue(), learner, keeper);
  self->send(learner, runner_atom::value, uint64_t{0}, feeder);

  // The game: four CartPoles stepped here, one slot each.
  std::vector<std::unique_ptr<envs::env>> games;
  std::vector<std::array<float, 4>> obs(slots);
  for (size_t s = 0; s < slots; ++s) {
    auto made = envs::make_env("CartPole-v1");
    REQUIRE(made.ok());
    games.push_back(std::move(*made));
    games[s]->reset(seed + s, obs[s].data());
  }
  const uint64_t max_game_steps = 100 * budget_steps; // a bound, never near
  uint64_t game_steps = 0;
  while (ended->load() == 0) {
    REQUIRE_MESSAGE(game_steps < max_game_steps,
                    "the learner did not spend its budget of " << budget_steps
                                                               << " steps");
    for (size_t s = 0; s < slots; ++s) {
      float action = 0;
      REQUIRE(agent->act(s, obs[s].data(), &action).ok());
      auto r = games[s]->step(&action, obs[s].data());
      REQUIRE(r.ok());
      const bool ends = r->terminated || r->truncated;
      REQUIRE(agent
                ->report(s, r->reward, r->terminated, r->truncated,
                         ends ? obs[s].data() : nullptr)
                .ok());
      if (ends)
        games[s]->reset(obs[s].data());
      ++game_steps;
    }
  }
  const auto c = agent->counters();
  MESSAGE("game steps " << game_steps << ", episodes " << c.episodes << ", dropped "
                        << c.dropped << ", policy version " << c.policy_version
                        << ", mean return of the last 100 " << c.return_mean_100);
  CHECK(c.return_mean_100 > 200.0);
  CHECK(c.policy_version > 0);
  agent->close();
  for (auto& a : {feeder, server, keeper, sink})
    self->send_exit(a, caf::exit_reason::user_shutdown);
}

namespace {

// A stand-in runner that answers the first collect request with `batch`.
caf::behavior one_batch_runner(caf::event_based_actor* self, std::string name,
                               caf::actor consumer, trajectory_batch batch) {
  return {
    [=](collect_atom, uint64_t) mutable -> uint64_t {
      batch.runner = name;
      self->send(consumer, std::move(batch));
      return 1;
    },
  };
}

// The report of a PPO learner (one epoch, one minibatch) that learns `batch`
// with weights `initial` (version 0 on the server and in the store).
learner_report learn_one_ppo_batch(const learners::actor_critic& initial,
                                   const trajectory_batch& batch) {
  actor_system_fixture fx;
  caf::scoped_actor self{*fx.sys};
  auto store = std::make_shared<policy_store>(initial, 4);
  parameter_server_options ps;
  ps.log = [](const std::string&) {};
  auto server = spawn_parameter_server(
    *fx.sys, ps,
    std::vector<float>(initial.params(), initial.params() + initial.param_count()), {},
    store);
  learner_options lo;
  lo.name = "L";
  lo.spec = initial.spec();
  learners::settings_of<learners::ppo_settings>(lo.algorithm).update_epochs = 1;
  learners::settings_of<learners::ppo_settings>(lo.algorithm).num_minibatches = 1;
  lo.anneal_lr = false;
  lo.steps_per_runner_batch = batch.steps * batch.num_envs;
  lo.log = [](const std::string&) {};
  auto budget = std::make_shared<step_budget>(lo.steps_per_runner_batch);
  auto learner =
    spawn_learner(*fx.sys, lo, server, caf::actor_cast<caf::actor>(self), store, budget);
  auto runner = fx.sys->spawn(one_batch_runner, std::string{"L.runner0"}, learner, batch);
  self->send(learner, runner_atom::value, uint64_t{0}, runner);
  auto report = test::receive_one<learner_report>(self, "the learner's report");
  for (auto& a : {learner, runner, server})
    self->send_exit(a, caf::exit_reason::user_shutdown);
  return report;
}

} // namespace

TEST_CASE(
  "PPO takes the old log-probabilities of a game-driven batch (behavior_recorded) "
  "from behavior_logp, and recomputes them for a runner's batch") {
  const uint64_t seed = test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal;
  auto model = make_model(seed, 4, 2, {16, 16});
  const size_t steps = 6, n = 2, od = 4, rows = steps * n;
  trajectory_batch b;
  b.env_id = "game";
  b.num_envs = n;
  b.steps = steps;
  b.obs_dim = od;
  b.action_dim = 1;
  b.observations.resize((steps + 1) * n * od);
  for (auto& x : b.observations)
    x = static_cast<float>(normal(gen));
  b.actions.resize(rows);
  b.rewards.resize(rows);
  for (size_t k = 0; k < rows; ++k) {
    b.actions[k] = static_cast<float>(gen() % 2);
    b.rewards[k] = static_cast<float>(normal(gen));
  }
  b.terminated.assign(rows, 0);
  b.truncated.assign(rows, 0);
  b.autoreset.assign(rows, 0);
  b.terminated[5] = 1;
  b.autoreset[5 + n] = 1;
  // log pi_0(a | s) of every row, in float64: what the learner recomputes.
  std::vector<float> exact(rows);
  for (size_t k = 0; k < rows; ++k) {
    std::vector<double> seen(&b.observations[k * od], &b.observations[k * od] + od);
    exact[k] = static_cast<float>(ref_logp(model, seen, b.actions[k]));
  }
  std::vector<float> shifted(exact);
  for (auto& x : shifted)
    x += 0.4f; // the ratio becomes exp(-0.4): below the clip range

  b.behavior_logp = shifted; // a runner's batch: ignored by PPO
  const auto runner = learn_one_ppo_batch(model, b);
  b.behavior_recorded = true;
  b.behavior_logp = exact; // recorded and exact: the same loss
  const auto same = learn_one_ppo_batch(model, b);
  b.behavior_logp = shifted; // recorded and shifted: another loss
  const auto other = learn_one_ppo_batch(model, b);
  CHECK(same.loss_policy == doctest::Approx(runner.loss_policy).epsilon(1e-4));
  CHECK(same.loss_value == doctest::Approx(runner.loss_value).epsilon(1e-6));
  CHECK(other.loss_value == doctest::Approx(runner.loss_value).epsilon(1e-6));
  CHECK(std::abs(other.loss_policy - runner.loss_policy) > 1e-3);
}
