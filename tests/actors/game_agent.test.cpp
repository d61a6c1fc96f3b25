// The game-driven agent (actors/game_agent.hpp): its error paths, the
// segments it assembles against a float64 reference built here, the bounded
// queue's drops, acting while the learner is held paused, the feeder actor,
// and a CartPole driven from this test's thread that learns.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <caf/all.hpp>

#include "actors/game_agent.hpp"
#include "actors/game_bench.hpp"
#include "actors/learner.hpp"
#include "actors/messages.hpp"
#include "actors/parameter_server.hpp"
#include "actors/policy_store.hpp"
#include "actors/stats_keeper.hpp"
#include "envs/registry.hpp"
#include "learners/mlp.hpp"
#include "learners/model.hpp"
#include "learners/ppo.hpp"
#include "tests/actors/ask.hpp"
#include "tests/seed.hpp"

using namespace troupe;
using namespace troupe::actors;
using test::ask;
using test::wait_until;

namespace {

learners::actor_critic make_model(uint64_t seed, int64_t obs_dim = 4, int64_t n = 2,
                                  std::vector<int64_t> hidden = {64, 64}) {
  learners::model_spec spec;
  spec.obs_dim = obs_dim;
  spec.n = n;
  spec.hidden = std::move(hidden);
  return learners::actor_critic(spec, seed);
}

std::shared_ptr<game_agent>
make_agent(game_agent_options opts, std::shared_ptr<policy_store> store,
           std::vector<std::shared_ptr<learners::stats_view>> views = {}) {
  auto made = game_agent::create(std::move(opts), std::move(store), std::move(views));
  REQUIRE_MESSAGE(made.ok(), (made.ok() ? "" : made.err().message));
  return *made;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The message of a failed call; fails the test when the call succeeded.
std::string failure(const status& s, errc code) {
  REQUIRE_FALSE(s.ok());
  CHECK(s.err().code == code);
  return s.err().message;
}

struct actor_system_fixture {
  actor_system_fixture() {
    register_messages(cfg);
    cfg.set("scheduler.max-threads", 2);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
};

// -- float64 reference of the segments ----------------------------------------

struct ref_row {
  std::vector<double> raw, seen;
  float action = 0;
  double logp = 0;
  double reward = 0;
  bool terminated = false, truncated = false, autoreset = false;
  uint64_t policy_version = 0, stats_version = 0;
};

struct ref_slot {
  std::vector<ref_row> rows;
  std::vector<std::pair<double, uint64_t>> episodes_by_row; // (return, length) at row
  std::vector<size_t> episode_rows;                         // row of each episode's end
  double ep_return = 0;
  uint64_t ep_length = 0;
};

struct ref_stats {
  std::vector<double> mean, var;
  uint64_t version = 0;
};

std::vector<double> ref_normalize(const float* x, const ref_stats& st, double eps,
                                  double clip) {
  std::vector<double> out(st.mean.size());
  for (size_t k = 0; k < out.size(); ++k) {
    double v = (static_cast<double>(x[k]) - st.mean[k]) / std::sqrt(st.var[k] + eps);
    out[k] = std::max(-clip, std::min(clip, v));
  }
  return out;
}

// log pi(a | seen) under `model`, in float64.
double ref_logp(const learners::actor_critic& model, const std::vector<double>& seen,
                float action) {
  std::vector<double> params(model.params(), model.params() + model.param_count());
  std::vector<double> buffers(model.buffers(), model.buffers() + model.buffer_count());
  learners::network_cache<double> cache;
  learners::network_forward<double>(model.layout().actor, model.spec(), params.data(),
                                    buffers.data(), seen.data(), 1,
                                    learners::forward_mode::eval, cache);
  const auto& l = cache.out;
  double top = *std::max_element(l.begin(), l.end()), total = 0;
  for (double x : l)
    total += std::exp(x - top);
  return l[static_cast<size_t>(action)] - top - std::log(total);
}

} // namespace

TEST_CASE("every bad call of a game agent is an error naming the call, slot, rule and "
          "value, and leaves the slot as it was") {
  auto store = std::make_shared<policy_store>(make_model(3), 2);
  game_agent_options opts;
  opts.name = "g";
  opts.slots = 2;
  opts.steps_per_segment = 4;
  auto agent = make_agent(opts, store);
  float obs[8] = {0.1f, -0.2f, 0.3f, 0.0f, 0.5f, 0.5f, -0.5f, 0.25f};
  float act[2] = {};

  auto m = failure(agent->act(2, obs, act), errc::invalid_argument);
  CHECK(has(m, "game agent 'g': act(slot 2)"));
  CHECK(has(m, "slot must be < 2 (the agent's slots), got 2"));
  m = failure(agent->report(7, 1.0, false, false), errc::invalid_argument);
  CHECK(has(m, "report(slot 7)"));
  m = failure(agent->act_batch(1, 2, obs, act), errc::invalid_argument);
  CHECK(has(m, "act_batch(slot 1)"));
  CHECK(has(m, "slots [1, 3) must lie in [0, 2)"));
  m = failure(agent->act(0, nullptr, act), errc::invalid_argument);
  CHECK(has(m, "must not be null"));

  obs[2] = std::numeric_limits<float>::quiet_NaN();
  m = failure(agent->act(0, obs, act), errc::non_finite);
  CHECK(has(m, "act(slot 0): obs[2] must be finite, got nan"));
  obs[2] = 0.3f;
  obs[5] = std::numeric_limits<float>::infinity();
  m = failure(agent->act_batch(0, 2, obs, act), errc::non_finite);
  CHECK(has(m, "act_batch(slot 1): obs[5] must be finite, got inf"));
  obs[5] = 0.5f;
  CHECK(agent->counters().env_steps == 0); // act_batch checks every row first

  m = failure(agent->report(0, 1.0, false, false), errc::invalid_argument);
  CHECK(has(m, "report(slot 0): report without a preceding act"));

  REQUIRE(agent->act(0, obs, act).ok());
  m = failure(agent->act(0, obs, act), errc::invalid_argument);
  CHECK(has(m, "act(slot 0): act called twice without report"));
  m = failure(agent->act_batch(0, 2, obs, act), errc::invalid_argument);
  CHECK(has(m, "act_batch(slot 0): act called twice without report"));
  m = failure(agent->report(0, std::nan(""), false, false), errc::non_finite);
  CHECK(has(m, "report(slot 0): reward must be finite, got nan"));
  const float bad_final[4] = {0, -std::numeric_limits<float>::infinity(), 0, 0};
  m = failure(agent->report(0, 1.0, true, false, bad_final), errc::non_finite);
  CHECK(has(m, "report(slot 0): final_obs[1] must be finite, got -inf"));
  // None of the failed reports changed the slot: the pending act is reported now.
  REQUIRE(agent->report(0, 1.0, false, false).ok());
  auto c = agent->counters();
  CHECK(c.env_steps == 1);
  CHECK(c.transitions == 1);
  CHECK(c.episodes == 0);

  agent->close();
  CHECK(agent->closed());
  m = failure(agent->act(1, obs, act), errc::unavailable);
  CHECK(has(m, "act(slot 1): the agent is closed"));
  m = failure(agent->report(1, 0.0, false, false), errc::unavailable);
  CHECK(has(m, "report(slot 1): the agent is closed"));
  m = failure(agent->act_batch(0, 1, obs, act), errc::unavailable);
  CHECK(has(m, "act_batch(slot 0): the agent is closed"));

  // Options and views that do not fit open no agent.
  auto bad = opts;
  bad.slots = 0;
  auto made = game_agent::create(bad, store);
  REQUIRE_FALSE(made.ok());
  CHECK(has(made.err().message, "slots must be >= 1, got 0"));
  made = game_agent::create(opts, store, {std::make_shared<learners::stats_view>(4)});
  REQUIRE_FALSE(made.ok());
  CHECK(has(made.err().message, "one view per slot (2) or none, got 1"));
  made = game_agent::create(opts, store,
                            {std::make_shared<learners::stats_view>(4),
                             std::make_shared<learners::stats_view>(3)});
  REQUIRE_FALSE(made.ok());
  CHECK(has(made.err().message, "views[1] has dimension 3, the observations have 4"));
}

TEST_CASE("game agent segments match a float64 reference: normalized and raw "
          "observations, actions, behavior log-probabilities, versions and the "
          "next-step autoreset layout with final observations") {
  const uint64_t seed = test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const size_t od = 4, steps = 5, slots = 2;
  auto model = make_model(seed, static_cast<int64_t>(od), 3, {16, 8});
  auto store = std::make_shared<policy_store>(model, 4);
  // The statistics each slot normalizes with (their own views).
  std::vector<ref_stats> stats(slots);
  std::vector<std::shared_ptr<learners::stats_view>> views;
  auto publish_stats = [&](size_t s, uint64_t version) {
    auto& st = stats[s];
    st.version = version;
    st.mean.resize(od);
    st.var.resize(od);
    for (size_t k = 0; k < od; ++k) {
      st.mean[k] = 0.3 * normal(gen);
      st.var[k] = 0.05 + unit(gen);
    }
    REQUIRE(views[s]->publish(version, 10, st.mean.data(), st.var.data(), od).ok());
  };
  for (size_t s = 0; s < slots; ++s) {
    views.push_back(std::make_shared<learners::stats_view>(od, "obs"));
    publish_stats(s, 7 + s);
  }
  game_agent_options opts;
  opts.slots = slots;
  opts.steps_per_segment = steps;
  opts.queue_capacity = 100;
  opts.seed = seed;
  opts.obs_clip = 1.5; // some values are clipped
  auto agent = make_agent(opts, store, views);

  std::vector<ref_slot> ref(slots);
  std::vector<std::pair<size_t, size_t>> completed; // (slot, segment) in queue order
  learners::actor_critic policy = model;
  uint64_t version = 0;
  // A row begins: the slot's segment that it follows is complete.
  auto begin_row = [&](size_t s, ref_row row) {
    auto& r = ref[s];
    if (!r.rows.empty() && r.rows.size() % steps == 0)
      completed.emplace_back(s, r.rows.size() / steps - 1);
    r.rows.push_back(std::move(row));
  };
  auto random_obs = [&](float* x) {
    for (size_t k = 0; k < od; ++k)
      x[k] = static_cast<float>(normal(gen));
  };
  // Episode ends by (slot, step of that slot): 1 terminated, 2 truncated;
  // with or without final_obs. Slot 0 ends an episode on the last row of its
  // first segment (the reset row then opens the second).
  struct ending {
    size_t slot, step;
    bool terminated, with_final;
  };
  const std::vector<ending> endings = {{0, 4, true, false}, {0, 11, false, true},
                                       {0, 17, true, true}, {1, 2, false, false},
                                       {1, 9, true, true},  {1, 14, false, true}};
  const size_t total_steps = 24;
  for (size_t i = 0; i < total_steps; ++i) {
    if (i == 10) {
      // A new policy version, published as the parameter server does.
      for (size_t k = 0; k < policy.param_count(); ++k)
        policy.params()[k] += static_cast<float>(0.05 * normal(gen));
      version = 3;
      store->publish(version, policy.params(), policy.buffers());
    }
    if (i == 15)
      publish_stats(0, 12);
    float obs[slots * od], actions[slots];
    for (size_t s = 0; s < slots; ++s)
      random_obs(&obs[s * od]);
    if (i % 3 == 2) {
      REQUIRE(agent->act_batch(0, slots, obs, actions).ok());
    } else {
      for (size_t s = 0; s < slots; ++s)
        REQUIRE(agent->act(s, &obs[s * od], &actions[s]).ok());
    }
    // The agent begins every acted row at act time, then each report adds
    // its slot's reset row: the reference begins rows in that order too.
    std::vector<const ending*> ends(slots, nullptr);
    for (size_t s = 0; s < slots; ++s) {
      ref_row row;
      row.raw.assign(&obs[s * od], &obs[s * od] + od);
      row.seen = ref_normalize(&obs[s * od], stats[s], opts.obs_epsilon, opts.obs_clip);
      row.action = actions[s];
      CHECK(actions[s] >= 0.0f);
      CHECK(actions[s] <= 2.0f);
      CHECK(actions[s] == std::floor(actions[s]));
      row.logp = ref_logp(policy, row.seen, actions[s]);
      row.policy_version = version;
      row.stats_version = stats[s].version;
      row.reward = std::round(normal(gen) * 100) / 100;
      for (const auto& x : endings)
        if (x.slot == s && x.step == i)
          ends[s] = &x;
      row.terminated = ends[s] && ends[s]->terminated;
      row.truncated = ends[s] && !ends[s]->terminated;
      begin_row(s, std::move(row));
    }
    for (size_t s = 0; s < slots; ++s) {
      auto& r = ref[s];
      const ref_row row = r.rows.back(); // this step's acted row
      const ending* e = ends[s];
      float final_obs[od];
      random_obs(final_obs);
      r.ep_return += row.reward;
      r.ep_length += 1;
      REQUIRE(agent
                ->report(s, row.reward, row.terminated, row.truncated,
                         e && e->with_final ? final_obs : nullptr)
                .ok());
      if (!e)
        continue;
      r.episodes_by_row.emplace_back(r.ep_return, r.ep_length);
      r.episode_rows.push_back(r.rows.size() - 1);
      r.ep_return = 0;
      r.ep_length = 0;
      ref_row reset;
      const float* last = e->with_final ? final_obs : &obs[s * od];
      reset.raw.assign(last, last + od);
      reset.seen = ref_normalize(last, stats[s], opts.obs_epsilon, opts.obs_clip);
      reset.autoreset = true;
      reset.policy_version = UINT64_MAX; // a reset row acts with no policy
      reset.stats_version = stats[s].version;
      begin_row(s, std::move(reset));
    }
  }
  auto c = agent->counters();
  CHECK(c.env_steps == total_steps * slots);
  CHECK(c.transitions == total_steps * slots);
  CHECK(c.episodes == endings.size());
  CHECK(c.dropped == 0);
  CHECK(c.policy_version == 3);
  REQUIRE(c.segments == completed.size());
  REQUIRE(completed.size() >= 8);

  for (size_t q = 0; q < completed.size(); ++q) {
    // Plain names, not a structured binding: doctest's CAPTURE is a lambda,
    // and clang 14 cannot capture structured bindings.
    const auto s = completed[q].first;
    const auto k = completed[q].second;
    CAPTURE(q);
    CAPTURE(s);
    CAPTURE(k);
    trajectory_batch b;
    b.num_envs = 1;
    b.steps = steps;
    b.observations.resize((steps + 1) * od);
    b.actions.resize(steps);
    b.behavior_logp.resize(steps);
    b.rewards.resize(steps);
    b.terminated.resize(steps);
    b.truncated.resize(steps);
    b.autoreset.resize(steps);
    b.policy_version = UINT64_MAX;
    b.stats_version = UINT64_MAX;
    std::vector<float> raw(steps * od);
    REQUIRE(agent->take_segment(b, 0, raw));
    CHECK(b.normalized);
    const auto& rows = ref[s].rows;
    uint64_t pv = UINT64_MAX, sv = UINT64_MAX;
    std::vector<double> returns;
    for (size_t t = 0; t <= steps; ++t) {
      const auto& r = rows[k * steps + t];
      for (size_t j = 0; j < od; ++j)
        CHECK(b.observations[t * od + j] == doctest::Approx(r.seen[j]).epsilon(1e-5));
      if (t == steps)
        break; // the observation after the segment: the next row's
      for (size_t j = 0; j < od; ++j)
        CHECK(raw[t * od + j] == static_cast<float>(r.raw[j]));
      CHECK(b.autoreset[t] == r.autoreset);
      CHECK(b.terminated[t] == r.terminated);
      CHECK(b.truncated[t] == r.truncated);
      CHECK(b.rewards[t] == static_cast<float>(r.autoreset ? 0.0 : r.reward));
      if (r.autoreset) {
        CHECK(b.actions[t] == 0.0f);
        CHECK(b.behavior_logp[t] == 0.0f);
      } else {
        CHECK(b.actions[t] == r.action);
        CHECK(b.behavior_logp[t] == doctest::Approx(r.logp).epsilon(1e-4));
        pv = std::min(pv, r.policy_version);
      }
      sv = std::min(sv, r.stats_version);
      const auto& ends = ref[s].episode_rows;
      for (size_t e = 0; e < ends.size(); ++e)
        if (ends[e] == k * steps + t)
          returns.push_back(ref[s].episodes_by_row[e].first);
    }
    CHECK(b.policy_version == pv);
    CHECK(b.stats_version == sv);
    REQUIRE(b.episode_returns.size() == returns.size());
    for (size_t e = 0; e < returns.size(); ++e)
      CHECK(b.episode_returns[e] == doctest::Approx(returns[e]).epsilon(1e-12));
  }
  trajectory_batch none;
  std::vector<float> raw;
  CHECK_FALSE(agent->take_segment(none, 0, raw));
}

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
  auto feeder =
    spawn_game_feeder(*fx.sys, fo, agent, caf::actor_cast<caf::actor>(self), keeper);
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
  learners::settings_of<learners::ppo_settings>(lo.algorithm).num_minibatches = 1; // one gradient per batch
  lo.steps_per_runner_batch = steps;
  lo.report_to = sink;
  lo.log = [](const std::string&) {};
  auto budget = std::make_shared<step_budget>(1000000);
  auto learner = spawn_learner(*fx.sys, lo, server, sink, store, budget);
  game_feeder_options fo;
  fo.name = "L.runner0";
  fo.num_envs = 1;
  auto feeder = spawn_game_feeder(*fx.sys, fo, agent, learner);
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
  auto feeder = spawn_game_feeder(*fx.sys, fo, agent, learner, keeper);
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

TEST_CASE("the embedding benchmark runs a game-driven CartPole with a learner and "
          "reports consistent counts and ordered act() latency percentiles") {
  embed_bench_options o;
  o.train_env_steps = 20480; // forty batches of 4 x 128
  o.latency_samples = 50000;
  auto r = bench_embed(o);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.err().message));
  MESSAGE("act p50 " << r->act_p50_us << " us, p99 " << r->act_p99_us << " us, max "
                     << r->act_max_us << " us; game " << r->game_env_steps_per_s
                     << " steps/s, learned " << r->learned_env_steps_per_s << " steps/s");
  CHECK(r->learned_env_steps == o.train_env_steps);
  CHECK(r->game_env_steps >= r->learned_env_steps);
  CHECK(r->act_samples == std::min<uint64_t>(r->game_env_steps, o.latency_samples));
  CHECK(r->act_p50_us > 0);
  CHECK(r->act_p50_us <= r->act_p99_us);
  CHECK(r->act_p99_us <= r->act_max_us);
  o.train_env_steps = 0;
  o.untrained_act_calls = 1000;
  r = bench_embed(o);
  REQUIRE(r.ok());
  CHECK(r->game_env_steps == 1000);
  CHECK(r->learned_env_steps == 0);
}

TEST_CASE("with block_when_full a call that completes a segment waits for space instead "
          "of dropping, and drops after block_timeout when none comes") {
  auto store = std::make_shared<policy_store>(make_model(5, 4, 2, {8}), 2);
  game_agent_options opts;
  opts.steps_per_segment = 2;
  opts.queue_capacity = 1;
  opts.block_when_full = true;
  opts.block_timeout = std::chrono::milliseconds(1);
  auto agent = make_agent(opts, store);
  float obs[4] = {0.1f, 0.2f, 0.3f, 0.4f}, action = 0;
  auto play = [&](size_t count) {
    for (size_t i = 0; i < count; ++i) {
      REQUIRE(agent->act(0, obs, &action).ok());
      REQUIRE(agent->report(0, 1.0, false, false).ok());
    }
  };
  // Five acts complete two segments: the second finds the queue full and,
  // with no one taking, is dropped after the bounded wait.
  play(5);
  auto c = agent->counters();
  CHECK(c.segments == 1);
  CHECK(c.dropped_segments == 1);
  CHECK(c.dropped == 2);

  // A consumer that takes segments while the game plays: with a wait long
  // enough for it, nothing more is dropped.
  auto waiting = game_agent::create(
    [&] {
      auto o = opts;
      o.block_timeout = test::wait_limit;
      return o;
    }(),
    store);
  REQUIRE(waiting.ok());
  agent = *waiting;
  std::atomic<bool> done{false};
  std::atomic<uint64_t> taken{0};
  std::thread consumer([&] {
    trajectory_batch b;
    b.num_envs = 1;
    b.steps = 2;
    b.observations.resize(3 * 4);
    b.actions.resize(2);
    b.behavior_logp.resize(2);
    b.rewards.resize(2);
    b.terminated.resize(2);
    b.truncated.resize(2);
    b.autoreset.resize(2);
    std::vector<float> raw(2 * 4);
    while (!done.load() || taken.load() < agent->counters().segments)
      if (agent->take_segment(b, 0, raw))
        taken.fetch_add(1);
      else
        std::this_thread::yield();
  });
  play(41); // completes twenty segments
  done.store(true);
  consumer.join();
  c = agent->counters();
  CHECK(c.segments == 20);
  CHECK(c.dropped == 0);
  CHECK(taken.load() == 20);
}

TEST_CASE("abandon discards a slot's unfinished segment, counts it, and the slot starts "
          "a fresh episode in a fresh segment, while other slots go on") {
  const uint64_t seed = test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  auto store = std::make_shared<policy_store>(make_model(seed), 8);
  game_agent_options o;
  o.slots = 2;
  o.steps_per_segment = 4;
  auto agent = make_agent(o, store);
  std::uniform_real_distribution<float> x(-0.1f, 0.1f);
  auto obs = [&] { return std::vector<float>{x(gen), x(gen), x(gen), x(gen)}; };
  float action = 0;
  // Slot 0: three transitions and a pending act; slot 1: two transitions.
  for (int t = 0; t < 3; ++t) {
    REQUIRE(agent->act(0, obs().data(), &action).ok());
    REQUIRE(agent->report(0, 1.0, false, false).ok());
  }
  REQUIRE(agent->act(0, obs().data(), &action).ok());
  for (int t = 0; t < 2; ++t) {
    REQUIRE(agent->act(1, obs().data(), &action).ok());
    REQUIRE(agent->report(1, 1.0, false, false).ok());
  }
  REQUIRE(agent->abandon(0).ok());
  CHECK(agent->abandoned() == 3);
  CHECK(agent->counters().abandoned_episodes == 1);
  CHECK(agent->counters().episodes == 0);
  CHECK(has(failure(agent->report(0, 1.0, false, false), errc::invalid_argument),
            "report without a preceding act"));
  CHECK(has(failure(agent->abandon(2), errc::invalid_argument), "slot must be < 2"));

  // Slot 0 again: four transitions of a fresh episode make one whole segment.
  const std::vector<double> rewards = {10, 11, 12, 13};
  for (double r : rewards) {
    REQUIRE(agent->act(0, obs().data(), &action).ok());
    REQUIRE(agent->report(0, r, false, false).ok());
  }
  REQUIRE(agent->act(0, obs().data(), &action).ok()); // completes the segment
  CHECK(agent->counters().segments == 1);
  trajectory_batch b;
  b.num_envs = 1;
  b.steps = 4;
  b.observations.resize(5 * 4);
  b.actions.resize(4);
  b.behavior_logp.resize(4);
  b.rewards.resize(4);
  b.terminated.resize(4);
  b.truncated.resize(4);
  b.autoreset.resize(4);
  b.policy_version = UINT64_MAX;
  b.stats_version = UINT64_MAX;
  std::vector<float> raw(4 * 4);
  REQUIRE(agent->take_segment(b, 0, raw));
  for (size_t t = 0; t < 4; ++t) {
    CHECK(b.rewards[t] == static_cast<float>(rewards[t]));
    CHECK(b.autoreset[t] == 0);
  }
  // Slot 1 was not touched: two more transitions and an act complete its segment.
  for (int t = 0; t < 2; ++t) {
    REQUIRE(agent->act(1, obs().data(), &action).ok());
    REQUIRE(agent->report(1, 1.0, false, false).ok());
  }
  REQUIRE(agent->act(1, obs().data(), &action).ok());
  CHECK(agent->counters().segments == 2);
  agent->close();
  CHECK(failure(agent->abandon(0), errc::unavailable).find("closed") != std::string::npos);
}
