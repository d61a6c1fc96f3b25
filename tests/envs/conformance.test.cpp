// The conformance test every registered environment passes: seeded
// determinism, observations finite and inside their space, actions outside
// the space rejected, truncation exactly at the time limit, reset after the
// end of an episode. A new environment is covered by registering it.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "envs/registry.hpp"
#include "tests/seed.hpp"

using namespace troupe::envs;
using troupe::test::fresh_seed;

namespace {

// A uniformly random action inside the space.
std::vector<float> random_action(const space& s, std::mt19937_64& gen) {
  return random_actions(s, 1, gen);
}

void check_in_space(const env_spec& spec, const std::vector<float>& obs) {
  REQUIRE(obs.size() == spec.observation_space.size());
  for (size_t i = 0; i < obs.size(); ++i) {
    CAPTURE(i);
    CAPTURE(obs[i]);
    CHECK(std::isfinite(obs[i]));
  }
  CHECK(spec.observation_space.contains(obs.data()));
}

} // namespace

TEST_CASE("every environment is registered under its Gymnasium id with its time limit") {
  std::vector<std::pair<std::string, int>> want = {
    {"CartPole-v1", 500},     {"Pendulum-v1", 200},
    {"MountainCar-v0", 200},  {"MountainCarContinuous-v0", 999},
    {"Acrobot-v1", 500},      {"InvertedPendulum-v4", 1000},
    {"HalfCheetah-v4", 1000}, {"Hopper-v4", 1000},
    {"Walker2d-v4", 1000},    {"Swimmer-v4", 1000},
    {"Reacher-v4", 50},       {"InvertedDoublePendulum-v4", 1000},
    {"Ant-v4", 1000},         {"Humanoid-v4", 1000}};
  REQUIRE(registry().size() == want.size());
  for (auto& entry : want) {
    // Named copies: clang 14 lets no lambda (CAPTURE's) refer to a structured binding.
    const auto& id = entry.first;
    const auto limit = entry.second;
    CAPTURE(id);
    auto spec = find_spec(id);
    REQUIRE(spec);
    CHECK((*spec)->max_episode_steps == limit);
  }
}

TEST_CASE("an unknown id is an error that lists the valid ids") {
  auto e = make_env("CartPole-v0");
  REQUIRE_FALSE(e);
  CHECK(e.err().code == troupe::errc::not_found);
  for (auto& id : registered_ids())
    CHECK(e.err().message.find(id) != std::string::npos);
}

TEST_CASE("the same seed and actions give the same trajectory in every environment") {
  for (auto& id : registered_ids()) {
    CAPTURE(id);
    uint64_t seed = fresh_seed();
    CAPTURE(seed);
    auto a = make_env(id).value();
    auto b = make_env(id).value();
    auto obs_a = a->reset(seed);
    auto obs_b = b->reset(seed);
    CHECK(obs_a == obs_b);
    CHECK(a->reset(seed + 1) != obs_a); // another seed, another start
    a->reset(seed);
    std::mt19937_64 gen(seed);
    for (int t = 0; t < 300; ++t) {
      auto act = random_action(a->spec().action_space, gen);
      auto ta = a->step(act).value();
      auto tb = b->step(act).value();
      CHECK(ta.obs == tb.obs);
      CHECK(ta.reward == tb.reward);
      CHECK(ta.terminated == tb.terminated);
      CHECK(ta.truncated == tb.truncated);
      CHECK(a->state() == b->state());
      if (ta.terminated || ta.truncated) {
        a->reset(seed + t);
        b->reset(seed + t);
      }
    }
  }
}

TEST_CASE(
  "observations stay finite and inside the observation space under random actions") {
  for (auto& id : registered_ids()) {
    CAPTURE(id);
    uint64_t seed = fresh_seed();
    CAPTURE(seed);
    auto e = make_env(id).value();
    std::mt19937_64 gen(seed);
    check_in_space(e->spec(), e->reset(seed));
    for (int t = 0; t < 2000; ++t) {
      auto tr = e->step(random_action(e->spec().action_space, gen)).value();
      check_in_space(e->spec(), tr.obs);
      CHECK(std::isfinite(tr.reward));
      if (tr.terminated || tr.truncated)
        check_in_space(e->spec(), e->reset(seed + t + 1));
    }
  }
}

TEST_CASE(
  "actions outside the action space are rejected with an error naming the space") {
  for (auto& id : registered_ids()) {
    CAPTURE(id);
    auto e = make_env(id).value();
    const auto& as = e->spec().action_space;
    std::vector<std::vector<float>> bad = {std::vector<float>(as.size(), NAN),
                                           std::vector<float>(as.size() + 1, 0.0f)};
    if (as.kind == space_kind::discrete) {
      bad.push_back({static_cast<float>(as.n)});
      bad.push_back({-1.0f});
      bad.push_back({0.5f});
    } else {
      bad.push_back(std::vector<float>(as.size(), INFINITY));
      bad.push_back(std::vector<float>(as.size(), as.high[0] * 1.5f));
      bad.push_back(std::vector<float>(as.size(), as.low[0] * 1.5f));
    }
    e->reset(fresh_seed());
    auto before = e->state();
    for (auto& a : bad) {
      CAPTURE(a.size());
      CAPTURE(a[0]);
      auto r = e->step(a);
      REQUIRE_FALSE(r);
      CHECK(r.err().message.find(id) != std::string::npos);
      CHECK(e->state() == before);
      CHECK(e->elapsed_steps() == 0);
    }
  }
}

TEST_CASE("stepping before reset is an error") {
  for (auto& id : registered_ids()) {
    CAPTURE(id);
    auto e = make_env(id).value();
    auto r = e->step(std::vector<float>(e->spec().action_space.size(), 0.0f));
    CHECK_FALSE(r);
  }
}

TEST_CASE("truncation comes exactly at the time limit and not a step before") {
  for (auto& id : registered_ids()) {
    CAPTURE(id);
    uint64_t seed = fresh_seed();
    CAPTURE(seed);
    auto e = make_env(id).value();
    const int limit = e->spec().max_episode_steps;
    std::mt19937_64 gen(seed);
    // From a fresh start with the counter near the limit, so that the
    // episode is unlikely to terminate first; retried when it does.
    bool checked = false;
    for (int attempt = 0; attempt < 50 && !checked; ++attempt) {
      e->reset(seed + attempt);
      e->set_elapsed_steps(limit - 5);
      bool terminated = false;
      for (int t = limit - 4; t <= limit && !terminated; ++t) {
        auto tr = e->step(random_action(e->spec().action_space, gen)).value();
        CHECK(e->elapsed_steps() == t);
        terminated = tr.terminated;
        CHECK(tr.truncated == (t >= limit));
        checked = !terminated && t == limit;
      }
    }
    CHECK(checked);
  }
}

TEST_CASE("a full episode of Pendulum truncates at step 200 from reset") {
  auto e = make_env("Pendulum-v1").value();
  uint64_t seed = fresh_seed();
  CAPTURE(seed);
  e->reset(seed);
  std::mt19937_64 gen(seed);
  for (int t = 1; t <= 200; ++t) {
    auto tr = e->step(random_action(e->spec().action_space, gen)).value();
    CHECK_FALSE(tr.terminated);
    CHECK(tr.truncated == (t == 200));
  }
}

TEST_CASE("reset after the end of an episode starts a fresh episode") {
  for (auto& id : registered_ids()) {
    CAPTURE(id);
    uint64_t seed = fresh_seed();
    CAPTURE(seed);
    auto e = make_env(id).value();
    std::mt19937_64 gen(seed);
    e->reset(seed);
    bool ended = false;
    for (int t = 0; t < 5000 && !ended; ++t) {
      auto tr = e->step(random_action(e->spec().action_space, gen)).value();
      ended = tr.terminated || tr.truncated;
    }
    REQUIRE(ended);
    auto obs = e->reset(seed + 1);
    check_in_space(e->spec(), obs);
    CHECK(e->elapsed_steps() == 0);
    auto tr = e->step(random_action(e->spec().action_space, gen)).value();
    CHECK_FALSE(tr.truncated);
    CHECK(e->elapsed_steps() == 1);
  }
}

TEST_CASE("set_state rejects a state of the wrong length or with non-finite values") {
  for (auto& id : registered_ids()) {
    CAPTURE(id);
    auto e = make_env(id).value();
    const size_t n = e->spec().state_dim();
    auto wrong = e->set_state(std::vector<double>(n + 1, 0.0));
    REQUIRE_FALSE(wrong);
    CHECK(wrong.err().code == troupe::errc::dimension_mismatch);
    auto nan = e->set_state(std::vector<double>(n, NAN));
    REQUIRE_FALSE(nan);
    CHECK(nan.err().code == troupe::errc::non_finite);
    std::vector<double> values(n, 0.01);
    REQUIRE(e->set_state(values));
    CHECK(e->state() == values);
  }
}

TEST_CASE("with clipping on, a Box action beyond the bounds acts as the nearest bound") {
  for (auto& id : registered_ids()) {
    auto spec = find_spec(id).value();
    if (spec->action_space.kind != space_kind::box)
      continue;
    CAPTURE(id);
    uint64_t seed = fresh_seed();
    CAPTURE(seed);
    auto clipped = make_env(id).value();
    auto bound = make_env(id).value();
    clipped->set_clip_box_actions(true);
    clipped->reset(seed);
    bound->reset(seed);
    const auto& as = spec->action_space;
    for (int t = 0; t < 50; ++t) {
      // Every element beyond its bound, alternately above and below.
      std::vector<float> beyond(as.size()), at_bound(as.size());
      for (size_t j = 0; j < as.size(); ++j) {
        bool up = (t + j) % 2 == 0;
        beyond[j] = up ? as.high[j] * 3 : as.low[j] * 3;
        at_bound[j] = up ? as.high[j] : as.low[j];
      }
      auto tc = clipped->step(beyond).value();
      auto tb = bound->step(at_bound).value();
      // Equal up to float32 rounding: Gymnasium computes a bound that the
      // clip substituted as a Python float and a float32 action as float32.
      auto sc = clipped->state(), sb = bound->state();
      for (size_t j = 0; j < sc.size(); ++j)
        CHECK(std::fabs(sc[j] - sb[j]) <= 1e-5 * std::fabs(sb[j]) + 1e-7);
      for (size_t j = 0; j < tc.obs.size(); ++j)
        CHECK(std::fabs(tc.obs[j] - tb.obs[j]) <= 1e-5 * std::fabs(tb.obs[j]) + 1e-7);
      CHECK(tc.terminated == tb.terminated);
    }
    // NaN stays an error.
    CHECK_FALSE(clipped->step(std::vector<float>(as.size(), NAN)));
  }
}
