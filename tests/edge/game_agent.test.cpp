// The game-driven agent (edge/game_agent.hpp): its error paths, the segments
// it assembles against a float64 reference built here, waiting for space
// with block_when_full, and abandoning a slot.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "actors/messages.hpp"
#include "actors/policy_store.hpp"
#include "edge/game_agent.hpp"
#include "learners/mlp.hpp"
#include "learners/model.hpp"
#include "tests/actors/ask.hpp"
#include "tests/edge/game_agent_helpers.hpp"
#include "tests/seed.hpp"

using namespace troupe;
using namespace troupe::edge;
using actors::policy_store;
using actors::trajectory_batch;
using test::make_agent;
using test::make_model;
using test::ref_logp;

namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The message of a failed call; fails the test when the call succeeded.
std::string failure(const status& s, errc code) {
  REQUIRE_FALSE(s.ok());
  CHECK(s.err().code == code);
  return s.err().message;
}

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
    REQUIRE(agent->queue()->take(b, 0, raw));
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
  CHECK_FALSE(agent->queue()->take(none, 0, raw));
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
      if (agent->queue()->take(b, 0, raw))
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
  REQUIRE(agent->queue()->take(b, 0, raw));
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
  CHECK(failure(agent->abandon(0), errc::unavailable).find("closed") !=
        std::string::npos);
}
