// The environment runner actor: fixed-length batches that replay in scalar
// environments, episode bookkeeping, versions, normalization through a view,
// moment deltas to the keeper, and non-finite values kept from the keeper.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/env_runner.hpp"
#include "actors/messages.hpp"
#include "actors/policy_store.hpp"
#include "actors/stats_keeper.hpp"
#include "envs/mujoco/tasks.hpp"
#include "envs/registry.hpp"
#include "kernels/moments.hpp"
#include "tests/actors/ask.hpp"
#include "tests/seed.hpp"

using namespace troupe;
using namespace troupe::actors;
using troupe::test::fresh_seed;

namespace {

struct runner_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::vector<std::string> log;
  std::mutex log_mtx;

  runner_fixture() {
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
};

// Asks the runner for `n` batches and returns them in order, then checks the
// reply (the batches arrive before it: one sender, FIFO).
std::vector<trajectory_batch> collect(caf::scoped_actor& self, const caf::actor& runner,
                                      uint64_t n) {
  uint64_t replied = 0;
  self->request(runner, test::wait_limit, collect_atom::value, n)
    .receive(
      [&](uint64_t sent) { replied = sent; },
      [&](caf::error& e) { FAIL("collect failed: " << self->system().render(e)); });
  CHECK(replied == n);
  std::vector<trajectory_batch> out;
  for (uint64_t k = 0; k < n; ++k)
    self->receive([&](trajectory_batch& b) { out.push_back(std::move(b)); },
                  test::fail_after("a collected trajectory batch"));
  return out;
}

using test::ask;

// A policy that counts its calls as its version and draws random actions.
policy_fn versioned_random_policy(const envs::space& space) {
  auto inner = make_random_policy(space);
  auto calls = std::make_shared<uint64_t>(100);
  return [inner, calls](const float* obs, size_t n, base::rng& gen, float* actions,
                        float* logp) -> result<uint64_t> {
    if (auto acted = inner(obs, n, gen, actions, logp); !acted)
      return acted.err();
    return (*calls)++;
  };
}

// Replays the batches' actions through scalar environments seeded like the
// runner's and checks observations, rewards, flags and episodes.
void check_replay(const std::vector<trajectory_batch>& batches, const std::string& id,
                  uint64_t seed, double obs_tol) {
  const auto& first = batches.front();
  const size_t n = first.num_envs, od = first.obs_dim, ad = first.action_dim;
  std::vector<std::unique_ptr<envs::env>> scalar;
  std::vector<std::vector<float>> obs(n);
  std::vector<bool> ended(n, false);
  std::vector<double> ret(n, 0.0);
  std::vector<uint64_t> len(n, 0);
  for (size_t i = 0; i < n; ++i) {
    scalar.push_back(envs::make_env(id).value());
    obs[i] = scalar[i]->reset(seed + i);
  }
  for (auto& b : batches) {
    CAPTURE(b.sequence);
    std::vector<double> returns;
    std::vector<uint64_t> lengths;
    for (size_t t = 0; t < b.steps; ++t) {
      for (size_t i = 0; i < n; ++i) {
        CAPTURE(t);
        CAPTURE(i);
        for (size_t j = 0; j < od; ++j)
          CHECK(std::fabs(b.observations[(t * n + i) * od + j] - obs[i][j]) <=
                obs_tol * (1 + std::fabs(obs[i][j])));
        const size_t k = t * n + i;
        if (ended[i]) {
          obs[i].assign(od, 0.0f);
          scalar[i]->reset(obs[i].data());
          CHECK(b.autoreset[k] == 1);
          CHECK(b.rewards[k] == 0.0f);
          ended[i] = false;
          continue;
        }
        CHECK(b.autoreset[k] == 0);
        auto r = scalar[i]->step(&b.actions[k * ad], obs[i].data()).value();
        CHECK(b.rewards[k] == doctest::Approx(r.reward).epsilon(1e-6));
        CHECK(b.terminated[k] == r.terminated);
        CHECK(b.truncated[k] == r.truncated);
        ret[i] += static_cast<float>(r.reward);
        len[i] += 1;
        ended[i] = r.terminated || r.truncated;
        if (ended[i]) {
          returns.push_back(ret[i]);
          lengths.push_back(len[i]);
          ret[i] = 0;
          len[i] = 0;
        }
      }
    }
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < od; ++j)
        CHECK(std::fabs(b.observations[(b.steps * n + i) * od + j] - obs[i][j]) <=
              obs_tol * (1 + std::fabs(obs[i][j])));
    CHECK(b.episode_lengths == lengths);
    REQUIRE(b.episode_returns.size() == returns.size());
    for (size_t e = 0; e < returns.size(); ++e)
      CHECK(b.episode_returns[e] == doctest::Approx(returns[e]).epsilon(1e-6));
  }
}

} // namespace

TEST_CASE(
  "the env runner streams fixed-length batches that replay in scalar environments") {
  runner_fixture fx;
  caf::scoped_actor self{*fx.sys};
  for (std::string id : {"CartPole-v1", "Pendulum-v1"}) {
    CAPTURE(id);
    uint64_t seed = fresh_seed();
    CAPTURE(seed);
    const size_t n = 5, steps = 64;
    std::shared_ptr<envs::vector_env> vec = envs::make_vector_env(id, n).value();
    env_runner_options opts;
    opts.name = "runner-a";
    opts.seed = seed;
    opts.steps_per_batch = steps;
    opts.log = fx.logger();
    auto runner = spawn_env_runner(*fx.sys, opts, vec,
                                   versioned_random_policy(vec->spec().action_space),
                                   caf::actor_cast<caf::actor>(self));
    auto batches = collect(self, runner, 3);
    REQUIRE(batches.size() == 3);
    for (uint64_t k = 0; k < 3; ++k) {
      auto& b = batches[k];
      CHECK(b.sequence == k);
      CHECK(b.runner == "runner-a");
      CHECK(b.env_id == id);
      CHECK(b.num_envs == n);
      CHECK(b.steps == steps);
      CHECK(b.observations.size() == (steps + 1) * n * b.obs_dim);
      CHECK(b.actions.size() == steps * n * b.action_dim);
      CHECK(b.rewards.size() == steps * n);
      CHECK(b.terminated.size() == steps * n);
      CHECK(b.truncated.size() == steps * n);
      CHECK(b.policy_version == 100 + k * steps); // oldest version used in the batch
      CHECK(b.stats_version == 0);
      CHECK_FALSE(b.normalized);
      CHECK(b.episode_reward_terms.empty()); // classic control: no terms, no counters
      CHECK(b.env_counters.empty());
      CHECK(std::equal(b.observations.begin() + steps * n * b.obs_dim,
                       b.observations.end(),
                       k + 1 < 3 ? batches[k + 1].observations.begin()
                                 : b.observations.begin() + steps * n * b.obs_dim));
    }
    // CartPole's batch kernel has its own sine and cosine: float32 tolerance.
    check_replay(batches, id, seed, id == "CartPole-v1" ? 1e-5 : 0.0);
    auto st = ask<env_runner_status>(self, runner, status_atom::value);
    CHECK(st.batches == 3);
    CHECK(st.env_steps == 3 * steps * n);
    CHECK(st.non_finite == 0);
    CHECK(st.deltas_sent == 0);
    size_t episodes = 0;
    for (auto& b : batches)
      episodes += b.episode_returns.size();
    CHECK(st.episodes == episodes);
    if (id == "CartPole-v1")
      CHECK(episodes > 0);
    self->send_exit(runner, caf::exit_reason::user_shutdown);
  }
}

TEST_CASE("the env runner normalizes with the view's snapshot and sends raw moments to "
          "the keeper") {
  runner_fixture fx;
  caf::scoped_actor self{*fx.sys};
  uint64_t seed = fresh_seed();
  CAPTURE(seed);
  const std::string id = "MountainCar-v0";
  const size_t n = 6, steps = 40;
  std::shared_ptr<envs::vector_env> vec = envs::make_vector_env(id, n).value();
  const size_t od = vec->obs_dim();
  stats_keeper_options ko;
  ko.log = fx.logger();
  auto keeper = spawn_stats_keeper(*fx.sys, ko);
  // A view with a known snapshot, so that the normalization can be checked.
  auto view = std::make_shared<learners::stats_view>(od, "obs");
  std::mt19937_64 gen(seed);
  std::vector<double> mean = {std::uniform_real_distribution<double>(-0.6, -0.4)(gen),
                              std::uniform_real_distribution<double>(-0.01, 0.01)(gen)};
  std::vector<double> var = {std::uniform_real_distribution<double>(0.01, 0.1)(gen),
                             std::uniform_real_distribution<double>(1e-5, 1e-4)(gen)};
  REQUIRE(view->publish(7, 1000, mean.data(), var.data(), od).ok());
  env_runner_options opts;
  opts.name = "runner-n";
  opts.seed = seed;
  opts.steps_per_batch = steps;
  opts.obs_clip = 5.0;
  opts.log = fx.logger();
  auto runner =
    spawn_env_runner(*fx.sys, opts, vec, make_random_policy(vec->spec().action_space),
                     caf::actor_cast<caf::actor>(self), keeper, view);
  auto batches = collect(self, runner, 2);

  // Raw observations from a replay of the same seeds and actions.
  std::vector<std::unique_ptr<envs::env>> scalar;
  std::vector<std::vector<float>> obs(n);
  std::vector<bool> ended(n, false);
  for (size_t i = 0; i < n; ++i) {
    scalar.push_back(envs::make_env(id).value());
    obs[i] = scalar[i]->reset(seed + i);
  }
  std::vector<float> all_raw;
  for (auto& b : batches) {
    CHECK(b.stats_version == 7);
    CHECK(b.normalized);
    for (size_t t = 0; t < steps; ++t)
      for (size_t i = 0; i < n; ++i) {
        for (size_t j = 0; j < od; ++j) {
          double z = (obs[i][j] - mean[j]) / std::sqrt(var[j] + opts.obs_epsilon);
          z = std::fmin(std::fmax(z, -5.0), 5.0);
          CHECK(b.observations[(t * n + i) * od + j] == doctest::Approx(z).epsilon(1e-6));
          all_raw.push_back(obs[i][j]);
        }
        if (ended[i]) {
          scalar[i]->reset(obs[i].data());
          ended[i] = false;
        } else {
          auto r = scalar[i]->step(&b.actions[(t * n + i) * b.action_dim], obs[i].data());
          ended[i] = r->terminated || r->truncated;
        }
      }
  }
  // Every raw observation the policy saw reached the keeper exactly once.
  ask<sync_atom>(self, keeper, sync_atom::value);
  auto status = ask<stream_status>(self, keeper, status_atom::value, std::string("obs"));
  CHECK(status.count == 2 * steps * n);
  CHECK(status.rejected == 0);
  auto snap =
    ask<learners::stats_snapshot>(self, keeper, snapshot_atom::value, std::string("obs"));
  REQUIRE(snap.mean.size() == od);
  for (size_t j = 0; j < od; ++j) {
    long double s = 0, q = 0;
    const size_t rows = all_raw.size() / od;
    for (size_t r = 0; r < rows; ++r)
      s += all_raw[r * od + j];
    long double m = s / rows;
    for (size_t r = 0; r < rows; ++r)
      q += (all_raw[r * od + j] - m) * (all_raw[r * od + j] - m);
    CHECK(snap.mean[j] == doctest::Approx(static_cast<double>(m)).epsilon(1e-12));
    CHECK(snap.var[j] == doctest::Approx(static_cast<double>(q / rows)).epsilon(1e-9));
  }
  auto st = ask<env_runner_status>(self, runner, status_atom::value);
  CHECK(st.deltas_sent == 2);
  self->send_exit(runner, caf::exit_reason::user_shutdown);
  self->send_exit(keeper, caf::exit_reason::user_shutdown);
}

namespace {

// A vector env whose observation of environment 1 becomes NaN on its third
// step, for the non-finite path.
class poisoned_env final : public envs::vector_env {
public:
  explicit poisoned_env(size_t n)
    : vector_env(*envs::find_spec("MountainCar-v0").value(), n, 1), steps_(n, 0) {}

  std::vector<double> state(size_t) const override { return {0.0, 0.0}; }
  int elapsed_steps(size_t i) const override { return steps_[i]; }
  std::array<uint64_t, 4> rng_state(size_t) const override { return {1, 2, 3, 4}; }

protected:
  status restore_env(size_t i, const std::array<uint64_t, 4>&, const double*,
                     int elapsed) override {
    steps_[i] = elapsed;
    return {};
  }
  void reset_range(size_t begin, size_t end, uint64_t) override {
    for (size_t i = begin; i < end; ++i) {
      observations_[2 * i] = -0.5f;
      observations_[2 * i + 1] = 0.0f;
      steps_[i] = 0;
    }
  }
  status step_range(size_t begin, size_t end, const float*) override {
    for (size_t i = begin; i < end; ++i) {
      ++steps_[i];
      observations_[2 * i] = i == 1 && steps_[i] == 3 ? NAN : -0.5f + 0.001f * steps_[i];
      rewards_[i] = -1.0f;
    }
    return {};
  }

private:
  std::vector<int> steps_;
};

} // namespace

TEST_CASE("a non-finite observation is counted, logged with the env id and kept from the "
          "keeper") {
  runner_fixture fx;
  caf::scoped_actor self{*fx.sys};
  stats_keeper_options ko;
  ko.log = fx.logger();
  auto keeper = spawn_stats_keeper(*fx.sys, ko);
  auto vec = std::make_shared<poisoned_env>(3);
  env_runner_options opts;
  opts.name = "runner-p";
  opts.steps_per_batch = 2;
  opts.log = fx.logger();
  auto runner =
    spawn_env_runner(*fx.sys, opts, vec, make_random_policy(vec->spec().action_space),
                     caf::actor_cast<caf::actor>(self), keeper);
  // Batch 0 sees steps 0-1 (clean); batch 1 sees step 3's NaN as its second
  // observation; batch 2 is clean again.
  auto batches = collect(self, runner, 3);
  ask<sync_atom>(self, keeper, sync_atom::value);
  auto st = ask<env_runner_status>(self, runner, status_atom::value);
  CHECK(st.non_finite == 1);
  CHECK(st.deltas_sent == 2);
  auto status = ask<stream_status>(self, keeper, status_atom::value, std::string("obs"));
  CHECK(status.count == 2 * 2 * 3);
  CHECK(status.rejected == 0);
  std::lock_guard<std::mutex> g(fx.log_mtx);
  REQUIRE(fx.log.size() == 1);
  CHECK(fx.log[0].find("MountainCar-v0") != std::string::npos);
  CHECK(fx.log[0].find("runner-p") != std::string::npos);
  CHECK(fx.log[0].find("environment 1") != std::string::npos);
  self->send_exit(runner, caf::exit_reason::user_shutdown);
  self->send_exit(keeper, caf::exit_reason::user_shutdown);
}

TEST_CASE("a random policy draws only actions inside the action space") {
  uint64_t seed = fresh_seed();
  CAPTURE(seed);
  for (auto& id : envs::registered_ids()) {
    CAPTURE(id);
    const auto& space = envs::find_spec(id).value()->action_space;
    auto policy = make_random_policy(space);
    base::rng gen(seed);
    std::vector<float> actions(1000 * space.size());
    std::vector<float> logp(1000);
    auto acted = policy(nullptr, 1000, gen, actions.data(), logp.data());
    REQUIRE(acted.ok());
    CHECK(*acted == 0);
    // Uniform: every draw has log-probability -log n, or -log of the box's volume.
    double expected = 0;
    if (space.kind == envs::space_kind::discrete)
      expected = -std::log(static_cast<double>(space.n));
    else
      for (size_t j = 0; j < space.size(); ++j)
        expected -= std::log(static_cast<double>(space.high[j]) - space.low[j]);
    for (float lp : logp)
      CHECK(lp == doctest::Approx(expected).epsilon(1e-6));
    if (space.kind == envs::space_kind::discrete) {
      std::vector<int> seen(static_cast<size_t>(space.n), 0);
      for (size_t i = 0; i < 1000; ++i) {
        CHECK(space.contains(&actions[i]));
        seen[static_cast<size_t>(actions[i])] += 1;
      }
      for (int c : seen)
        CHECK(c > 0); // every action drawn
    } else {
      float lo = INFINITY, hi = -INFINITY;
      for (size_t i = 0; i < 1000; ++i) {
        CHECK(space.contains(&actions[i * space.size()]));
        lo = std::min(lo, actions[i * space.size()]);
        hi = std::max(hi, actions[i * space.size()]);
      }
      float width = space.high[0] - space.low[0];
      CHECK(lo < space.low[0] + 0.05f * width); // the whole range is drawn
      CHECK(hi > space.high[0] - 0.05f * width);
    }
  }
}

TEST_CASE(
  "a store policy records the log-probability of each action under the acting weights") {
  runner_fixture fx;
  caf::scoped_actor self{*fx.sys};
  for (std::string id : {"CartPole-v1", "Pendulum-v1"}) {
    CAPTURE(id);
    uint64_t seed = fresh_seed();
    CAPTURE(seed);
    const size_t n = 7, steps = 9;
    std::shared_ptr<envs::vector_env> vec = envs::make_vector_env(id, n).value();
    vec->set_clip_box_actions(true);
    const auto& es = vec->spec();
    learners::model_spec spec;
    spec.obs_dim = static_cast<int64_t>(vec->obs_dim());
    if (es.action_space.kind == envs::space_kind::discrete) {
      spec.action = learners::action_kind::discrete;
      spec.n = es.action_space.n;
    } else {
      spec.action = learners::action_kind::box;
      spec.act_dim = static_cast<int64_t>(vec->action_dim());
    }
    spec.hidden = {16};
    learners::actor_critic model(spec, seed);
    auto store = std::make_shared<policy_store>(model, 4);
    env_runner_options opts;
    opts.seed = seed;
    opts.steps_per_batch = steps;
    auto runner = spawn_env_runner(*fx.sys, opts, vec, make_store_policy(store, steps),
                                   caf::actor_cast<caf::actor>(self));
    auto batches = collect(self, runner, 2);
    REQUIRE(batches.size() == 2);
    for (auto& b : batches) {
      REQUIRE(b.behavior_logp.size() == steps * n);
      const size_t rows = steps * n;
      learners::policy_output out;
      REQUIRE(model.evaluate(b.observations.data(), rows, nullptr, out).ok());
      for (size_t r = 0; r < rows; ++r) {
        CAPTURE(r);
        double expected = 0;
        if (spec.action == learners::action_kind::discrete) {
          const float* l = &out.logits[r * static_cast<size_t>(spec.n)];
          double top = l[0], total = 0;
          for (int64_t j = 1; j < spec.n; ++j)
            top = std::max<double>(top, l[j]);
          for (int64_t j = 0; j < spec.n; ++j)
            total += std::exp(static_cast<double>(l[j]) - top);
          expected = l[static_cast<size_t>(b.actions[r])] - top - std::log(total);
        } else {
          for (int64_t j = 0; j < spec.act_dim; ++j) {
            const double mean = out.mean[r * static_cast<size_t>(spec.act_dim) + j];
            const double log_std = out.log_std[static_cast<size_t>(j)];
            const double z =
              (b.actions[r * static_cast<size_t>(spec.act_dim) + j] - mean) /
              std::exp(log_std);
            expected += -0.5 * z * z - log_std - 0.91893853320467274;
          }
        }
        CHECK(b.behavior_logp[r] == doctest::Approx(expected).epsilon(1e-4));
      }
    }
    self->send_exit(runner, caf::exit_reason::user_shutdown);
  }
}

// -- runner state ---------------------------------------------------------------

namespace {

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// Every field of two batches but the runner's name, floats bit for bit.
void check_same_batch(const trajectory_batch& a, const trajectory_batch& b) {
  CHECK(a.env_id == b.env_id);
  CHECK(a.sequence == b.sequence);
  CHECK(a.num_envs == b.num_envs);
  CHECK(a.steps == b.steps);
  CHECK(a.obs_dim == b.obs_dim);
  CHECK(a.action_dim == b.action_dim);
  CHECK(same_bits(a.observations, b.observations));
  CHECK(same_bits(a.actions, b.actions));
  CHECK(same_bits(a.behavior_logp, b.behavior_logp));
  CHECK(same_bits(a.rewards, b.rewards));
  CHECK(a.terminated == b.terminated);
  CHECK(a.truncated == b.truncated);
  CHECK(a.autoreset == b.autoreset);
  CHECK(same_bits(a.episode_returns, b.episode_returns));
  CHECK(a.episode_lengths == b.episode_lengths);
  CHECK(a.policy_version == b.policy_version);
  CHECK(a.stats_version == b.stats_version);
  CHECK(a.normalized == b.normalized);
}

TEST_CASE("a store divergence is the mean KL of the newest policy between two views of "
          "the observations, against a long-double reference") {
  for (auto kind : {learners::action_kind::discrete, learners::action_kind::box}) {
    const uint64_t seed = fresh_seed();
    CAPTURE(seed);
    std::mt19937_64 gen(seed);
    learners::model_spec spec;
    spec.obs_dim = 3 + static_cast<int64_t>(gen() % 4);
    spec.action = kind;
    if (kind == learners::action_kind::discrete)
      spec.n = 2 + static_cast<int64_t>(gen() % 4);
    else
      spec.act_dim = 1 + static_cast<int64_t>(gen() % 3);
    spec.hidden = {16, 8};
    learners::actor_critic model(spec, gen());
    auto store = std::make_shared<policy_store>(model, 2);
    // Newer weights, with log-standard-deviations of their own: the divergence
    // takes the newest version.
    std::normal_distribution<float> normal(0.0f, 0.7f);
    learners::actor_critic newer = model;
    for (size_t k = 0; k < newer.param_count(); ++k)
      newer.params()[k] += 0.3f * normal(gen);
    store->publish(4, newer.params(), newer.buffers());
    auto divergence = make_store_divergence(store);
    const size_t rows = 1 + gen() % 40, od = static_cast<size_t>(spec.obs_dim);
    std::vector<float> a(rows * od), b(rows * od);
    for (auto& x : a)
      x = normal(gen);
    for (size_t k = 0; k < b.size(); ++k)
      b[k] = a[k] + 0.5f * normal(gen);
    auto same = divergence(a.data(), a.data(), rows);
    REQUIRE(same.ok());
    CHECK(*same == 0.0);
    auto got = divergence(a.data(), b.data(), rows);
    REQUIRE(got.ok());

    learners::policy_output pa, pb;
    REQUIRE(newer.evaluate(a.data(), rows, nullptr, pa).ok());
    REQUIRE(newer.evaluate(b.data(), rows, nullptr, pb).ok());
    long double total = 0;
    for (size_t r = 0; r < rows; ++r) {
      if (kind == learners::action_kind::discrete) {
        const size_t n = static_cast<size_t>(spec.n);
        long double za = 0, zb = 0;
        for (size_t j = 0; j < n; ++j) {
          za += std::exp(static_cast<long double>(pa.logits[r * n + j]));
          zb += std::exp(static_cast<long double>(pb.logits[r * n + j]));
        }
        for (size_t j = 0; j < n; ++j) {
          const long double la = pa.logits[r * n + j] - std::log(za);
          const long double lb = pb.logits[r * n + j] - std::log(zb);
          total += std::exp(la) * (la - lb);
        }
      } else {
        // KL of two Gaussians: log(s_b/s_a) + (s_a^2 + (m_a - m_b)^2) / (2 s_b^2) - 1/2.
        const size_t d = static_cast<size_t>(spec.act_dim);
        for (size_t j = 0; j < d; ++j) {
          const long double sa = std::exp(static_cast<long double>(pa.log_std[j]));
          const long double sb = std::exp(static_cast<long double>(pb.log_std[j]));
          const long double gap =
            static_cast<long double>(pa.mean[r * d + j]) - pb.mean[r * d + j];
          total += std::log(sb / sa) + (sa * sa + gap * gap) / (2 * sb * sb) - 0.5L;
        }
      }
    }
    const double expected = static_cast<double>(total / rows);
    CHECK(expected > 0.0);
    CHECK(*got == doctest::Approx(expected).epsilon(1e-9));
  }
}

TEST_CASE("a store divergence refuses a model that normalizes its observations itself") {
  learners::model_spec spec;
  spec.obs_dim = 2;
  spec.n = 3;
  spec.hidden = {4};
  spec.obs_norm = true;
  auto divergence = make_store_divergence(
    std::make_shared<policy_store>(learners::actor_critic(spec, fresh_seed()), 1));
  std::vector<float> a(4, 0.5f);
  auto got = divergence(a.data(), a.data(), 2);
  REQUIRE_FALSE(got.ok());
  CHECK(got.err().message.find("policy version 0") != std::string::npos);
}

// A store policy over fixed weights of a small model for `vec`'s spaces.
policy_fn fixed_store_policy(const envs::vector_env& vec, size_t steps, uint64_t seed) {
  const auto& es = vec.spec();
  learners::model_spec spec;
  spec.obs_dim = static_cast<int64_t>(vec.obs_dim());
  if (es.action_space.kind == envs::space_kind::discrete) {
    spec.action = learners::action_kind::discrete;
    spec.n = es.action_space.n;
  } else {
    spec.action = learners::action_kind::box;
    spec.act_dim = static_cast<int64_t>(vec.action_dim());
  }
  spec.hidden = {16};
  learners::actor_critic model(spec, seed);
  return make_store_policy(std::make_shared<policy_store>(model, 2), steps);
}

struct runner_pair_case {
  std::string id;
  bool store_policy;
};

} // namespace

TEST_CASE("a runner started from another runner's state continues its batches exactly") {
  runner_fixture fx;
  caf::scoped_actor self{*fx.sys};
  std::vector<runner_pair_case> cases;
  for (auto& id : envs::registered_ids())
    cases.push_back({id, false});
  cases.push_back({"CartPole-v1", true});
  cases.push_back({"Pendulum-v1", true});
  for (auto& c : cases) {
    const uint64_t seed = fresh_seed();
    CAPTURE(c.id);
    CAPTURE(c.store_policy);
    CAPTURE(seed);
    // MuJoCo's tasks step a thousand times slower: two environments each.
    const size_t n = envs::mujoco::is_task(c.id) ? 2 : 5;
    // The state is taken before the time limit and episodes end (and the
    // environments reset from their restored generators) after it.
    const int limit = envs::find_spec(c.id).value()->max_episode_steps;
    const size_t steps = static_cast<size_t>(limit / 3 + 1);
    auto make_policy = [&](const envs::vector_env& v) {
      return c.store_policy ? fixed_store_policy(v, steps, seed)
                            : make_random_policy(v.spec().action_space);
    };
    std::shared_ptr<envs::vector_env> vec_a = envs::make_vector_env(c.id, n).value();
    vec_a->set_clip_box_actions(true);
    env_runner_options opts_a;
    opts_a.name = "runner-a";
    opts_a.seed = seed;
    opts_a.steps_per_batch = steps;
    auto a = spawn_env_runner(*fx.sys, opts_a, vec_a, make_policy(*vec_a),
                              caf::actor_cast<caf::actor>(self));
    auto first = collect(self, a, 2);
    auto state = ask<env_runner_state>(self, a, state_atom::value);
    auto rest = collect(self, a, 2);
    auto status_a = ask<env_runner_status>(self, a, status_atom::value);
    self->send_exit(a, caf::exit_reason::user_shutdown);

    CHECK(state.runner == "runner-a");
    CHECK(state.env_id == c.id);
    CHECK(state.status.batches == 2);
    CHECK(state.status.env_steps == 2 * steps * n);
    CHECK(state.episode_return.size() == n);
    CHECK(state.env.num_envs == n);
    CHECK(state.gen != base::rng(seed ^ policy_salt).state()); // the policy drew
    // The state crosses processes unchanged (CAF's binary serialization).
    {
      std::vector<char> buf;
      caf::binary_serializer sink{*fx.sys, buf};
      REQUIRE_FALSE(sink(state));
      env_runner_state copy;
      caf::binary_deserializer source{*fx.sys, buf};
      REQUIRE_FALSE(source(copy));
      CHECK(copy.runner == state.runner);
      CHECK(envs::same_state(copy.env, state.env));
      CHECK(copy.gen == state.gen);
      CHECK(same_bits(copy.episode_return, state.episode_return));
      CHECK(copy.episode_length == state.episode_length);
      CHECK(copy.status.batches == state.status.batches);
      CHECK(copy.status.episodes == state.status.episodes);
    }

    // B: a fresh vector env, another seed, started from A's state.
    std::shared_ptr<envs::vector_env> vec_b = envs::make_vector_env(c.id, n).value();
    vec_b->set_clip_box_actions(true);
    env_runner_options opts_b;
    opts_b.name = "runner-b";
    opts_b.seed = seed + 1000;
    opts_b.steps_per_batch = steps;
    opts_b.start_state = state;
    auto b = spawn_env_runner(*fx.sys, opts_b, vec_b, make_policy(*vec_b),
                              caf::actor_cast<caf::actor>(self));
    auto continued = collect(self, b, 2);
    auto status_b = ask<env_runner_status>(self, b, status_atom::value);
    self->send_exit(b, caf::exit_reason::user_shutdown);

    REQUIRE(rest.size() == 2);
    REQUIRE(continued.size() == 2);
    size_t episodes = 0, resets = 0;
    for (size_t k = 0; k < 2; ++k) {
      CAPTURE(k);
      CHECK(continued[k].runner == "runner-b");
      CHECK(rest[k].sequence == 2 + k);
      check_same_batch(rest[k], continued[k]);
      episodes += rest[k].episode_returns.size();
      for (auto r : rest[k].autoreset)
        resets += r;
    }
    // Every environment still in its first episode when the state was taken
    // reaches the time limit in the continued batches. An episode may also
    // terminate early (Acrobot, or a MuJoCo body that falls), and then its
    // next one can outlast the window: when every environment did so before
    // the state was taken, no reset need fall in the continued batches and
    // the case checks the mid-episode continuation alone.
    size_t must_end = 0;
    for (auto len : state.episode_length)
      must_end += len + 2 * steps >= static_cast<uint64_t>(limit) ? 1 : 0;
    CHECK(must_end + state.status.episodes >= n);
    CHECK(episodes >= must_end);
    CHECK(resets >= must_end);
    CHECK(status_b.runner == "runner-b");
    CHECK(status_b.batches == status_a.batches);
    CHECK(status_b.env_steps == status_a.env_steps);
    CHECK(status_b.episodes == status_a.episodes);
    CHECK(status_b.non_finite == status_a.non_finite);
    CHECK(status_b.deltas_sent == status_a.deltas_sent);
  }
}

TEST_CASE("a guest runner sends its batches to the learner of its newest hand-off, "
          "ending the request of the one before and refusing its asks, and none is lost "
          "or sent twice") {
  runner_fixture fx;
  caf::scoped_actor feed{*fx.sys}, a{*fx.sys}, b{*fx.sys}, stranger{*fx.sys};
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::shared_ptr<envs::vector_env> vec = envs::make_vector_env("CartPole-v1", 2).value();
  env_runner_options o;
  o.name = "e1.runner0";
  o.seed = seed;
  o.steps_per_batch = 8;
  o.guest = true;
  // Registered through its host's feed: no learner has taken it yet, so an
  // ask is refused.
  auto r = spawn_env_runner(*fx.sys, o, vec, make_random_policy(vec->spec().action_space),
                            caf::actor_cast<caf::actor>(feed));
  auto refused = [&](caf::scoped_actor& who) {
    std::string why;
    who->request(r, test::wait_limit, collect_atom::value, uint64_t{1})
      .receive([&](uint64_t) { why = "(answered)"; },
               [&](caf::error& e) { why = fx.sys->render(e); });
    return why;
  };
  CHECK(refused(stranger).find("env runner 'e1.runner0' now feeds another learner") !=
        std::string::npos);
  // Learner A takes it and asks as learners do (a send, not a request), for
  // more than it will get; it takes two batches, then learner B takes it over.
  a->send(r, consumer_atom::value, uint64_t{1});
  a->send(r, collect_atom::value, uint64_t{1000000});
  std::vector<uint64_t> seq_a, seq_b;
  for (int k = 0; k < 2; ++k)
    a->receive([&](trajectory_batch& x) { seq_a.push_back(x.sequence); },
               test::fail_after("a batch for learner A"));
  b->send(r, consumer_atom::value, uint64_t{2});
  uint64_t b_sent = 0;
  b->request(r, test::wait_limit, collect_atom::value, uint64_t{3})
    .receive([&](uint64_t n) { b_sent = n; },
             [&](caf::error& e) { FAIL("B's collect failed: " << fx.sys->render(e)); });
  CHECK(b_sent == 3);
  for (int k = 0; k < 3; ++k)
    b->receive(
      [&](trajectory_batch& x) {
        CHECK(x.runner == "e1.runner0");
        seq_b.push_back(x.sequence);
      },
      test::fail_after("a batch for learner B"));
  // A gets the batches sent before B took over, then the end of its request.
  std::string ended;
  while (ended.empty())
    a->receive([&](trajectory_batch& x) { seq_a.push_back(x.sequence); },
               [&](caf::error& e) { ended = fx.sys->render(e); },
               test::fail_after("the end of learner A's request"));
  CHECK(ended.find("env runner 'e1.runner0' now feeds another learner") !=
        std::string::npos);
  // A asking again is refused, and does not take the runner back from B; nor
  // does an older hand-off that arrives late (A's again): A is told.
  CHECK(refused(a).find("now feeds another learner") != std::string::npos);
  a->send(r, consumer_atom::value, uint64_t{1});
  a->receive(
    [&](caf::error& e) {
      CHECK(fx.sys->render(e).find("now feeds another learner") != std::string::npos);
    },
    test::fail_after("the refusal of a late hand-off"));
  CHECK(refused(a).find("now feeds another learner") != std::string::npos);
  b->request(r, test::wait_limit, collect_atom::value, uint64_t{1})
    .receive(
      [&](uint64_t n) { CHECK(n == 1); },
      [&](caf::error& e) { FAIL("B's second collect failed: " << fx.sys->render(e)); });
  b->receive([&](trajectory_batch& x) { seq_b.push_back(x.sequence); },
             test::fail_after("B's batch after A asked again"));
  std::vector<uint64_t> all = seq_a;
  all.insert(all.end(), seq_b.begin(), seq_b.end());
  for (size_t i = 0; i < all.size(); ++i)
    CHECK(all[i] == i);
  CHECK(feed->mailbox().empty());
  a->send_exit(r, caf::exit_reason::user_shutdown);
}

TEST_CASE("a runner given a state that does not fit quits with a message naming it") {
  runner_fixture fx;
  caf::scoped_actor self{*fx.sys};
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  // A state from a runner over 4 CartPole environments.
  std::shared_ptr<envs::vector_env> source =
    envs::make_vector_env("CartPole-v1", 4).value();
  env_runner_options opts;
  opts.name = "runner-src";
  opts.seed = seed;
  opts.steps_per_batch = 16;
  auto src = spawn_env_runner(*fx.sys, opts, source,
                              make_random_policy(source->spec().action_space),
                              caf::actor_cast<caf::actor>(self));
  collect(self, src, 1);
  auto good = ask<env_runner_state>(self, src, state_atom::value);
  self->send_exit(src, caf::exit_reason::user_shutdown);

  struct bad_case {
    std::string what, env_id;
    size_t num_envs;
    std::function<void(env_runner_state&)> spoil;
    std::vector<std::string> words;
  };
  std::vector<bad_case> cases = {
    {"another env id",
     "Acrobot-v1",
     4,
     [](auto&) {},
     {"env_id", "CartPole-v1", "Acrobot-v1"}},
    {"another size", "CartPole-v1", 5, [](auto&) {}, {"num_envs", "5", "4"}},
    {"zero policy generator",
     "CartPole-v1",
     4,
     [](auto& s) {
       s.gen = {0, 0, 0, 0};
     },
     {"gen", "all zero"}},
    {"NaN episode return",
     "CartPole-v1",
     4,
     [](auto& s) { s.episode_return[2] = NAN; },
     {"environment 2", "episode_return", "nan"}},
    {"short episode lengths",
     "CartPole-v1",
     4,
     [](auto& s) { s.episode_length.pop_back(); },
     {"episode_length", "3"}},
    {"zero environment generator",
     "CartPole-v1",
     4,
     [](auto& s) { std::fill(&s.env.rng[4], &s.env.rng[8], 0); },
     {"environment 1", "rng", "all zero"}},
    {"counter past the time limit",
     "CartPole-v1",
     4,
     [](auto& s) { s.env.elapsed_steps[3] = 501; },
     {"environment 3", "elapsed_steps", "501"}},
  };
  for (auto& c : cases) {
    CAPTURE(c.what);
    auto bad = good;
    c.spoil(bad);
    std::shared_ptr<envs::vector_env> vec =
      envs::make_vector_env(c.env_id, c.num_envs).value();
    vec->reset(seed + 7);
    const auto before = vec->save_state();
    env_runner_options o;
    o.name = "runner-bad";
    o.steps_per_batch = 16;
    o.start_state = bad;
    auto runner =
      spawn_env_runner(*fx.sys, o, vec, make_random_policy(vec->spec().action_space),
                       caf::actor_cast<caf::actor>(self));
    self->monitor(runner);
    std::string message;
    self->receive(
      [&](caf::down_msg& down) {
        CHECK(down.source == runner.address());
        message = error_message(*fx.sys, down.reason);
      },
      test::fail_after("the down message of the runner given a bad start state"));
    CAPTURE(message);
    CHECK(message.find("runner-bad") != std::string::npos);
    CHECK(message.find("runner-src") != std::string::npos);
    for (auto& w : c.words)
      CHECK(message.find(w) != std::string::npos);
    CHECK(envs::same_state(vec->save_state(), before)); // nothing half restored
  }
}

TEST_CASE("a runner with its own observation statistics normalizes each batch with the "
          "moments of its earlier batches, not the view's") {
  runner_fixture fx;
  caf::scoped_actor self{*fx.sys};
  uint64_t seed = fresh_seed();
  CAPTURE(seed);
  const std::string id = "MountainCar-v0";
  const size_t n = 2 + seed % 5, steps = 20 + seed % 30, batches = 3;
  std::shared_ptr<envs::vector_env> vec = envs::make_vector_env(id, n).value();
  const size_t od = vec->obs_dim();
  stats_keeper_options ko;
  ko.log = fx.logger();
  auto keeper = spawn_stats_keeper(*fx.sys, ko);
  // The view's snapshot is far from the data: a batch normalized with it
  // would be off by orders of magnitude.
  auto view = std::make_shared<learners::stats_view>(od, "obs");
  std::vector<double> mean = {100.0, -50.0}, var = {1e4, 1e3};
  REQUIRE(view->publish(7, 1000, mean.data(), var.data(), od).ok());
  env_runner_options opts;
  opts.name = "runner-local";
  opts.seed = seed;
  opts.steps_per_batch = steps;
  opts.obs_clip = 0; // no clip: every value is compared
  opts.local_obs_stats = true;
  opts.log = fx.logger();
  auto runner =
    spawn_env_runner(*fx.sys, opts, vec, make_random_policy(vec->spec().action_space),
                     caf::actor_cast<caf::actor>(self), keeper, view);
  auto got = collect(self, runner, batches);
  REQUIRE(got.size() == batches);

  // Replay with scalar environments; the reference moments of the batches
  // before each one in long double.
  std::vector<std::unique_ptr<envs::env>> scalar;
  std::vector<std::vector<float>> obs(n);
  std::vector<bool> ended(n, false);
  for (size_t i = 0; i < n; ++i) {
    scalar.push_back(envs::make_env(id).value());
    obs[i] = scalar[i]->reset(seed + i);
  }
  std::vector<float> earlier; // raw observations of the batches before
  for (size_t k = 0; k < batches; ++k) {
    CAPTURE(k);
    const auto& b = got[k];
    CHECK(b.stats_version == 7); // the batch still names the global version
    CHECK(b.normalized);
    std::vector<double> m(od, 0.0), v(od, 1.0);
    if (!earlier.empty()) {
      const size_t rows = earlier.size() / od;
      for (size_t j = 0; j < od; ++j) {
        long double s = 0, q = 0;
        for (size_t r = 0; r < rows; ++r)
          s += earlier[r * od + j];
        const long double mu = s / rows;
        for (size_t r = 0; r < rows; ++r)
          q += (earlier[r * od + j] - mu) * (earlier[r * od + j] - mu);
        m[j] = static_cast<double>(mu);
        v[j] = static_cast<double>(q / rows);
      }
    }
    std::vector<float> this_batch;
    for (size_t t = 0; t < steps; ++t)
      for (size_t i = 0; i < n; ++i) {
        for (size_t j = 0; j < od; ++j) {
          this_batch.push_back(obs[i][j]);
          const double z = (obs[i][j] - m[j]) / std::sqrt(v[j] + opts.obs_epsilon);
          CHECK(b.observations[(t * n + i) * od + j] ==
                doctest::Approx(z).epsilon(1e-5).scale(1.0));
        }
        if (ended[i]) {
          scalar[i]->reset(obs[i].data());
          ended[i] = false;
        } else {
          auto r = scalar[i]->step(&b.actions[(t * n + i) * b.action_dim], obs[i].data());
          ended[i] = r->terminated || r->truncated;
        }
      }
    // This batch's raw observations join the runner's moments afterwards.
    earlier.insert(earlier.end(), this_batch.begin(), this_batch.end());
  }
  self->send_exit(runner, caf::exit_reason::user_shutdown);
  self->send_exit(keeper, caf::exit_reason::user_shutdown);
}

// -- reward normalization ---------------------------------------------------------

namespace {

// A vector env with random rewards (mean `offset`, spread `scale`) and random
// episode ends: terminated or truncated, each with its own probability, then
// the next step an autoreset. It logs every reward it hands out, in order, so
// that a test knows the raw rewards the runner saw.
class random_reward_env final : public envs::vector_env {
public:
  random_reward_env(size_t n, uint64_t seed, double offset, double scale)
    : vector_env(*envs::find_spec("MountainCar-v0").value(), n, 1), gen_(seed),
      offset_(offset), scale_(scale), done_(n, 0) {}

  bool can_save_state() const noexcept override { return false; }
  std::vector<double> state(size_t) const override { return {0.0, 0.0}; }
  int elapsed_steps(size_t) const override { return 0; }
  std::array<uint64_t, 4> rng_state(size_t) const override { return {1, 2, 3, 4}; }

  std::vector<float> reward_log; ///< [steps x N] every reward handed out
  std::vector<float> obs_log;    ///< every observation after a reset or step
  /// Environment `nan_env`'s first observation after step `nan_step` (counted
  /// from 0 over all steps) is NaN; SIZE_MAX: never.
  size_t nan_step = SIZE_MAX, nan_env = 0;

protected:
  status restore_env(size_t, const std::array<uint64_t, 4>&, const double*,
                     int) override {
    return {};
  }
  void reset_range(size_t begin, size_t end, uint64_t) override {
    for (size_t i = begin; i < end; ++i) {
      observations_[2 * i] = -0.5f;
      observations_[2 * i + 1] = 0.0f;
      done_[i] = 0;
      obs_log.insert(obs_log.end(), &observations_[2 * i], &observations_[2 * i] + 2);
    }
  }
  status step_range(size_t begin, size_t end, const float*) override {
    std::normal_distribution<double> normal(offset_, scale_);
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    for (size_t i = begin; i < end; ++i) {
      observations_[2 * i] = static_cast<float>(unit(gen_) - 0.5);
      if (steps_ == nan_step && i == nan_env)
        observations_[2 * i] = NAN;
      if (done_[i]) {
        rewards_[i] = 0.0f;
        terminated_[i] = truncated_[i] = 0;
        autoreset_[i] = 1;
        done_[i] = 0;
      } else {
        rewards_[i] = static_cast<float>(normal(gen_));
        const double u = unit(gen_);
        terminated_[i] = u < 0.07;
        truncated_[i] = u >= 0.07 && u < 0.12;
        autoreset_[i] = 0;
        done_[i] = terminated_[i] || truncated_[i];
      }
      reward_log.push_back(rewards_[i]);
      obs_log.insert(obs_log.end(), &observations_[2 * i], &observations_[2 * i] + 2);
    }
    ++steps_;
    return {};
  }

private:
  size_t steps_ = 0;
  std::mt19937_64 gen_;
  double offset_, scale_;
  std::vector<uint8_t> done_;
};

} // namespace

TEST_CASE(
  "reward normalization: the keeper's return stream holds the moments of every "
  "environment's discounted return as Gymnasium's NormalizeReward accumulates it, "
  "rewards are divided by the view's variance and clipped, and episode returns stay "
  "raw") {
  runner_fixture fx;
  caf::scoped_actor self{*fx.sys};
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const size_t n = 3, steps = 37, batches = 4;
  const double gamma = std::uniform_real_distribution<double>(0.9, 0.999)(gen);
  const double offset = std::uniform_real_distribution<double>(-1.0, 1.0)(gen);
  const double scale = std::uniform_real_distribution<double>(0.5, 3.0)(gen);
  // A known return variance, small enough that some rewards hit the clip
  // (|r| beyond 0.45 to 0.9, where a normal of scale 0.5 to 3 puts 7% to 88%
  // of its draws; with 0.02 to 0.08 one seed in some hundreds drew none).
  const double var = std::uniform_real_distribution<double>(0.002, 0.008)(gen);
  const double clip = 10.0, eps = 1e-8;
  stats_keeper_options ko;
  ko.log = fx.logger();
  auto keeper = spawn_stats_keeper(*fx.sys, ko);

  // Two runners feed the one keeper: the global statistic merges all returns.
  std::vector<std::shared_ptr<random_reward_env>> envs_of;
  std::vector<caf::actor> runners;
  for (size_t r = 0; r < 2; ++r) {
    envs_of.push_back(std::make_shared<random_reward_env>(n, gen(), offset, scale));
    auto view = std::make_shared<learners::stats_view>(1, "ret");
    const double mean0 = 0.0;
    REQUIRE(view->publish(7, 1000, &mean0, &var, 1).ok());
    env_runner_options opts;
    opts.name = fmt::format("runner-r{}", r);
    opts.seed = gen();
    opts.steps_per_batch = steps;
    opts.reward_norm = true;
    opts.reward_gamma = gamma;
    opts.reward_epsilon = eps;
    opts.reward_clip = clip;
    opts.log = fx.logger();
    runners.push_back(
      spawn_env_runner(*fx.sys, opts, envs_of.back(),
                       make_random_policy(envs_of.back()->spec().action_space),
                       caf::actor_cast<caf::actor>(self), keeper, nullptr, view));
  }

  // The reference: a plain float64 loop of Gymnasium's NormalizeReward over the
  // rewards each environment handed out (its accumulator resets at
  // termination only, and skips the autoreset steps, which are no transitions).
  std::vector<long double> all_returns;
  size_t clipped = 0, inside = 0;
  for (size_t r = 0; r < 2; ++r) {
    CAPTURE(r);
    auto got = collect(self, runners[r], batches);
    const auto& log = envs_of[r]->reward_log;
    REQUIRE(log.size() == batches * steps * n);
    std::vector<double> acc(n, 0.0), raw_episode(n, 0.0);
    size_t at = 0;
    for (auto& b : got) {
      CAPTURE(b.sequence);
      CHECK(b.reward_stats_version == 7);
      std::vector<double> ended;
      for (size_t t = 0; t < steps; ++t)
        for (size_t i = 0; i < n; ++i, ++at) {
          const size_t k = t * n + i;
          const double raw = log[at];
          if (b.autoreset[k]) {
            CHECK(b.rewards[k] == 0.0f);
            continue;
          }
          raw_episode[i] += static_cast<float>(raw);
          if (b.terminated[k] || b.truncated[k]) {
            ended.push_back(raw_episode[i]);
            raw_episode[i] = 0;
          }
          if (b.terminated[k])
            acc[i] = 0.0;
          acc[i] = acc[i] * gamma + raw;
          all_returns.push_back(acc[i]);
          const double z = raw / std::sqrt(var + eps);
          if (std::fabs(z) > clip)
            ++clipped;
          else
            ++inside;
          CHECK(b.rewards[k] ==
                doctest::Approx(std::fmax(-clip, std::fmin(clip, z))).epsilon(1e-6));
        }
      REQUIRE(b.episode_returns.size() == ended.size());
      for (size_t e = 0; e < ended.size(); ++e)
        CHECK(b.episode_returns[e] == doctest::Approx(ended[e]).epsilon(1e-9));
    }
    // The accumulators are the runner's state (they go into checkpoints).
    auto state = ask<env_runner_state>(self, runners[r], state_atom::value);
    REQUIRE(state.discounted_return.size() == n);
    for (size_t i = 0; i < n; ++i)
      CHECK(state.discounted_return[i] == doctest::Approx(acc[i]).epsilon(1e-12));
  }
  CHECK(clipped > 0);
  CHECK(inside > 0);

  ask<sync_atom>(self, keeper, sync_atom::value);
  auto status = ask<stream_status>(self, keeper, status_atom::value, std::string("ret"));
  CHECK(status.count == all_returns.size());
  CHECK(status.rejected == 0);
  auto snap =
    ask<learners::stats_snapshot>(self, keeper, snapshot_atom::value, std::string("ret"));
  REQUIRE(snap.mean.size() == 1);
  long double s = 0, q = 0;
  for (auto x : all_returns)
    s += x;
  const long double m = s / all_returns.size();
  for (auto x : all_returns)
    q += (x - m) * (x - m);
  CHECK(snap.count == all_returns.size());
  CHECK(snap.mean[0] == doctest::Approx(static_cast<double>(m)).epsilon(1e-12));
  CHECK(snap.var[0] ==
        doctest::Approx(static_cast<double>(q / all_returns.size())).epsilon(1e-10));
  for (auto& r : runners)
    self->send_exit(r, caf::exit_reason::user_shutdown);
  self->send_exit(keeper, caf::exit_reason::user_shutdown);
}

TEST_CASE("reward normalization keeps a batch with a non-finite value from the return "
          "stream, and its accumulators go on through it") {
  runner_fixture fx;
  caf::scoped_actor self{*fx.sys};
  stats_keeper_options ko;
  ko.log = fx.logger();
  auto keeper = spawn_stats_keeper(*fx.sys, ko);
  auto vec = std::make_shared<poisoned_env>(3); // rewards -1; env 1's obs NaN at step 3
  auto view = std::make_shared<learners::stats_view>(1, "ret");
  const double mean0 = 0.0, var = 4.0;
  REQUIRE(view->publish(3, 100, &mean0, &var, 1).ok());
  env_runner_options opts;
  opts.name = "runner-rp";
  opts.steps_per_batch = 2;
  opts.reward_norm = true;
  opts.reward_gamma = 0.5;
  opts.log = fx.logger();
  auto runner =
    spawn_env_runner(*fx.sys, opts, vec, make_random_policy(vec->spec().action_space),
                     caf::actor_cast<caf::actor>(self), keeper, nullptr, view);
  auto batches = collect(self, runner, 3);
  for (auto& b : batches)
    for (float r : b.rewards)
      CHECK(r == doctest::Approx(-1.0 / std::sqrt(4.0 + 1e-8)).epsilon(1e-6));
  ask<sync_atom>(self, keeper, sync_atom::value);
  // Batches 0 and 2 are clean (6 returns each); batch 1 is kept out.
  auto status = ask<stream_status>(self, keeper, status_atom::value, std::string("ret"));
  CHECK(status.count == 2 * 2 * 3);
  // The accumulator went on through batch 1: -1 - 0.5 - 0.25 - ... over 6 steps.
  auto state = ask<env_runner_state>(self, runner, state_atom::value);
  REQUIRE(state.discounted_return.size() == 3);
  double expected = 0;
  for (int t = 0; t < 6; ++t)
    expected = expected * 0.5 - 1.0;
  for (double d : state.discounted_return)
    CHECK(d == doctest::Approx(expected).epsilon(1e-12));
  self->send_exit(runner, caf::exit_reason::user_shutdown);
  self->send_exit(keeper, caf::exit_reason::user_shutdown);
}

TEST_CASE(
  "a runner with its own return statistics divides each batch's rewards by the "
  "variance of its earlier batches' returns, not the view's, and the keeper still "
  "gets every return") {
  runner_fixture fx;
  caf::scoped_actor self{*fx.sys};
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const size_t n = 2 + gen() % 3, steps = 20 + gen() % 30, batches = 4;
  const double gamma = std::uniform_real_distribution<double>(0.9, 0.999)(gen);
  const double offset = std::uniform_real_distribution<double>(-1.0, 1.0)(gen);
  const double scale = std::uniform_real_distribution<double>(0.5, 3.0)(gen);
  const double clip = 5.0, eps = 1e-8;
  stats_keeper_options ko;
  ko.log = fx.logger();
  auto keeper = spawn_stats_keeper(*fx.sys, ko);
  auto vec = std::make_shared<random_reward_env>(n, gen(), offset, scale);
  // The view's variance is far from the data's: rewards divided by it would
  // be off by orders of magnitude.
  auto view = std::make_shared<learners::stats_view>(1, "ret");
  const double mean0 = 0.0, far = 1e6;
  REQUIRE(view->publish(9, 1000, &mean0, &far, 1).ok());
  env_runner_options opts;
  opts.name = "runner-rl";
  opts.seed = gen();
  opts.steps_per_batch = steps;
  opts.reward_norm = true;
  opts.local_return_stats = true;
  opts.reward_gamma = gamma;
  opts.reward_epsilon = eps;
  opts.reward_clip = clip;
  opts.log = fx.logger();
  auto runner =
    spawn_env_runner(*fx.sys, opts, vec, make_random_policy(vec->spec().action_space),
                     caf::actor_cast<caf::actor>(self), keeper, nullptr, view);
  auto got = collect(self, runner, batches);
  REQUIRE(got.size() == batches);
  const auto& log = vec->reward_log;
  REQUIRE(log.size() == batches * steps * n);

  // The reference in long double: Gymnasium's accumulator over the raw
  // rewards, and the variance of every return of the batches before.
  std::vector<long double> earlier, all;
  std::vector<double> acc(n, 0.0);
  size_t at = 0, compared = 0;
  for (auto& b : got) {
    CAPTURE(b.sequence);
    CHECK(b.reward_stats_version == 9); // the batch still names the global version
    long double var = 1.0;
    if (!earlier.empty()) {
      long double s = 0, q = 0;
      for (auto x : earlier)
        s += x;
      const long double m = s / earlier.size();
      for (auto x : earlier)
        q += (x - m) * (x - m);
      var = q / earlier.size();
    }
    std::vector<long double> this_batch;
    for (size_t t = 0; t < steps; ++t)
      for (size_t i = 0; i < n; ++i, ++at) {
        const size_t k = t * n + i;
        if (b.autoreset[k])
          continue;
        const double raw = log[at];
        if (b.terminated[k])
          acc[i] = 0.0;
        acc[i] = acc[i] * gamma + raw;
        this_batch.push_back(acc[i]);
        const double z = raw / std::sqrt(static_cast<double>(var) + eps);
        CHECK(b.rewards[k] ==
              doctest::Approx(std::fmax(-clip, std::fmin(clip, z))).epsilon(1e-6));
        ++compared;
      }
    earlier.insert(earlier.end(), this_batch.begin(), this_batch.end());
    all.insert(all.end(), this_batch.begin(), this_batch.end());
  }
  CHECK(compared > 0);
  ask<sync_atom>(self, keeper, sync_atom::value);
  auto status = ask<stream_status>(self, keeper, status_atom::value, std::string("ret"));
  CHECK(status.count == all.size());
  self->send_exit(runner, caf::exit_reason::user_shutdown);
  self->send_exit(keeper, caf::exit_reason::user_shutdown);
}

namespace {

// The moments of a start snapshot (count, mean, population variance) pooled
// with more samples, in long double by sums of squares (not the runner's
// parallel update): the mean and population variance of both together.
std::pair<long double, long double> pooled(uint64_t count, double mean, double var,
                                           const std::vector<long double>& more) {
  long double n = count, s = count * static_cast<long double>(mean);
  long double q =
    count * (static_cast<long double>(var) + static_cast<long double>(mean) * mean);
  for (long double x : more) {
    n += 1;
    s += x;
    q += x * x;
  }
  const long double m = s / n;
  return {m, q / n - m * m};
}

} // namespace

TEST_CASE("with norm_every_step each step is normalized with the batch's start "
          "statistics merged with its own steps up to it, observations and rewards, "
          "until a non-finite value, and the keeper gets the same moments") {
  runner_fixture fx;
  caf::scoped_actor self{*fx.sys};
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const size_t n = 2 + gen() % 3, steps = 15 + gen() % 20, batches = 3;
  const double gamma = std::uniform_real_distribution<double>(0.9, 0.999)(gen);
  const double offset = std::uniform_real_distribution<double>(-1.0, 1.0)(gen);
  const double scale = std::uniform_real_distribution<double>(0.5, 3.0)(gen);
  const double eps = 1e-8;
  stats_keeper_options ko;
  ko.log = fx.logger();
  auto keeper = spawn_stats_keeper(*fx.sys, ko);
  auto vec = std::make_shared<random_reward_env>(n, gen(), offset, scale);
  // The last batch meets a NaN observation partway.
  const size_t nan_t = 2 + gen() % (steps - 4);
  vec->nan_step = (batches - 1) * steps + nan_t - 1; // seen as row nan_t of that batch
  vec->nan_env = gen() % n;
  // Start statistics of a modest count, so that each step's data moves them.
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  const uint64_t obs_count = 20 + gen() % 50, ret_count = 10 + gen() % 30;
  std::vector<double> obs_mean = {u(gen), u(gen)},
                      obs_var = {0.5 + u(gen) * 0.4, 2.0 + u(gen)};
  const double ret_mean = u(gen), ret_var = 3.0 + u(gen);
  auto view = std::make_shared<learners::stats_view>(2, "obs");
  REQUIRE(view->publish(5, obs_count, obs_mean.data(), obs_var.data(), 2).ok());
  auto return_view = std::make_shared<learners::stats_view>(1, "ret");
  REQUIRE(return_view->publish(6, ret_count, &ret_mean, &ret_var, 1).ok());
  env_runner_options opts;
  opts.name = "runner-fold";
  opts.seed = gen();
  opts.steps_per_batch = steps;
  opts.obs_clip = 0; // no clip: every value is compared
  opts.reward_norm = true;
  opts.reward_gamma = gamma;
  opts.reward_epsilon = eps;
  opts.reward_clip = 0;
  opts.norm_every_step = true;
  opts.log = fx.logger();
  auto runner =
    spawn_env_runner(*fx.sys, opts, vec, make_random_policy(vec->spec().action_space),
                     caf::actor_cast<caf::actor>(self), keeper, view, return_view);
  auto got = collect(self, runner, batches);
  REQUIRE(got.size() == batches);

  const auto& olog = vec->obs_log;
  const auto& rlog = vec->reward_log;
  REQUIRE(rlog.size() == batches * steps * n);
  // Row r of the observations the runner saw: the last reset's n rows, then one per step.
  const size_t first = olog.size() / 2 - batches * steps * n - n;
  auto raw = [&](size_t k, size_t t, size_t i, size_t j) {
    return olog[2 * (first + (k * steps + t) * n + i) + j];
  };
  std::vector<double> acc(n, 0.0);
  std::vector<long double> all_obs[2], all_returns;
  for (size_t k = 0; k < batches; ++k) {
    CAPTURE(k);
    const auto& b = got[k];
    CHECK(b.stats_version == 5); // the start snapshot's version
    CHECK(b.reward_stats_version == 6);
    const bool poisoned = k == batches - 1;
    std::vector<long double> seen_obs[2], seen_returns;
    std::pair<long double, long double> obs_stats[2], ret_stats{ret_mean, ret_var};
    for (size_t t = 0; t <= steps; ++t) {
      CAPTURE(t);
      const bool clean = !poisoned || t < nan_t;
      // Observations: start statistics with this batch's rows 0..t (the final
      // row, t = steps, with rows 0..steps-1); frozen at the NaN.
      if (clean && t < steps)
        for (size_t j = 0; j < 2; ++j) {
          for (size_t i = 0; i < n; ++i)
            seen_obs[j].push_back(raw(k, t, i, j));
          obs_stats[j] = pooled(obs_count, obs_mean[j], obs_var[j], seen_obs[j]);
        }
      for (size_t i = 0; i < n; ++i)
        for (size_t j = 0; j < 2; ++j) {
          const float x = raw(k, t, i, j);
          if (!std::isfinite(x))
            continue;
          const double z = static_cast<double>((x - obs_stats[j].first) /
                                               std::sqrt(obs_stats[j].second + eps));
          CHECK(b.observations[(t * n + i) * 2 + j] ==
                doctest::Approx(z).epsilon(1e-5).scale(1.0));
        }
      if (t == steps)
        break;
      // Rewards: the start's returns with this batch's up to this one.
      for (size_t i = 0; i < n; ++i) {
        const size_t at = k * steps * n + t * n + i, kk = t * n + i;
        if (b.autoreset[kk])
          continue;
        if (b.terminated[kk])
          acc[i] = 0.0;
        acc[i] = acc[i] * gamma + rlog[at];
        all_returns.push_back(acc[i]);
        if (clean) {
          seen_returns.push_back(acc[i]);
          ret_stats = pooled(ret_count, ret_mean, ret_var, seen_returns);
        }
        const double z =
          rlog[at] / std::sqrt(static_cast<double>(ret_stats.second) + eps);
        CHECK(b.rewards[kk] == doctest::Approx(z).epsilon(1e-6));
      }
    }
    if (!poisoned)
      for (size_t t = 0; t < steps; ++t)
        for (size_t i = 0; i < n; ++i)
          for (size_t j = 0; j < 2; ++j)
            all_obs[j].push_back(raw(k, t, i, j));
  }
  // The keeper got the clean batches' moments, as without norm_every_step.
  ask<sync_atom>(self, keeper, sync_atom::value);
  auto snap =
    ask<learners::stats_snapshot>(self, keeper, snapshot_atom::value, std::string("obs"));
  CHECK(snap.count == (batches - 1) * steps * n);
  REQUIRE(snap.mean.size() == 2);
  for (size_t j = 0; j < 2; ++j) {
    auto ref = pooled(0, 0.0, 0.0, all_obs[j]);
    CHECK(snap.mean[j] == doctest::Approx(static_cast<double>(ref.first)).epsilon(1e-9));
    CHECK(snap.var[j] == doctest::Approx(static_cast<double>(ref.second)).epsilon(1e-9));
  }
  auto st = ask<env_runner_status>(self, runner, status_atom::value);
  CHECK(st.non_finite == 1);
  self->send_exit(runner, caf::exit_reason::user_shutdown);
  self->send_exit(keeper, caf::exit_reason::user_shutdown);
}

TEST_CASE("norm diagnostics: before each batch the runner measures the policy across its "
          "normalizers' change and against the global ones, on the previous batch's raw "
          "observations") {
  runner_fixture fx;
  caf::scoped_actor self{*fx.sys};
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const size_t n = 2 + gen() % 3, steps = 10 + gen() % 20, batches = 4, od = 2;
  const double gamma = std::uniform_real_distribution<double>(0.9, 0.999)(gen);
  const double eps = 1e-8;
  stats_keeper_options ko;
  ko.log = fx.logger();
  auto keeper = spawn_stats_keeper(*fx.sys, ko);
  auto vec = std::make_shared<random_reward_env>(n, gen(), 0.3, 2.0);
  // Global views far from the data (nothing publishes to them during the test).
  auto view = std::make_shared<learners::stats_view>(od, "obs");
  std::vector<double> gmean = {3.0, -2.0}, gvar = {40.0, 0.5};
  REQUIRE(view->publish(7, 1000, gmean.data(), gvar.data(), od).ok());
  auto return_view = std::make_shared<learners::stats_view>(1, "ret");
  const double rmean = 0.0, rvar = 250.0;
  REQUIRE(return_view->publish(9, 1000, &rmean, &rvar, 1).ok());
  // A divergence that keeps what it was given and answers 0.5, 0.625, ...
  struct call {
    std::vector<float> a, b;
  };
  auto calls = std::make_shared<std::vector<call>>();
  env_runner_options opts;
  opts.name = "runner-diag";
  opts.seed = gen();
  opts.steps_per_batch = steps;
  opts.obs_clip = 0;
  opts.local_obs_stats = true;
  opts.reward_norm = true;
  opts.local_return_stats = true;
  opts.reward_gamma = gamma;
  opts.reward_epsilon = eps;
  opts.reward_clip = 0;
  opts.norm_diagnostics = true;
  opts.divergence = [calls, od](const float* a, const float* b,
                                size_t rows) -> result<double> {
    calls->push_back({{a, a + rows * od}, {b, b + rows * od}});
    return 0.5 + 0.125 * static_cast<double>(calls->size() - 1);
  };
  opts.log = fx.logger();
  auto runner =
    spawn_env_runner(*fx.sys, opts, vec, make_random_policy(vec->spec().action_space),
                     caf::actor_cast<caf::actor>(self), keeper, view, return_view);
  auto got = collect(self, runner, batches);
  REQUIRE(got.size() == batches);
  REQUIRE(vec->obs_log.size() == (batches * steps + 1) * n * od);
  REQUIRE(calls->size() == 2 * (batches - 1)); // a shift and a drift from batch 1 on

  // References in long double: the runner's own moments before each batch
  // (mean 0, variance 1 before the first), of observations and returns.
  auto raw_of = [&](size_t k) { // batch k's raw observations
    const float* from = &vec->obs_log[k * steps * n * od];
    return std::vector<float>(from, from + steps * n * od);
  };
  auto obs_moments = [&](size_t k, std::vector<double>& m, std::vector<double>& v) {
    m.assign(od, 0.0);
    v.assign(od, 1.0);
    if (k == 0)
      return;
    const size_t rows = k * steps * n;
    for (size_t j = 0; j < od; ++j) {
      long double s = 0, q = 0;
      for (size_t r = 0; r < rows; ++r)
        s += vec->obs_log[r * od + j];
      const long double mu = s / rows;
      for (size_t r = 0; r < rows; ++r)
        q += (vec->obs_log[r * od + j] - mu) * (vec->obs_log[r * od + j] - mu);
      m[j] = static_cast<double>(mu);
      v[j] = static_cast<double>(q / rows);
    }
  };
  std::vector<long double> returns;
  std::vector<double> return_var(batches + 1, 1.0), acc(n, 0.0);
  size_t at = 0;
  for (size_t k = 0; k < batches; ++k) {
    for (size_t t = 0; t < steps; ++t)
      for (size_t i = 0; i < n; ++i, ++at) {
        const size_t x = t * n + i;
        if (got[k].autoreset[x])
          continue;
        if (got[k].terminated[x])
          acc[i] = 0.0;
        acc[i] = acc[i] * gamma + vec->reward_log[at];
        returns.push_back(acc[i]);
      }
    long double s = 0, q = 0;
    for (auto r : returns)
      s += r;
    const long double mu = s / returns.size();
    for (auto r : returns)
      q += (r - mu) * (r - mu);
    return_var[k + 1] = static_cast<double>(q / returns.size());
  }
  auto expect_view = [&](const std::vector<float>& got_view,
                         const std::vector<float>& raw, const std::vector<double>& m,
                         const std::vector<double>& v) {
    REQUIRE(got_view.size() == raw.size());
    for (size_t r = 0; r < raw.size(); ++r) {
      const double z = (raw[r] - m[r % od]) / std::sqrt(v[r % od] + opts.obs_epsilon);
      CHECK(got_view[r] == doctest::Approx(z).epsilon(1e-5).scale(1.0));
    }
  };
  auto log_std_ratio = [&](double v1, double v0) {
    return 0.5 * std::log((v1 + eps) / (v0 + eps));
  };

  CHECK(std::isnan(got[0].obs_shift_kl)); // nothing before the first batch
  CHECK(std::isnan(got[0].obs_drift_kl));
  CHECK(std::isnan(got[0].return_std_shift));
  CHECK(got[0].return_std_drift == doctest::Approx(log_std_ratio(1.0, rvar)));
  for (size_t k = 1; k < batches; ++k) {
    CAPTURE(k);
    const auto& b = got[k];
    std::vector<double> m_before, v_before, m_now, v_now;
    obs_moments(k - 1, m_before, v_before);
    obs_moments(k, m_now, v_now);
    const auto raw = raw_of(k - 1);
    const auto& shift = (*calls)[2 * (k - 1)];
    expect_view(shift.a, raw, m_before, v_before);
    expect_view(shift.b, raw, m_now, v_now);
    const auto& drift = (*calls)[2 * (k - 1) + 1];
    expect_view(drift.a, raw, m_now, v_now);
    expect_view(drift.b, raw, gmean, gvar);
    CHECK(b.obs_shift_kl == 0.5 + 0.125 * static_cast<double>(2 * (k - 1)));
    CHECK(b.obs_drift_kl == 0.5 + 0.125 * static_cast<double>(2 * (k - 1) + 1));
    CHECK(b.return_std_shift ==
          doctest::Approx(std::abs(log_std_ratio(return_var[k], return_var[k - 1])))
            .epsilon(1e-9));
    CHECK(b.return_std_drift ==
          doctest::Approx(log_std_ratio(return_var[k], rvar)).epsilon(1e-9));
  }
  self->send_exit(runner, caf::exit_reason::user_shutdown);
  self->send_exit(keeper, caf::exit_reason::user_shutdown);
}

TEST_CASE("norm diagnostics with the global normalizers: no drift, and no shift while "
          "the view has not changed") {
  runner_fixture fx;
  caf::scoped_actor self{*fx.sys};
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const size_t n = 2 + gen() % 3, steps = 10 + gen() % 20, od = 2;
  stats_keeper_options ko;
  ko.log = fx.logger();
  auto keeper = spawn_stats_keeper(*fx.sys, ko);
  auto vec = std::make_shared<random_reward_env>(n, gen(), 0.0, 1.0);
  auto view = std::make_shared<learners::stats_view>(od, "obs");
  std::vector<double> m0 = {0.1, 0.0}, v0 = {2.0, 1.0};
  REQUIRE(view->publish(3, 100, m0.data(), v0.data(), od).ok());
  auto return_view = std::make_shared<learners::stats_view>(1, "ret");
  const double rmean = 0.0, rvar = 4.0;
  REQUIRE(return_view->publish(5, 100, &rmean, &rvar, 1).ok());
  auto calls =
    std::make_shared<std::vector<std::pair<std::vector<float>, std::vector<float>>>>();
  env_runner_options opts;
  opts.name = "runner-diag-global";
  opts.seed = gen();
  opts.steps_per_batch = steps;
  opts.obs_clip = 0;
  opts.reward_norm = true;
  opts.norm_diagnostics = true;
  opts.divergence = [calls, od](const float* a, const float* b,
                                size_t rows) -> result<double> {
    calls->push_back({{a, a + rows * od}, {b, b + rows * od}});
    return 0.25;
  };
  opts.log = fx.logger();
  auto runner =
    spawn_env_runner(*fx.sys, opts, vec, make_random_policy(vec->spec().action_space),
                     caf::actor_cast<caf::actor>(self), keeper, view, return_view);
  auto first = collect(self, runner, 2);
  REQUIRE(first.size() == 2);
  CHECK(std::isnan(first[0].obs_shift_kl));
  CHECK(first[0].obs_drift_kl == 0.0); // it acts with the global normalizer
  CHECK(first[1].obs_shift_kl == 0.0); // the same snapshot: nothing to measure
  CHECK(first[1].obs_drift_kl == 0.0);
  CHECK(first[1].return_std_shift == 0.0);
  CHECK(first[1].return_std_drift == 0.0);
  CHECK(calls->empty());
  // A new global snapshot: the next batch measures the shift to it.
  std::vector<double> m1 = {-0.4, 0.0}, v1 = {0.5, 1.0};
  REQUIRE(view->publish(4, 200, m1.data(), v1.data(), od).ok());
  const double rvar1 = 9.0;
  REQUIRE(return_view->publish(6, 200, &rmean, &rvar1, 1).ok());
  auto second = collect(self, runner, 1);
  REQUIRE(second.size() == 1);
  REQUIRE(calls->size() == 1);
  CHECK(second[0].obs_shift_kl == 0.25);
  CHECK(second[0].obs_drift_kl == 0.0);
  CHECK(second[0].return_std_shift ==
        doctest::Approx(
          0.5 * std::log((rvar1 + opts.reward_epsilon) / (rvar + opts.reward_epsilon))));
  CHECK(second[0].return_std_drift == 0.0);
  // On batch 1's raw observations, with the old snapshot and then the new one.
  const float* raw = &vec->obs_log[steps * n * od];
  for (size_t r = 0; r < steps * n * od; ++r) {
    const size_t j = r % od;
    CHECK((*calls)[0].first[r] ==
          doctest::Approx((raw[r] - m0[j]) / std::sqrt(v0[j] + opts.obs_epsilon)));
    CHECK((*calls)[0].second[r] ==
          doctest::Approx((raw[r] - m1[j]) / std::sqrt(v1[j] + opts.obs_epsilon)));
  }
  self->send_exit(runner, caf::exit_reason::user_shutdown);
  self->send_exit(keeper, caf::exit_reason::user_shutdown);
}

TEST_CASE(
  "a slowed runner waits (slowdown - 1) times each step's measured time, in waits "
  "of at least the threshold and once more before each batch goes") {
  runner_fixture fx;
  caf::scoped_actor self{*fx.sys};
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const size_t n = 1 + gen() % 4, steps = 10 + gen() % 40, batches = 3;
  // A clock that moves `tick` ns each time it is read: every step measures
  // one tick. The waits are recorded, not slept.
  struct fake_time {
    uint64_t now = 1'000'000'000, reads = 0;
    std::vector<uint64_t> waits;
  };
  const uint64_t tick = 1000 + gen() % 100000;
  const double slowdown = std::uniform_real_distribution<double>(1.1, 8.0)(gen);
  const uint64_t threshold = (1 + gen() % 5) * tick;
  CAPTURE(tick);
  CAPTURE(slowdown);
  CAPTURE(threshold);
  auto run = [&](double factor, uint64_t wait_at) {
    auto time = std::make_shared<fake_time>();
    auto vec = envs::make_vector_env("CartPole-v1", n).value();
    env_runner_options opts;
    opts.name = "runner-slow";
    opts.seed = gen();
    opts.steps_per_batch = steps;
    opts.slowdown = factor;
    opts.slowdown_wait_ns = wait_at;
    opts.clock_ns = [time, tick] {
      time->reads += 1;
      return time->now += tick;
    };
    opts.wait_ns = [time](uint64_t ns) {
      time->waits.push_back(ns);
      time->now += ns;
    };
    opts.log = fx.logger();
    std::shared_ptr<envs::vector_env> shared(std::move(vec));
    auto runner = spawn_env_runner(*fx.sys, opts, shared,
                                   make_random_policy(shared->spec().action_space),
                                   caf::actor_cast<caf::actor>(self));
    auto got = collect(self, runner, batches);
    CHECK(got.size() == batches);
    self->send_exit(runner, caf::exit_reason::user_shutdown);
    return time;
  };

  // Owed per batch: (slowdown - 1) x tick x steps; the fraction of a
  // nanosecond carries over to the next wait.
  const double owed =
    (slowdown - 1.0) * static_cast<double>(tick) * static_cast<double>(steps);
  SUBCASE("a threshold above a batch's debt: one wait per batch, when it goes") {
    auto time = run(slowdown, UINT64_MAX);
    CHECK(time->reads == 2 * steps * batches); // each step timed, and only the steps
    REQUIRE(time->waits.size() == batches);
    double paid = 0;
    for (size_t k = 0; k < batches; ++k) {
      CAPTURE(k);
      paid += static_cast<double>(time->waits[k]);
      CHECK(paid <= owed * static_cast<double>(k + 1));
      CHECK(paid > owed * static_cast<double>(k + 1) - 1.0);
    }
  }
  SUBCASE("a low threshold: waits of at least it within a batch, the rest when it goes") {
    auto time = run(slowdown, threshold);
    uint64_t paid = 0;
    size_t below = 0;
    for (uint64_t w : time->waits) {
      paid += w;
      below += w < threshold ? 1 : 0;
    }
    CHECK(below <= batches); // only the waits before a batch goes may be short
    CHECK(static_cast<double>(paid) <= owed * batches);
    CHECK(static_cast<double>(paid) > owed * batches - 1.0);
    if (owed > 2.0 * static_cast<double>(threshold))
      CHECK(time->waits.size() > batches); // some waits came within a batch
  }
  SUBCASE("no slowdown: the clock is never read and nothing waits") {
    auto time = run(1.0, threshold);
    CHECK(time->reads == 0);
    CHECK(time->waits.empty());
  }
}

TEST_CASE("with clip_box_actions the environments get Box actions clipped to the bounds "
          "while the batch keeps the unclipped draw") {
  runner_fixture fx;
  caf::scoped_actor self{*fx.sys};
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  // MountainCarContinuous's reward charges the action it is given, unclipped
  // (-0.1 a^2), so the rewards tell which action reached the environment.
  const std::string id = "MountainCarContinuous-v0";
  const size_t n = 4, steps = 30;
  std::shared_ptr<envs::vector_env> vec = envs::make_vector_env(id, n).value();
  vec->set_clip_box_actions(true);
  policy_fn wide = [](const float*, size_t rows, base::rng& gen, float* actions,
                      float* logp) -> result<uint64_t> {
    for (size_t i = 0; i < rows; ++i) {
      actions[i] = static_cast<float>(gen.uniform(-3.0, 3.0));
      logp[i] = 0.0f;
    }
    return uint64_t{1};
  };
  env_runner_options opts;
  opts.name = "runner-clip";
  opts.seed = seed;
  opts.steps_per_batch = steps;
  opts.clip_box_actions = true;
  auto runner =
    spawn_env_runner(*fx.sys, opts, vec, wide, caf::actor_cast<caf::actor>(self));
  auto batches = collect(self, runner, 2);
  // A replay in scalar environments that are handed the clipped actions.
  std::vector<std::unique_ptr<envs::env>> scalar;
  std::vector<std::vector<float>> obs(n);
  std::vector<bool> ended(n, false);
  for (size_t i = 0; i < n; ++i) {
    scalar.push_back(envs::make_env(id).value());
    obs[i] = scalar[i]->reset(seed + i);
  }
  size_t outside = 0;
  for (auto& b : batches)
    for (size_t t = 0; t < steps; ++t)
      for (size_t i = 0; i < n; ++i) {
        const size_t k = t * n + i;
        if (ended[i]) {
          scalar[i]->reset(obs[i].data());
          ended[i] = false;
          continue;
        }
        const float a = b.actions[k];
        outside += std::fabs(a) > 1.0f;
        const float clipped = std::fmax(-1.0f, std::fmin(1.0f, a));
        auto r = scalar[i]->step(&clipped, obs[i].data()).value();
        CAPTURE(k);
        CHECK(b.rewards[k] == doctest::Approx(r.reward).epsilon(1e-6));
        CHECK(b.rewards[k] >= -0.1f - 1e-6f); // never charged for more than |a| = 1
        ended[i] = r.terminated || r.truncated;
      }
  CHECK(outside > 0); // the batch kept draws outside the bounds
  self->send_exit(runner, caf::exit_reason::user_shutdown);
}

// -- reward terms and trouble counters ----------------------------------------

TEST_CASE("the env runner reports each finished episode's reward-term sums, equal to "
          "the terms of a vector env stepped by hand with the batches' actions") {
  runner_fixture fx;
  caf::scoped_actor self{*fx.sys};
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  // Reacher-v4: 50-step episodes, two terms (reward_dist, reward_ctrl).
  const std::string id = "Reacher-v4";
  const size_t n = 3, steps = 40, batches_wanted = 4;
  std::shared_ptr<envs::vector_env> vec = envs::make_vector_env(id, n).value();
  const size_t k = vec->spec().reward_terms.size();
  REQUIRE(k == 2);
  env_runner_options opts;
  opts.seed = seed;
  opts.steps_per_batch = steps;
  opts.log = fx.logger();
  auto runner =
    spawn_env_runner(*fx.sys, opts, vec, make_random_policy(vec->spec().action_space),
                     caf::actor_cast<caf::actor>(self));
  auto batches = collect(self, runner, batches_wanted);
  self->send_exit(runner, caf::exit_reason::user_shutdown);
  REQUIRE(batches.size() == batches_wanted);

  auto replay = envs::make_vector_env(id, n).value();
  replay->reset(seed);
  std::vector<double> sums(n * k, 0.0);
  size_t episodes = 0;
  for (auto& b : batches) {
    CAPTURE(b.sequence);
    std::vector<double> expected;
    for (size_t t = 0; t < b.steps; ++t) {
      REQUIRE(replay->step(&b.actions[t * n * b.action_dim]));
      for (size_t i = 0; i < n; ++i) {
        if (replay->autoreset()[i])
          continue;
        for (size_t j = 0; j < k; ++j)
          sums[i * k + j] += replay->reward_terms()[i * k + j];
        if (replay->terminated()[i] || replay->truncated()[i]) {
          expected.insert(expected.end(), &sums[i * k], &sums[i * k] + k);
          std::fill_n(&sums[i * k], k, 0.0);
        }
      }
    }
    REQUIRE(b.episode_reward_terms.size() == b.episode_returns.size() * k);
    REQUIRE(expected.size() == b.episode_reward_terms.size());
    for (size_t e = 0; e < b.episode_returns.size(); ++e) {
      CAPTURE(e);
      double total = 0;
      for (size_t j = 0; j < k; ++j) {
        const double got = b.episode_reward_terms[e * k + j];
        CHECK(got == doctest::Approx(expected[e * k + j]).epsilon(1e-12));
        total += got;
      }
      // The return adds float32 rewards; the terms are float64.
      CHECK(total == doctest::Approx(b.episode_returns[e]).epsilon(1e-5));
    }
    episodes += b.episode_returns.size();
    CHECK(b.env_counters == std::vector<uint64_t>{0, 0, 0});
  }
  CHECK(episodes >= n * 2);
}

TEST_CASE("a runner over a MuJoCo task reports the instability warnings its "
          "environments met in the batch that met them") {
  runner_fixture fx;
  caf::scoped_actor self{*fx.sys};
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  const std::string id = "HalfCheetah-v4";
  const size_t n = 2, steps = 8;
  std::shared_ptr<envs::vector_env> vec_a = envs::make_vector_env(id, n).value();
  env_runner_options opts;
  opts.name = "runner-a";
  opts.seed = seed;
  opts.steps_per_batch = steps;
  opts.log = fx.logger();
  auto policy = make_random_policy(vec_a->spec().action_space);
  auto a =
    spawn_env_runner(*fx.sys, opts, vec_a, policy, caf::actor_cast<caf::actor>(self));
  auto calm = collect(self, a, 1);
  auto state = ask<env_runner_state>(self, a, state_atom::value);
  self->send_exit(a, caf::exit_reason::user_shutdown);
  REQUIRE(calm.size() == 1);
  CHECK(calm[0].env_counters == std::vector<uint64_t>{0, 0, 0});
  CHECK(calm[0].episode_reward_terms.empty()); // no episode ended yet

  // Environment 1's rootx velocity beyond MuJoCo's 1e10 bound: its first
  // step warns of a bad state and MuJoCo resets it.
  const size_t sd = vec_a->spec().state_dim();
  state.env.state[1 * sd + 9] = 1e11;
  std::shared_ptr<envs::vector_env> vec_b = envs::make_vector_env(id, n).value();
  opts.name = "runner-b";
  opts.start_state = state;
  auto b =
    spawn_env_runner(*fx.sys, opts, vec_b, policy, caf::actor_cast<caf::actor>(self));
  auto met = collect(self, b, 2);
  self->send_exit(b, caf::exit_reason::user_shutdown);
  REQUIRE(met.size() == 2);
  std::vector<uint64_t> total(3, 0);
  vec_b->counters(total.data());
  CHECK(total[0] >= 1);
  REQUIRE(met[0].env_counters.size() == 3);
  CHECK(met[0].env_counters == total); // all in the first batch
  CHECK(met[1].env_counters == std::vector<uint64_t>{0, 0, 0});
  for (auto& batch : met)
    for (float x : batch.observations)
      REQUIRE(std::isfinite(x));
}
