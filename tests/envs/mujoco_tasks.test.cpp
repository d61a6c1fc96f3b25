// The MuJoCo tasks' v4 semantics, each against a float64 reference written
// here from Gymnasium's definitions (gymnasium/envs/mujoco/*_v4.py and
// mujoco_env.py): the frame skip against a bare MuJoCo loop, observations,
// rewards, termination, reset noise; bad input and MuJoCo's warnings.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "envs/mujoco/half_cheetah.hpp"
#include "envs/mujoco/inverted_pendulum.hpp"
#include "envs/registry.hpp"
#include "tests/seed.hpp"

using namespace troupe;
using namespace troupe::envs;
using troupe::test::fresh_seed;

namespace {

struct data_deleter {
  void operator()(mjData* d) const noexcept { mj_deleteData(d); }
};

// v4's do_simulation on a bare mjData set to `state` (qpos, qvel,
// qacc_warmstart): ctrl = action, frame_skip mj_step, mj_rnePostConstraint.
// Returns the state after it.
std::vector<double> bare_step(const mjModel& m, const std::vector<double>& state,
                              const std::vector<float>& action, int frame_skip) {
  std::unique_ptr<mjData, data_deleter> d(mj_makeData(&m));
  const int nq = m.nq, nv = m.nv;
  for (int i = 0; i < nq; ++i)
    d->qpos[i] = state[static_cast<size_t>(i)];
  for (int i = 0; i < nv; ++i)
    d->qvel[i] = state[static_cast<size_t>(nq + i)];
  mj_forward(&m, d.get());
  for (int i = 0; i < nv; ++i)
    d->qacc_warmstart[i] = state[static_cast<size_t>(nq + nv + i)];
  for (int i = 0; i < m.nu; ++i)
    d->ctrl[i] = action[static_cast<size_t>(i)];
  for (int k = 0; k < frame_skip; ++k)
    mj_step(&m, d.get());
  mj_rnePostConstraint(&m, d.get());
  std::vector<double> out(d->qpos, d->qpos + nq);
  out.insert(out.end(), d->qvel, d->qvel + nv);
  out.insert(out.end(), d->qacc_warmstart, d->qacc_warmstart + nv);
  return out;
}

template <class Task>
std::vector<double> state_of(const Task& t) {
  std::vector<double> s(static_cast<size_t>(t.model().nq + 2 * t.model().nv));
  t.get_state(s.data());
  return s;
}

std::vector<float> uniform_action(size_t n, float bound, std::mt19937_64& gen) {
  std::uniform_real_distribution<float> u(-bound, bound);
  std::vector<float> a(n);
  for (auto& x : a)
    x = u(gen);
  return a;
}

} // namespace

// -- HalfCheetah-v4 ------------------------------------------------------------

TEST_CASE("HalfCheetah-v4 steps as v4 does: five mj_steps, the run reward minus the "
          "control cost") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  mujoco::half_cheetah t;
  rng r(seed);
  t.reset(r);
  CHECK(t.dt() == 0.05);
  for (int step = 0; step < 300; ++step) {
    CAPTURE(step);
    auto before = state_of(t);
    auto action = uniform_action(6, 1.0f, gen);
    auto want = bare_step(t.model(), before, action, 5);
    auto out = t.step(action.data());
    auto after = state_of(t);
    CHECK(after == want); // the same calls of the same MuJoCo: bit for bit
    // reward = 1.0 * (x_after - x_before) / dt - 0.1 * sum(a^2), in float64
    double sum_sq = 0;
    for (float a : action)
      sum_sq += static_cast<double>(a) * a;
    const double x_velocity = (after[0] - before[0]) / 0.05;
    const double reward = 1.0 * x_velocity - 0.1 * sum_sq;
    CHECK(std::fabs(out.reward - reward) <= 1e-6 * (1 + std::fabs(reward)));
    CHECK_FALSE(out.terminated);
    CHECK(t.x_position == after[0]);
    CHECK(t.x_velocity == x_velocity);
    CHECK(t.reward_run == x_velocity);
    CHECK(std::fabs(t.reward_ctrl + 0.1 * sum_sq) <= 1e-6 * (1 + 0.1 * sum_sq));
    CHECK(t.reward_run + t.reward_ctrl == out.reward);
    // The observation: qpos without rootx, then qvel.
    std::vector<float> obs(17);
    t.observe(obs.data());
    for (int i = 0; i < 8; ++i)
      CHECK(obs[static_cast<size_t>(i)] ==
            static_cast<float>(after[static_cast<size_t>(i + 1)]));
    for (int i = 0; i < 9; ++i)
      CHECK(obs[static_cast<size_t>(8 + i)] ==
            static_cast<float>(after[static_cast<size_t>(9 + i)]));
  }
}

TEST_CASE("HalfCheetah-v4 resets to qpos0 plus U(-0.1, 0.1) and velocities 0.1 N(0, 1)") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  mujoco::half_cheetah t;
  rng r(seed);
  const int resets = 400;
  double vel_sum = 0, vel_sq = 0;
  double pos_min = 1, pos_max = -1;
  for (int k = 0; k < resets; ++k) {
    t.reset(r);
    auto s = state_of(t);
    for (int i = 0; i < 9; ++i) {
      const double noise = s[static_cast<size_t>(i)] - t.model().qpos0[i];
      CHECK(std::fabs(noise) <= 0.1);
      pos_min = std::min(pos_min, noise);
      pos_max = std::max(pos_max, noise);
      const double v = s[static_cast<size_t>(9 + i)];
      vel_sum += v;
      vel_sq += v * v;
      // v4's reset ends with mj_forward, whose solution is the warm start.
      CHECK(s[static_cast<size_t>(18 + i)] == t.data().qacc[i]);
    }
  }
  const double n = resets * 9.0;
  const double mean = vel_sum / n, sd = std::sqrt(vel_sq / n - mean * mean);
  // 3600 draws: the mean's standard error is 0.0017, the sd's about 0.0012.
  CHECK(std::fabs(mean) < 0.01);
  CHECK(std::fabs(sd - 0.1) < 0.008);
  CHECK(pos_min < -0.09);
  CHECK(pos_max > 0.09);
}

TEST_CASE(
  "HalfCheetah-v4 runs 1000 steps without terminating and truncates at the 1000th") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  auto e = make_env("HalfCheetah-v4").value();
  e->reset(seed);
  for (int t = 1; t <= 1000; ++t) {
    auto tr = e->step(uniform_action(6, 1.0f, gen)).value();
    CHECK_FALSE(tr.terminated);
    CHECK(tr.truncated == (t == 1000));
  }
}

// -- InvertedPendulum-v4 ---------------------------------------------------------

TEST_CASE(
  "InvertedPendulum-v4 pays 1 a step, the terminal one too, and ends past 0.2 rad") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  mujoco::inverted_pendulum t;
  rng r(seed);
  CHECK(t.dt() == 0.04);
  int episodes = 0;
  t.reset(r);
  for (int step = 0; step < 2000; ++step) {
    CAPTURE(step);
    auto before = state_of(t);
    auto action = uniform_action(1, 3.0f, gen);
    auto want = bare_step(t.model(), before, action, 2);
    auto out = t.step(action.data());
    auto after = state_of(t);
    CHECK(after == want);
    CHECK(out.reward == 1.0);
    CHECK(out.terminated == (std::fabs(after[1]) > 0.2));
    std::vector<float> obs(4);
    t.observe(obs.data());
    for (int i = 0; i < 4; ++i)
      CHECK(obs[static_cast<size_t>(i)] ==
            static_cast<float>(after[static_cast<size_t>(i)]));
    if (out.terminated) {
      ++episodes;
      t.reset(r);
    }
  }
  CHECK(episodes > 10); // random pushes topple the pole within a few dozen steps
}

TEST_CASE("InvertedPendulum-v4 resets to qpos0 and zero velocity plus U(-0.01, 0.01)") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  mujoco::inverted_pendulum t;
  rng r(seed);
  double lo = 1, hi = -1;
  for (int k = 0; k < 200; ++k) {
    t.reset(r);
    auto s = state_of(t);
    for (int i = 0; i < 4; ++i) {
      CHECK(std::fabs(s[static_cast<size_t>(i)]) <= 0.01); // qpos0 is zero
      lo = std::min(lo, s[static_cast<size_t>(i)]);
      hi = std::max(hi, s[static_cast<size_t>(i)]);
    }
  }
  CHECK(lo < -0.009);
  CHECK(hi > 0.009);
}

TEST_CASE("InvertedPendulum-v4 terminates on the step that takes the pole past 0.2 rad") {
  auto e = make_env("InvertedPendulum-v4").value();
  // The pole at 0.19 rad falling outward: the next step ends the episode.
  std::vector<double> state = {0.0, 0.19, 0.0, 1.0, 0.0, 0.0};
  REQUIRE(e->set_state(state));
  auto tr = e->step({0.0f}).value();
  CHECK(tr.terminated);
  CHECK(tr.reward == 1.0);
  CHECK(std::fabs(tr.obs[1]) > 0.2f);
}

// -- bad input and MuJoCo's warnings ----------------------------------------------------

TEST_CASE(
  "a non-finite action to a MuJoCo task is refused, naming the task and the element") {
  for (const char* id : {"InvertedPendulum-v4", "HalfCheetah-v4"}) {
    CAPTURE(id);
    auto e = make_env(id).value();
    e->reset(fresh_seed());
    const auto before = e->state();
    std::vector<float> action(e->spec().action_space.size(), 0.0f);
    action.back() = std::numeric_limits<float>::quiet_NaN();
    auto r = e->step(action);
    REQUIRE_FALSE(r);
    CHECK(r.err().code == errc::invalid_argument);
    CHECK(r.err().message.find(id) != std::string::npos);
    CHECK(r.err().message.find(fmt::format("element {}", action.size() - 1)) !=
          std::string::npos);
    CHECK(e->state() == before);
    action.back() = -std::numeric_limits<float>::infinity();
    CHECK_FALSE(e->step(action));
    CHECK(e->state() == before);
  }
}

TEST_CASE("MuJoCo's instability warnings are counted and the step goes on") {
  auto e = make_env("InvertedPendulum-v4").value();
  // A pole spinning at 1e200 rad/s: its accelerations overflow, MuJoCo warns
  // of a bad qacc and resets the simulation.
  std::vector<double> state = {0.0, 0.0, 0.0, 1e200, 0.0, 0.0};
  REQUIRE(e->set_state(state));
  const auto before = mujoco::trouble();
  auto tr = e->step({0.0f});
  REQUIRE(tr);
  CHECK(mujoco::trouble().instability_warnings > before.instability_warnings);
  for (float x : tr->obs)
    CHECK(std::isfinite(x));
}

TEST_CASE(
  "a state beyond MuJoCo's bounds is reset by MuJoCo, counted, and observed finite") {
  // MuJoCo resets the simulation when a position, velocity or acceleration
  // is NaN or beyond 1e10 (mjMAXVAL) at the start of an mj_step: so a
  // non-finite observation cannot come out of these tasks, and the check
  // behind it (mujoco_task::simulate) has nothing to catch here.
  auto e = make_env("HalfCheetah-v4").value();
  std::vector<double> state(27, 0.0);
  state[9] = 1e11; // rootx velocity
  REQUIRE(e->set_state(state));
  const auto before = mujoco::trouble();
  auto tr = e->step(std::vector<float>(6, 0.0f));
  REQUIRE(tr);
  CHECK_FALSE(tr->terminated);
  for (float x : tr->obs)
    CHECK(std::isfinite(x));
  CHECK(mujoco::trouble().instability_warnings > before.instability_warnings);
  CHECK(mujoco::trouble().non_finite_observations == before.non_finite_observations);
}

TEST_CASE(
  "instances of a MuJoCo task step on two threads at once as they do one at a time") {
  // The compiled model is shared read-only by every instance of a task.
  for (const char* id : {"InvertedPendulum-v4", "HalfCheetah-v4"}) {
    CAPTURE(id);
    const uint64_t seed = fresh_seed();
    CAPTURE(seed);
    auto run = [&](env& e, uint64_t s, std::vector<float>& trace) {
      std::mt19937_64 gen(s);
      const size_t ad = e.spec().action_space.size();
      const float bound = e.spec().action_space.high[0];
      std::vector<float> obs(e.spec().observation_space.size());
      e.reset(s, obs.data());
      for (int t = 0; t < 400; ++t) {
        auto action = uniform_action(ad, bound, gen);
        auto r = e.step(action.data(), obs.data());
        trace.insert(trace.end(), obs.begin(), obs.end());
        if (r->terminated || r->truncated)
          e.reset(obs.data());
      }
    };
    auto a = make_env(id).value(), b = make_env(id).value();
    std::vector<float> alone_a, alone_b, together_a, together_b;
    run(*a, seed, alone_a);
    run(*b, seed + 1, alone_b);
    std::thread other([&] { run(*a, seed, together_a); });
    run(*b, seed + 1, together_b);
    other.join();
    CHECK(together_a == alone_a);
    CHECK(together_b == alone_b);
  }
}
