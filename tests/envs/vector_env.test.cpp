// The vector env against N scalar environments: seeding, batch step,
// next-step autoreset, threads, action checks.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "envs/fast_math.hpp"
#include "envs/mujoco/tasks.hpp"
#include "envs/registry.hpp"
#include "tests/seed.hpp"

using namespace troupe::envs;
using troupe::test::fresh_seed;

namespace {

bool close(double a, double b) {
  return std::fabs(a - b) <= 1e-5 + 1e-5 * std::fabs(b);
}

// Steps a vector env and N scalar envs side by side; the scalar envs apply
// the next-step autoreset rule by hand: after an episode ends, the next step
// is a reset with reward 0 and no flags.
void compare_with_scalar(const std::string& id, size_t n, size_t threads, int steps) {
  uint64_t seed = fresh_seed();
  CAPTURE(id);
  CAPTURE(n);
  CAPTURE(threads);
  CAPTURE(seed);
  auto vec = make_vector_env(id, n, threads).value();
  std::vector<std::unique_ptr<env>> scalar;
  std::vector<bool> ended(n, false);
  const size_t od = vec->obs_dim(), ad = vec->action_dim();
  vec->reset(seed);
  for (size_t i = 0; i < n; ++i) {
    scalar.push_back(make_env(id).value());
    auto obs = scalar[i]->reset(seed + i);
    for (size_t j = 0; j < od; ++j)
      REQUIRE(vec->observations()[i * od + j] == obs[j]);
  }
  std::mt19937_64 gen(seed);
  size_t resets_seen = 0;
  for (int t = 0; t < steps; ++t) {
    auto actions = random_actions(vec->spec().action_space, n, gen);
    REQUIRE(vec->step(actions.data()));
    for (size_t i = 0; i < n; ++i) {
      CAPTURE(t);
      CAPTURE(i);
      std::vector<float> obs(od);
      double reward = 0;
      bool term = false, trunc = false;
      bool reset_now = ended[i];
      if (reset_now) {
        scalar[i]->reset(obs.data());
        ++resets_seen;
      } else {
        auto r = scalar[i]->step(actions.data() + i * ad, obs.data()).value();
        reward = r.reward;
        term = r.terminated;
        trunc = r.truncated;
      }
      ended[i] = term || trunc;
      CHECK(vec->autoreset()[i] == reset_now);
      CHECK(vec->terminated()[i] == term);
      CHECK(vec->truncated()[i] == trunc);
      CHECK(close(vec->rewards()[i], reward));
      for (size_t j = 0; j < od; ++j)
        CHECK(close(vec->observations()[i * od + j], obs[j]));
      CHECK(vec->elapsed_steps(i) == scalar[i]->elapsed_steps());
    }
  }
  CHECK(resets_seen > 0);
}

} // namespace

TEST_CASE("a vector env steps like N seeded scalar envs with next-step autoreset") {
  // Long enough for every environment to end an episode (at the time limit
  // when nothing ends it before).
  // MuJoCo's tasks step a thousand times slower: three environments of each
  // still cross the time limit and autoreset.
  for (auto& id : registered_ids())
    compare_with_scalar(id, mujoco::is_task(id) ? 3 : 7, 1,
                        std::max(600, find_spec(id).value()->max_episode_steps + 100));
}

TEST_CASE("the CartPole batch kernel agrees with scalar CartPole over many episodes") {
  compare_with_scalar("CartPole-v1", 300, 1, 200);
}

TEST_CASE("a vector env gives the same results on one thread and on several") {
  for (auto& id : registered_ids()) {
    // Three threads need 3 * 256 + 5 environments: for MuJoCo's, gigabytes
    // of mjData. The split is the same code for every model; MuJoCo's
    // threads are tested in mujoco_tasks.test.cpp.
    if (mujoco::is_task(id))
      continue;
    CAPTURE(id);
    uint64_t seed = fresh_seed();
    CAPTURE(seed);
    const size_t n = 3 * vector_env::min_envs_per_thread + 5;
    auto one = make_vector_env(id, n, 1).value();
    auto many = make_vector_env(id, n, 3).value();
    CHECK(one->threads() == 1);
    CHECK(many->threads() == 3);
    one->reset(seed);
    many->reset(seed);
    std::mt19937_64 gen(seed);
    for (int t = 0; t < 50; ++t) {
      auto actions = random_actions(one->spec().action_space, n, gen);
      REQUIRE(one->step(actions.data()));
      REQUIRE(many->step(actions.data()));
      const size_t od = one->obs_dim();
      CHECK(std::equal(one->observations(), one->observations() + n * od,
                       many->observations()));
      CHECK(std::equal(one->rewards(), one->rewards() + n, many->rewards()));
      CHECK(std::equal(one->terminated(), one->terminated() + n, many->terminated()));
      CHECK(std::equal(one->truncated(), one->truncated() + n, many->truncated()));
    }
  }
}

TEST_CASE("a vector env rejects an action outside the space and steps nothing") {
  for (auto& id : registered_ids()) {
    CAPTURE(id);
    auto vec = make_vector_env(id, 5, 1).value();
    std::vector<float> actions(5 * vec->action_dim(), 0.0f);
    CHECK_FALSE(vec->step(actions.data())); // before reset
    vec->reset(fresh_seed());
    auto before = vec->state(3);
    actions[3 * vec->action_dim()] = NAN;
    auto r = vec->step(actions.data());
    REQUIRE_FALSE(r);
    CHECK(r.err().message.find("environment 3") != std::string::npos);
    CHECK(vec->state(3) == before);
    CHECK(vec->elapsed_steps(3) == 0);
    if (vec->spec().action_space.kind == space_kind::discrete) {
      actions[3] = static_cast<float>(vec->spec().action_space.n);
      CHECK_FALSE(vec->step(actions.data()));
      actions[3] = 0.5f;
      CHECK_FALSE(vec->step(actions.data()));
    }
  }
}

TEST_CASE("a vector env of zero environments or zero threads is an error") {
  CHECK_FALSE(make_vector_env("CartPole-v1", 0, 1));
  CHECK_FALSE(make_vector_env("CartPole-v1", 4, 0));
  CHECK_FALSE(make_vector_env("NoSuchEnv-v9", 4, 1));
}

TEST_CASE("the polynomial sine and cosine are within an ulp of long double references") {
  std::random_device device;
  uint64_t seed = device();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> angle(-fast::max_small_angle,
                                               fast::max_small_angle);
  for (int k = 0; k < 100000; ++k) {
    double x = angle(gen);
    CAPTURE(x);
    long double s = std::sin(static_cast<long double>(x));
    long double c = std::cos(static_cast<long double>(x));
    CHECK(std::fabs(fast::sin_small(x) - s) <= std::ldexp(1.0L, -52) * std::fabs(s));
    CHECK(std::fabs(fast::cos_small(x) - c) <= std::ldexp(1.0L, -52) * std::fabs(c));
  }
}
