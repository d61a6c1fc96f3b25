// The open environment registry (register, look up, unregister, concurrent
// use, spec checks) and the callback environment a game registers: stepping
// against a float64 reference, non-finite values and callback errors, state
// or no state.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "envs/callback_env.hpp"
#include "envs/registry.hpp"
#include "base/rng.hpp"
#include "tests/envs/drift_game.hpp"
#include "tests/seed.hpp"

using namespace troupe;
using namespace troupe::envs;
using troupe::test::drift_callbacks;
using troupe::test::drift_spec;
using troupe::test::fresh_seed;
using troupe::test::scoped_drift_env;

namespace {

const std::vector<std::string> builtin_ids = {
  "CartPole-v1", "Pendulum-v1",         "MountainCar-v0", "MountainCarContinuous-v0",
  "Acrobot-v1",  "InvertedPendulum-v4", "HalfCheetah-v4", "Hopper-v4",
  "Walker2d-v4", "Swimmer-v4",          "Reacher-v4",     "InvertedDoublePendulum-v4",
  "Ant-v4",      "Humanoid-v4"};

bool contains(const std::string& text, const std::string& word) {
  return text.find(word) != std::string::npos;
}

// The drift game in float64, written out again as the reference: the
// episode seeds come from base::rng(seed) as callback_env documents.
struct drift_reference {
  base::rng seeds;
  double x = 0, v = 0;
  int elapsed = 0;

  void reset() {
    base::rng g(seeds.next());
    x = g.uniform(-0.5, 0.5);
    v = g.uniform(-0.05, 0.05);
    elapsed = 0;
  }
  void reset(uint64_t seed) {
    seeds.seed_with(seed);
    reset();
  }
  // reward, terminated, truncated
  std::tuple<double, bool, bool> step(int action) {
    // The game's equations, in the same order of operations.
    v += 0.02 * (action - 1.0) - 0.01 * x;
    x += v;
    ++elapsed;
    return {1.0 - x * x, std::fabs(x) > 1.0, elapsed >= 40};
  }
};

} // namespace

TEST_CASE(
  "the built-in environments come first in the registry, then the registered ones "
  "in order") {
  const auto before = registered_ids();
  REQUIRE(before.size() >= builtin_ids.size());
  CHECK(std::vector<std::string>(
          before.begin(), before.begin() + static_cast<long>(builtin_ids.size())) ==
        builtin_ids);
  scoped_drift_env a("DriftA-v0", false), b("DriftB-v0", true);
  REQUIRE(a.registered());
  REQUIRE(b.registered());
  auto ids = registered_ids();
  REQUIRE(ids.size() == before.size() + 2);
  CHECK(ids[ids.size() - 2] == "DriftA-v0");
  CHECK(ids.back() == "DriftB-v0");
  auto listed = registry();
  REQUIRE(listed.size() == ids.size());
  for (size_t k = 0; k < ids.size(); ++k)
    CHECK(listed[k].spec.id == ids[k]);
  CHECK(listed.back().spec.state_names == std::vector<std::string>{"x", "v"});
  CHECK(listed.back().spec.early_truncation);
}

TEST_CASE(
  "an unregistered id is unknown again, while what was made from it keeps working") {
  std::shared_ptr<const env_spec> spec;
  std::unique_ptr<env> made;
  {
    scoped_drift_env d("DriftGone-v0", true);
    REQUIRE(d.registered());
    spec = find_spec("DriftGone-v0").value();
    made = make_env("DriftGone-v0").value();
  }
  auto gone = find_spec("DriftGone-v0");
  REQUIRE_FALSE(gone);
  CHECK(gone.err().code == errc::not_found);
  CHECK(contains(gone.err().message, "DriftGone-v0"));
  CHECK(contains(gone.err().message, "CartPole-v1")); // lists the valid ids
  CHECK_FALSE(make_vector_env("DriftGone-v0", 2));
  // The spec and the environment outlive the entry.
  CHECK(spec->id == "DriftGone-v0");
  CHECK(spec->observation_space.size() == 2);
  auto obs = made->reset(fresh_seed());
  REQUIRE(obs.size() == 2);
  CHECK(made->step(std::vector<float>{2.0f}).ok());
}

TEST_CASE("registering a taken id is refused naming the id, and the first entry stays") {
  scoped_drift_env d("DriftTwice-v0", true);
  REQUIRE(d.registered());
  for (std::string id : {std::string("DriftTwice-v0"), std::string("CartPole-v1")}) {
    CAPTURE(id);
    auto again = register_env(callback_registration(
      drift_spec(id, false), [] { return drift_callbacks(false); }));
    REQUIRE_FALSE(again);
    CHECK(again.err().code == errc::invalid_argument);
    CHECK(contains(again.err().message, "'" + id + "'"));
    CHECK(contains(again.err().message, "already registered"));
  }
  CHECK(find_spec("DriftTwice-v0").value()->state_dim() == 2); // the first one
  CHECK(find_spec("CartPole-v1").value()->state_dim() == 4);
}

TEST_CASE(
  "an invalid spec or a registration without a factory is refused with its rule") {
  struct bad_case {
    std::string what;
    std::function<void(registration&)> spoil;
    std::vector<std::string> words;
  };
  const std::vector<bad_case> cases = {
    {"empty id", [](auto& r) { r.spec.id = ""; }, {"id", "empty"}},
    {"id with a space", [](auto& r) { r.spec.id = "My Game"; }, {"'My Game'", "spaces"}},
    {"empty observation space",
     [](auto& r) { r.spec.observation_space = space::box(std::vector<float>{}, {}); },
     {"DriftBad-v0", "observation_space", "at least one", "0"}},
    {"Discrete observations",
     [](auto& r) { r.spec.observation_space = space::discrete(4); },
     {"DriftBad-v0", "observation_space", "Box", "Discrete(4)"}},
    {"low above high",
     [](auto& r) {
       r.spec.observation_space = space::box({-1.0f, 3.0f}, {1.0f, 2.0f});
     },
     {"DriftBad-v0", "observation_space element 1", "low = 3", "high = 2"}},
    {"NaN bound",
     [](auto& r) {
       r.spec.observation_space = space::box({-1.0f, NAN}, {1.0f, 2.0f});
     },
     {"DriftBad-v0", "observation_space element 1", "nan"}},
    {"mismatched bounds",
     [](auto& r) { r.spec.observation_space.high.pop_back(); },
     {"DriftBad-v0", "observation_space", "2", "1"}},
    {"no actions",
     [](auto& r) { r.spec.action_space = space::discrete(0); },
     {"DriftBad-v0", "action_space", "n = 0"}},
    {"empty action box",
     [](auto& r) { r.spec.action_space = space::box(std::vector<float>{}, {}); },
     {"DriftBad-v0", "action_space", "at least one"}},
    {"infinite action bound",
     [](auto& r) { r.spec.action_space = space::box(1, -INFINITY, 1.0f); },
     {"DriftBad-v0", "action_space element 0", "finite", "-inf"}},
    {"no time limit",
     [](auto& r) { r.spec.max_episode_steps = 0; },
     {"DriftBad-v0", "max_episode_steps", ">= 1", "0"}},
    {"no factory", [](auto& r) { r.make = nullptr; }, {"DriftBad-v0", "factory"}},
  };
  const auto ids_before = registered_ids();
  for (auto& c : cases) {
    CAPTURE(c.what);
    auto r = callback_registration(drift_spec("DriftBad-v0", false),
                                   [] { return drift_callbacks(false); });
    c.spoil(r);
    auto refused = register_env(r);
    REQUIRE_FALSE(refused);
    CHECK(refused.err().code == errc::invalid_argument);
    CAPTURE(refused.err().message);
    for (auto& w : c.words)
      CHECK(contains(refused.err().message, w));
    CHECK(registered_ids() == ids_before);
  }
}

TEST_CASE("unregistering an unknown or a built-in id is refused naming it") {
  auto unknown = unregister_env("NoSuchGame-v3");
  REQUIRE_FALSE(unknown);
  CHECK(unknown.err().code == errc::not_found);
  CHECK(contains(unknown.err().message, "NoSuchGame-v3"));
  auto builtin = unregister_env("Acrobot-v1");
  REQUIRE_FALSE(builtin);
  CHECK(builtin.err().code == errc::invalid_argument);
  CHECK(contains(builtin.err().message, "Acrobot-v1"));
  CHECK(contains(builtin.err().message, "built in"));
  CHECK(find_spec("Acrobot-v1"));
}

TEST_CASE("threads that register, look up, make and unregister at once all succeed") {
  const int threads = 4, rounds = 50;
  std::atomic<int> failures{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([t, &failures] {
      for (int k = 0; k < rounds; ++k) {
        const std::string id = fmt::format("DriftT{}K{}-v0", t, k);
        bool ok =
          register_env(callback_registration(drift_spec(id, false),
                                             [] { return drift_callbacks(false); }))
            .ok();
        ok =
          ok && find_spec(id).ok() && make_env(id).ok() && make_env("CartPole-v1").ok();
        ok = ok && registered_ids().size() >= 6;
        ok = ok && unregister_env(id).ok() && !find_spec(id).ok();
        if (!ok)
          ++failures;
      }
    });
  for (auto& th : pool)
    th.join();
  CHECK(failures.load() == 0);
  CHECK(registered_ids() == builtin_ids);
}

TEST_CASE("a registered callback env steps like its float64 reference, alone and in a "
          "batch") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  scoped_drift_env d("DriftRef-v0", true);
  REQUIRE(d.registered());
  std::mt19937_64 gen(seed);

  // One environment, through make_env.
  auto e = make_env("DriftRef-v0").value();
  drift_reference ref;
  std::vector<float> obs(2);
  e->reset(seed, obs.data());
  ref.reset(seed);
  int episodes = 0;
  for (int t = 0; t < 300; ++t) {
    REQUIRE(obs[0] == static_cast<float>(ref.x));
    REQUIRE(obs[1] == static_cast<float>(ref.v));
    const float action = static_cast<float>(gen() % 3);
    auto got = e->step(&action, obs.data());
    REQUIRE(got);
    auto [reward, terminated, truncated] = ref.step(static_cast<int>(action));
    CHECK(got->reward == reward);
    REQUIRE(got->terminated == terminated);
    REQUIRE(got->truncated == truncated);
    CHECK(e->elapsed_steps() == ref.elapsed);
    if (terminated || truncated) {
      e->reset(obs.data());
      ref.reset();
      ++episodes;
    }
  }
  CHECK(episodes >= 300 / 40); // the time limit at least

  // A batch through make_vector_env (the generic batch over make): seed + i,
  // next-step autoreset from each environment's own stream.
  const size_t n = 5;
  auto v = make_vector_env("DriftRef-v0", n, 2).value();
  CHECK(v->can_save_state());
  std::vector<drift_reference> refs(n);
  std::vector<bool> done(n, false);
  v->reset(seed);
  for (size_t i = 0; i < n; ++i)
    refs[i].reset(seed + i);
  std::vector<float> actions(n);
  for (int t = 0; t < 200; ++t) {
    for (size_t i = 0; i < n; ++i) {
      CAPTURE(i);
      REQUIRE(v->observations()[2 * i] == static_cast<float>(refs[i].x));
      REQUIRE(v->observations()[2 * i + 1] == static_cast<float>(refs[i].v));
    }
    for (auto& a : actions)
      a = static_cast<float>(gen() % 3);
    REQUIRE(v->step(actions.data()));
    for (size_t i = 0; i < n; ++i) {
      if (done[i]) {
        refs[i].reset();
        done[i] = false;
        CHECK(v->autoreset()[i] == 1);
        CHECK(v->rewards()[i] == 0.0f);
        continue;
      }
      auto [reward, terminated, truncated] = refs[i].step(static_cast<int>(actions[i]));
      CHECK(v->autoreset()[i] == 0);
      CHECK(v->rewards()[i] == static_cast<float>(reward));
      REQUIRE(v->terminated()[i] == terminated);
      REQUIRE(v->truncated()[i] == truncated);
      done[i] = terminated || truncated;
    }
  }
  // Actions outside the space are refused before the game sees them.
  std::vector<float> wrong(n, 1.0f);
  wrong[3] = 3.0f;
  auto refused = v->step(wrong.data());
  REQUIRE_FALSE(refused);
  CHECK(contains(refused.err().message, "environment 3"));
}

TEST_CASE("a callback env that returns a NaN observation or reward fails the step naming "
          "the env, the step and the value") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  const int bad_step = 3 + static_cast<int>(seed % 20);
  CAPTURE(bad_step);
  struct bad_case {
    std::string what;
    int nan_obs, nan_reward;
    std::vector<std::string> words;
  };
  for (auto& c : std::vector<bad_case>{
         {"observation", bad_step, -1, {"observation[1]", "finite", "nan"}},
         {"reward", -1, bad_step, {"reward", "finite", "nan"}}}) {
    CAPTURE(c.what);
    // Alone: the first bad step fails, and the steps before it succeed.
    auto e = callback_env::make(drift_spec("DriftNaN-v0", false),
                                drift_callbacks(false, c.nan_obs, c.nan_reward))
               .value();
    std::vector<float> obs(2);
    e->reset(seed, obs.data());
    int failed_at = -1;
    std::string message;
    for (int t = 1; t <= bad_step && failed_at < 0; ++t) {
      const float action = 1.0f;
      auto r = e->step(&action, obs.data());
      if (!r) {
        failed_at = t;
        message = r.err().message;
        CHECK(r.err().code == errc::non_finite);
      } else if (r->terminated || r->truncated) {
        e->reset(obs.data());
      }
    }
    CAPTURE(message);
    CHECK(failed_at == bad_step);
    CHECK(contains(message, "DriftNaN-v0"));
    for (auto& w : c.words)
      CHECK(contains(message, w));
    // The environment refuses to go on until it is reset.
    const float action = 1.0f;
    CHECK_FALSE(e->step(&action, obs.data()));
    e->reset(obs.data());
    CHECK(e->step(&action, obs.data()));

    // In a batch: the step fails naming the environment.
    const int nan_obs = c.nan_obs, nan_reward = c.nan_reward;
    registration r = callback_registration(drift_spec("DriftNaNBatch-v0", false), [=] {
      return drift_callbacks(false, nan_obs, nan_reward);
    });
    REQUIRE(register_env(r));
    auto v = make_vector_env("DriftNaNBatch-v0", 3).value();
    REQUIRE(unregister_env("DriftNaNBatch-v0"));
    v->reset(seed);
    std::vector<float> actions(3, 1.0f);
    status last;
    int steps = 0;
    while ((last = v->step(actions.data())) && steps < 200)
      ++steps;
    REQUIRE_FALSE(last);
    CAPTURE(last.err().message);
    CHECK(contains(last.err().message, ": environment ")); // the batch names which
    CHECK(contains(last.err().message, "DriftNaNBatch-v0"));
    for (auto& w : c.words)
      CHECK(contains(last.err().message, w));
  }
}

TEST_CASE("a callback env whose reset fails or writes NaN reports it at the next step") {
  auto cb = drift_callbacks(false);
  int resets = 0;
  auto inner = cb.reset;
  cb.reset = [&resets, inner](uint64_t seed, float* obs) -> status {
    ++resets;
    if (resets == 1)
      return make_error(errc::io_error, "the level file is missing");
    auto ok = inner(seed, obs);
    obs[0] = INFINITY;
    return ok;
  };
  auto e = callback_env::make(drift_spec("DriftReset-v0", false), std::move(cb)).value();
  std::vector<float> obs(2);
  const float action = 0.0f;
  e->reset(fresh_seed(), obs.data());
  auto first = e->step(&action, obs.data());
  REQUIRE_FALSE(first);
  CHECK(contains(first.err().message, "DriftReset-v0"));
  CHECK(contains(first.err().message, "reset"));
  CHECK(contains(first.err().message, "the level file is missing"));
  e->reset(obs.data());
  auto second = e->step(&action, obs.data());
  REQUIRE_FALSE(second);
  CHECK(second.err().code == errc::non_finite);
  CHECK(contains(second.err().message, "observation[0]"));
  CHECK(contains(second.err().message, "inf"));
}

TEST_CASE("a callback env with missing or unpaired callbacks is refused naming the id") {
  struct bad_case {
    std::string what;
    bool with_state_names;
    std::function<void(env_callbacks&)> spoil;
    std::vector<std::string> words;
  };
  const std::vector<bad_case> cases = {
    {"no step", false, [](auto& cb) { cb.step = nullptr; }, {"step", "required"}},
    {"no reset", false, [](auto& cb) { cb.reset = nullptr; }, {"reset", "required"}},
    {"get_state alone",
     true,
     [](auto& cb) { cb.set_state = nullptr; },
     {"get_state", "set_state", "only get_state"}},
    {"state names without callbacks",
     true,
     [](auto& cb) {
       cb.get_state = nullptr;
       cb.set_state = nullptr;
     },
     {"state_names", "2"}},
  };
  for (auto& c : cases) {
    CAPTURE(c.what);
    auto cb = drift_callbacks(true);
    c.spoil(cb);
    auto spec = drift_spec("DriftHalf-v0", c.with_state_names);
    auto direct = callback_env::make(spec, cb);
    REQUIRE_FALSE(direct);
    CAPTURE(direct.err().message);
    CHECK(contains(direct.err().message, "DriftHalf-v0"));
    for (auto& w : c.words)
      CHECK(contains(direct.err().message, w));
    // Through the registry: make_env and make_vector_env report it too.
    REQUIRE(register_env(callback_registration(spec, [cb] { return cb; })));
    auto made = make_env("DriftHalf-v0");
    auto batch = make_vector_env("DriftHalf-v0", 2);
    REQUIRE(unregister_env("DriftHalf-v0"));
    REQUIRE_FALSE(made);
    REQUIRE_FALSE(batch);
    for (auto& w : c.words) {
      CHECK(contains(made.err().message, w));
      CHECK(contains(batch.err().message, w));
    }
    CHECK(contains(batch.err().message, "environment 0 of 2"));
  }
}

TEST_CASE(
  "a batch of callback envs with state callbacks restores bit for bit, and without "
  "them it saves no state and refuses to restore") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  scoped_drift_env with("DriftState-v0", true), without("DriftNoState-v0", false);
  REQUIRE(with.registered());
  REQUIRE(without.registered());
  std::mt19937_64 gen(seed);
  const size_t n = 4;
  auto actions_for = [&] {
    std::vector<float> a(n);
    for (auto& x : a)
      x = static_cast<float>(gen() % 3);
    return a;
  };

  auto a = make_vector_env("DriftState-v0", n).value();
  a->reset(seed);
  for (int t = 0; t < 30 + static_cast<int>(seed % 40); ++t)
    REQUIRE(a->step(actions_for().data()));
  const auto saved = a->save_state();
  CHECK(saved.with_state);
  auto b = make_vector_env("DriftState-v0", n, 2).value();
  REQUIRE(b->restore_state(saved));
  for (int t = 0; t < 100; ++t) {
    auto acts = actions_for();
    REQUIRE(a->step(acts.data()));
    REQUIRE(b->step(acts.data()));
    for (size_t k = 0; k < 2 * n; ++k)
      REQUIRE(a->observations()[k] == b->observations()[k]);
    for (size_t i = 0; i < n; ++i) {
      REQUIRE(a->rewards()[i] == b->rewards()[i]);
      REQUIRE(a->autoreset()[i] == b->autoreset()[i]);
    }
  }

  auto c = make_vector_env("DriftNoState-v0", n).value();
  CHECK_FALSE(c->can_save_state());
  c->reset(seed);
  REQUIRE(c->step(actions_for().data()));
  const auto none = c->save_state();
  CHECK_FALSE(none.with_state);
  CHECK(none.rng.empty());
  CHECK(none.state.empty());
  CHECK(none.elapsed_steps.empty());
  CHECK(none.rewards.size() == n);
  CHECK(c->check_state(none));
  auto refused = c->restore_state(none);
  REQUIRE_FALSE(refused);
  CHECK(contains(refused.err().message, "DriftNoState-v0"));
  CHECK(contains(refused.err().message, "reset"));
  // A state with environment state is refused by environments that have none.
  auto with_values = none;
  with_values.with_state = true;
  auto refused2 = c->check_state(with_values);
  REQUIRE_FALSE(refused2);
  CHECK(contains(refused2.err().message, "can_save_state"));
}

TEST_CASE("a game that refuses a saved state fails restore_state naming the environment, "
          "and the batch steps again only after a reset") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  REQUIRE(register_env(callback_registration(drift_spec("DriftRefuse-v0", true), [] {
    auto cb = drift_callbacks(true);
    cb.set_state = [](const double*, float*) -> status {
      return make_error(errc::invalid_argument, "the level has no such position");
    };
    return cb;
  })));
  auto v = make_vector_env("DriftRefuse-v0", 3).value();
  REQUIRE(unregister_env("DriftRefuse-v0"));
  v->reset(seed);
  std::vector<float> actions(3, 2.0f);
  REQUIRE(v->step(actions.data()));
  const auto saved = v->save_state();
  REQUIRE(saved.with_state);
  CHECK(v->check_state(saved)); // the values are fine; the game refuses them
  auto refused = v->restore_state(saved);
  REQUIRE_FALSE(refused);
  CAPTURE(refused.err().message);
  CHECK(contains(refused.err().message, "DriftRefuse-v0"));
  CHECK(contains(refused.err().message, "environment 0"));
  CHECK(contains(refused.err().message, "the level has no such position"));
  auto early = v->step(actions.data());
  REQUIRE_FALSE(early);
  CHECK(contains(early.err().message, "before reset()"));
  v->reset(seed + 1);
  CHECK(v->step(actions.data()));
}
