// The MuJoCo tasks' v4 semantics, each against a float64 reference written
// here from Gymnasium's definitions (gymnasium/envs/mujoco/*_v4.py and
// mujoco_env.py): the frame skip against a bare MuJoCo loop, observations,
// rewards, termination, reset noise; bad input and MuJoCo's warnings.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "envs/mujoco/ant.hpp"
#include "envs/mujoco/half_cheetah.hpp"
#include "envs/mujoco/humanoid.hpp"
#include "envs/mujoco/inverted_pendulum.hpp"
#include "envs/mujoco/hopper.hpp"
#include "envs/mujoco/walker2d.hpp"
#include "envs/mujoco/swimmer.hpp"
#include "envs/mujoco/reacher.hpp"
#include "envs/mujoco/inverted_double_pendulum.hpp"
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
  std::vector<double> s(model_spec<Task>().state_dim());
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

// -- shared checks of Hopper, Walker2d, Swimmer, Reacher, InvertedDoublePendulum --

namespace {

using data_ptr = std::unique_ptr<mjData, data_deleter>;

// v4's do_simulation on a bare mjData from `state` (qpos, qvel,
// qacc_warmstart; any values after them are the task's own), returning the
// data itself: the quantities v4 reads besides the state come from it.
data_ptr bare_step_data(const mjModel& m, const std::vector<double>& state,
                        const std::vector<float>& action, int frame_skip) {
  data_ptr d(mj_makeData(&m));
  const size_t nq = static_cast<size_t>(m.nq), nv = static_cast<size_t>(m.nv);
  std::copy(state.begin(), state.begin() + static_cast<long>(nq), d->qpos);
  std::copy(state.begin() + static_cast<long>(nq),
            state.begin() + static_cast<long>(nq + nv), d->qvel);
  mj_forward(&m, d.get());
  std::copy(state.begin() + static_cast<long>(nq + nv),
            state.begin() + static_cast<long>(nq + 2 * nv), d->qacc_warmstart);
  for (int i = 0; i < m.nu; ++i)
    d->ctrl[i] = action[static_cast<size_t>(i)];
  for (int k = 0; k < frame_skip; ++k)
    mj_step(&m, d.get());
  mj_rnePostConstraint(&m, d.get());
  return d;
}

// The whole state of a task, as its spec sizes it.
template <class Task>
std::vector<double> full_state_of(const Task& t) {
  std::vector<double> s(Task::make_spec().state_dim());
  t.get_state(s.data());
  return s;
}

// (qpos, qvel, qacc_warmstart) of bare data: the first nq + 2 nv state values.
std::vector<double> mujoco_state(const mjModel& m, const mjData& d) {
  std::vector<double> s(d.qpos, d.qpos + m.nq);
  s.insert(s.end(), d.qvel, d.qvel + m.nv);
  s.insert(s.end(), d.qacc_warmstart, d.qacc_warmstart + m.nv);
  return s;
}

template <class Task>
std::vector<float> observation_of(const Task& t) {
  std::vector<float> obs(Task::make_spec().observation_space.size());
  t.observe(obs.data());
  return obs;
}

double sum_of_squares(const std::vector<float>& action) {
  double s = 0;
  for (float a : action)
    s += static_cast<double>(a) * a;
  return s;
}

double clip10(double x) {
  return std::min(10.0, std::max(-10.0, x));
}

// The rewards of a step agree with the float64 reference; v4's float32
// control cost is within a few float32 roundings of it.
bool close_reward(double got, double want) {
  return std::fabs(got - want) <= 1e-6 * (1 + std::fabs(want));
}

// A task restored from another's state continues bit for bit: the same
// observation at once, then the same rewards, terminations and observations.
template <class Task>
void check_round_trip(Task& t, std::mt19937_64& gen, float bound, int steps) {
  const size_t nu = Task::make_spec().action_space.size();
  const auto saved = full_state_of(t);
  Task restored;
  restored.set_state(saved.data());
  CHECK(observation_of(restored) == observation_of(t));
  CHECK(full_state_of(restored) == saved);
  for (int k = 0; k < steps; ++k) {
    CAPTURE(k);
    const auto action = uniform_action(nu, bound, gen);
    const auto a = t.step(action.data());
    const auto b = restored.step(action.data());
    CHECK(std::memcmp(&a.reward, &b.reward, sizeof a.reward) == 0);
    CHECK(a.terminated == b.terminated);
    CHECK(observation_of(restored) == observation_of(t));
  }
  CHECK(full_state_of(restored) == full_state_of(t));
}

// `values` all in [low, high] and spread over it (n draws: the extremes are
// within 10% of the ends but with probability about 2 (0.9)^n).
void check_uniform(const std::vector<double>& values, double low, double high) {
  REQUIRE(values.size() >= 100);
  const double smallest = *std::min_element(values.begin(), values.end());
  const double largest = *std::max_element(values.begin(), values.end());
  CHECK(smallest >= low);
  CHECK(largest <= high);
  CHECK(smallest < low + 0.1 * (high - low));
  CHECK(largest > high - 0.1 * (high - low));
}

// `values` look like N(0, sd^2): mean and standard deviation within about
// five standard errors.
void check_normal(const std::vector<double>& values, double sd) {
  double sum = 0, sq = 0;
  for (double v : values) {
    sum += v;
    sq += v * v;
  }
  const double n = static_cast<double>(values.size());
  const double mean = sum / n, got_sd = std::sqrt(sq / n - mean * mean);
  CHECK(std::fabs(mean) < 5 * sd / std::sqrt(n));
  CHECK(std::fabs(got_sd - sd) < 5 * sd / std::sqrt(2 * n));
}

// Runs the env of `id` to its time limit (re-arming the step counter 2 steps
// before the limit after every termination, for tasks that fall) and checks
// that it truncates exactly there.
void check_time_limit(const char* id, int limit) {
  const uint64_t seed = fresh_seed();
  CAPTURE(id);
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  auto e = make_env(id).value();
  CHECK(e->spec().max_episode_steps == limit);
  e->reset(seed);
  const size_t nu = e->spec().action_space.size();
  const float bound = e->spec().action_space.high[0];
  int steps = 0;
  for (;;) {
    auto tr = e->step(uniform_action(nu, bound, gen)).value();
    ++steps;
    if (tr.truncated) {
      CHECK(e->elapsed_steps() == limit);
      break;
    }
    CHECK(e->elapsed_steps() < limit);
    if (tr.terminated) { // fell: start again close to the limit
      e->reset(seed + static_cast<uint64_t>(steps));
      e->set_elapsed_steps(limit - 2);
    }
  }
}

} // namespace

// -- Hopper-v4 -------------------------------------------------------------------

namespace {

// v4's Hopper is_healthy on (qpos, qvel), written out again.
bool hopper_healthy(const std::vector<double>& s) {
  for (size_t i = 2; i < 12; ++i)
    if (!(-100 < s[i] && s[i] < 100))
      return false;
  return 0.7 < s[1] && -0.2 < s[2] && s[2] < 0.2;
}

} // namespace

TEST_CASE("Hopper-v4 steps as v4 does: four mj_steps, forward plus healthy reward minus "
          "the control cost, ends when unhealthy") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  mujoco::hopper t;
  rng r(seed);
  t.reset(r);
  CHECK(t.dt() == 0.008);
  CHECK(mujoco::hopper::make_spec().observation_space.size() == 11);
  int episodes = 0;
  for (int step = 0; step < 1500; ++step) {
    CAPTURE(step);
    const auto before = full_state_of(t);
    // Now and then beyond the bounds: MuJoCo clamps the control, the cost does not.
    const auto action = uniform_action(3, step % 5 == 0 ? 1.5f : 1.0f, gen);
    const auto d = bare_step_data(t.model(), before, action, 4);
    const auto out = t.step(action.data());
    const auto after = full_state_of(t);
    CHECK(after == mujoco_state(t.model(), *d));
    const double x_velocity = (after[0] - before[0]) / 0.008;
    // The healthy reward is paid on the terminal step too.
    CHECK(
      close_reward(out.reward, 1.0 * x_velocity + 1.0 - 1e-3 * sum_of_squares(action)));
    CHECK(out.terminated == !hopper_healthy(after));
    CHECK(t.x_position == after[0]);
    CHECK(t.x_velocity == x_velocity);
    const auto obs = observation_of(t);
    for (size_t i = 0; i < 5; ++i)
      CHECK(obs[i] == static_cast<float>(after[1 + i]));
    for (size_t i = 0; i < 6; ++i)
      CHECK(obs[5 + i] == static_cast<float>(clip10(after[6 + i])));
    if (out.terminated) {
      ++episodes;
      t.reset(r);
    }
  }
  CHECK(episodes > 3); // random torques topple the hopper within a few hundred steps
}

TEST_CASE("Hopper-v4 is healthy strictly inside its ranges and not on or beyond them") {
  mujoco::hopper t;
  std::vector<double> s(18, 0.0);
  s[1] = 1.25;
  auto healthy_with = [&](size_t i, double v) {
    auto u = s;
    u[i] = v;
    t.set_state(u.data());
    return t.is_healthy();
  };
  CHECK(healthy_with(1, 1.25));
  CHECK(healthy_with(1, std::nextafter(0.7, 1.0)));
  CHECK_FALSE(healthy_with(1, 0.7));
  CHECK(healthy_with(1, 1e6)); // no upper bound on the height
  CHECK(healthy_with(2, std::nextafter(0.2, 0.0)));
  CHECK_FALSE(healthy_with(2, 0.2));
  CHECK(healthy_with(2, std::nextafter(-0.2, 0.0)));
  CHECK_FALSE(healthy_with(2, -0.2));
  // state_vector()[2:]: qpos from rooty on (whose own range is narrower) and
  // every velocity, rootx's included.
  for (size_t i = 3; i < 12; ++i) {
    CAPTURE(i);
    CHECK(healthy_with(i, std::nextafter(100.0, 0.0)));
    CHECK(healthy_with(i, std::nextafter(-100.0, 0.0)));
    CHECK_FALSE(healthy_with(i, 100.0));
    CHECK_FALSE(healthy_with(i, -100.0));
  }
  CHECK(healthy_with(0, 1e6)); // rootx is free
}

TEST_CASE("Hopper-v4 observes velocities clipped to 10 and ends the step that falls, "
          "paying the healthy reward") {
  mujoco::hopper t;
  std::vector<double> s(18, 0.0);
  s[1] = 1.25;
  s[6 + 3] = 50;  // thigh joint velocity
  s[6 + 4] = -37; // leg joint velocity
  t.set_state(s.data());
  auto obs = observation_of(t);
  CHECK(obs[5 + 3] == 10.0f);
  CHECK(obs[5 + 4] == -10.0f);
  CHECK(obs[5 + 2] == 0.0f);
  // Leaning at 0.19 rad and turning at 5 rad/s: the next step takes rooty
  // past 0.2 and terminates.
  std::fill(s.begin(), s.end(), 0.0);
  s[1] = 1.25;
  s[2] = 0.19;
  s[6 + 2] = 5.0;
  t.set_state(s.data());
  CHECK(t.is_healthy());
  const std::vector<float> action = {0.25f, -0.5f, 0.75f};
  const auto d = bare_step_data(t.model(), s, action, 4);
  const auto out = t.step(action.data());
  CHECK(d->qpos[2] >= 0.2);
  CHECK(out.terminated);
  const double x_velocity = (d->qpos[0] - s[0]) / 0.008;
  CHECK(close_reward(out.reward, x_velocity + 1.0 - 1e-3 * (0.0625 + 0.25 + 0.5625)));
}

TEST_CASE("Hopper-v4 resets to qpos0 and zero velocity plus U(-0.005, 0.005)") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  mujoco::hopper t;
  rng r(seed);
  std::vector<double> qpos_noise, qvel_noise;
  for (int k = 0; k < 300; ++k) {
    t.reset(r);
    const auto s = full_state_of(t);
    for (int i = 0; i < 6; ++i) {
      qpos_noise.push_back(s[static_cast<size_t>(i)] - t.model().qpos0[i]);
      qvel_noise.push_back(s[static_cast<size_t>(6 + i)]);
    }
  }
  CHECK(t.model().qpos0[1] == 1.25); // rootz's reference: the torso's height
  check_uniform(qpos_noise, -0.005, 0.005);
  check_uniform(qvel_noise, -0.005, 0.005);
}

TEST_CASE(
  "Hopper-v4 restored from its state continues bit for bit and truncates at 1000") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  mujoco::hopper t;
  rng r(seed);
  t.reset(r);
  for (int k = 0; k < 10; ++k)
    t.step(uniform_action(3, 1.0f, gen).data());
  check_round_trip(t, gen, 1.0f, 100);
  check_time_limit("Hopper-v4", 1000);
}

// -- Walker2d-v4 -----------------------------------------------------------------

TEST_CASE("Walker2d-v4 steps as v4 does: four mj_steps, forward plus healthy reward "
          "minus the control cost, ends when unhealthy") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  mujoco::walker2d t;
  rng r(seed);
  t.reset(r);
  CHECK(t.dt() == 0.008);
  CHECK(mujoco::walker2d::make_spec().observation_space.size() == 17);
  int episodes = 0;
  for (int step = 0; step < 1500; ++step) {
    CAPTURE(step);
    const auto before = full_state_of(t);
    const auto action = uniform_action(6, step % 5 == 0 ? 1.5f : 1.0f, gen);
    const auto d = bare_step_data(t.model(), before, action, 4);
    const auto out = t.step(action.data());
    const auto after = full_state_of(t);
    CHECK(after == mujoco_state(t.model(), *d));
    const double x_velocity = (after[0] - before[0]) / 0.008;
    CHECK(
      close_reward(out.reward, 1.0 * x_velocity + 1.0 - 1e-3 * sum_of_squares(action)));
    const bool healthy =
      0.8 < after[1] && after[1] < 2.0 && -1 < after[2] && after[2] < 1;
    CHECK(out.terminated == !healthy);
    CHECK(t.x_position == after[0]);
    CHECK(t.x_velocity == x_velocity);
    const auto obs = observation_of(t);
    for (size_t i = 0; i < 8; ++i)
      CHECK(obs[i] == static_cast<float>(after[1 + i]));
    for (size_t i = 0; i < 9; ++i)
      CHECK(obs[8 + i] == static_cast<float>(clip10(after[9 + i])));
    if (out.terminated) {
      ++episodes;
      t.reset(r);
    }
  }
  CHECK(episodes > 3);
}

TEST_CASE("Walker2d-v4 is healthy strictly inside its ranges, clips observed velocities "
          "to 10 and resets with U(-0.005, 0.005)") {
  mujoco::walker2d t;
  std::vector<double> s(27, 0.0);
  s[1] = 1.25;
  auto healthy_with = [&](size_t i, double v) {
    auto u = s;
    u[i] = v;
    t.set_state(u.data());
    return t.is_healthy();
  };
  CHECK(healthy_with(1, std::nextafter(0.8, 1.0)));
  CHECK_FALSE(healthy_with(1, 0.8));
  CHECK(healthy_with(1, std::nextafter(2.0, 1.0)));
  CHECK_FALSE(healthy_with(1, 2.0));
  CHECK(healthy_with(2, std::nextafter(1.0, 0.0)));
  CHECK_FALSE(healthy_with(2, 1.0));
  CHECK(healthy_with(2, std::nextafter(-1.0, 0.0)));
  CHECK_FALSE(healthy_with(2, -1.0));
  CHECK(healthy_with(9 + 4, 1e6)); // no state range in Walker2d's rule
  // The clip: 1e6 observed as 10.
  CHECK(observation_of(t)[8 + 4] == 10.0f);

  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  rng r(seed);
  std::vector<double> qpos_noise, qvel_noise;
  for (int k = 0; k < 200; ++k) {
    t.reset(r);
    const auto st = full_state_of(t);
    for (int i = 0; i < 9; ++i) {
      qpos_noise.push_back(st[static_cast<size_t>(i)] - t.model().qpos0[i]);
      qvel_noise.push_back(st[static_cast<size_t>(9 + i)]);
    }
  }
  check_uniform(qpos_noise, -0.005, 0.005);
  check_uniform(qvel_noise, -0.005, 0.005);
}

TEST_CASE(
  "Walker2d-v4 restored from its state continues bit for bit and truncates at 1000") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  mujoco::walker2d t;
  rng r(seed);
  t.reset(r);
  for (int k = 0; k < 10; ++k)
    t.step(uniform_action(6, 1.0f, gen).data());
  check_round_trip(t, gen, 1.0f, 100);
  check_time_limit("Walker2d-v4", 1000);
}

// -- Swimmer-v4 ------------------------------------------------------------------

TEST_CASE("Swimmer-v4 steps as v4 does: four mj_steps, the forward reward minus the "
          "control cost, never ends") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  mujoco::swimmer t;
  rng r(seed);
  t.reset(r);
  CHECK(t.dt() == 0.04);
  CHECK(mujoco::swimmer::make_spec().observation_space.size() == 8);
  for (int step = 0; step < 500; ++step) {
    CAPTURE(step);
    const auto before = full_state_of(t);
    const auto action = uniform_action(2, step % 5 == 0 ? 1.5f : 1.0f, gen);
    const auto d = bare_step_data(t.model(), before, action, 4);
    const auto out = t.step(action.data());
    const auto after = full_state_of(t);
    CHECK(after == mujoco_state(t.model(), *d));
    const double x_velocity = (after[0] - before[0]) / 0.04;
    const double y_velocity = (after[1] - before[1]) / 0.04;
    const double ctrl_cost = 1e-4 * sum_of_squares(action);
    CHECK(close_reward(out.reward, 1.0 * x_velocity - ctrl_cost));
    CHECK_FALSE(out.terminated);
    // v4's info, term by term.
    CHECK(t.x_position == after[0]);
    CHECK(t.y_position == after[1]);
    CHECK(t.x_velocity == x_velocity);
    CHECK(t.y_velocity == y_velocity);
    CHECK(std::fabs(t.distance_from_origin - std::hypot(after[0], after[1])) <=
          1e-15 * (1 + t.distance_from_origin));
    CHECK(t.reward_fwd == x_velocity);
    CHECK(t.forward_reward == x_velocity);
    CHECK(close_reward(t.reward_ctrl, -ctrl_cost));
    CHECK(t.reward_fwd + t.reward_ctrl == out.reward);
    const auto obs = observation_of(t);
    for (size_t i = 0; i < 3; ++i)
      CHECK(obs[i] == static_cast<float>(after[2 + i]));
    for (size_t i = 0; i < 5; ++i)
      CHECK(obs[3 + i] == static_cast<float>(after[5 + i]));
  }
}

TEST_CASE("Swimmer-v4 resets with U(-0.1, 0.1), continues bit for bit when restored and "
          "truncates at 1000") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  mujoco::swimmer t;
  rng r(seed);
  std::vector<double> qpos_noise, qvel_noise;
  for (int k = 0; k < 200; ++k) {
    t.reset(r);
    const auto s = full_state_of(t);
    for (int i = 0; i < 5; ++i) {
      qpos_noise.push_back(s[static_cast<size_t>(i)] - t.model().qpos0[i]);
      qvel_noise.push_back(s[static_cast<size_t>(5 + i)]);
    }
  }
  check_uniform(qpos_noise, -0.1, 0.1);
  check_uniform(qvel_noise, -0.1, 0.1);
  for (int k = 0; k < 10; ++k)
    t.step(uniform_action(2, 1.0f, gen).data());
  check_round_trip(t, gen, 1.0f, 100);
  check_time_limit("Swimmer-v4", 1000);
}

// -- Reacher-v4 ------------------------------------------------------------------

namespace {

// fingertip - target from the bodies' xpos in `d`, as v4's get_body_com.
std::vector<double> fingertip_minus_target(const mjModel& m, const mjData& d) {
  const int tip = mj_name2id(&m, mjOBJ_BODY, "fingertip");
  const int target = mj_name2id(&m, mjOBJ_BODY, "target");
  REQUIRE(tip >= 0);
  REQUIRE(target >= 0);
  std::vector<double> v(3);
  for (int k = 0; k < 3; ++k)
    v[static_cast<size_t>(k)] = d.xpos[3 * tip + k] - d.xpos[3 * target + k];
  return v;
}

double norm3(const std::vector<double>& v) {
  return std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
}

} // namespace

TEST_CASE("Reacher-v4 steps as v4 does: the distance and control rewards of the state "
          "before the step, two mj_steps, never ends") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  mujoco::reacher t;
  rng r(seed);
  t.reset(r);
  CHECK(t.dt() == 0.02);
  const auto spec = mujoco::reacher::make_spec();
  CHECK(spec.observation_space.size() == 11);
  REQUIRE(spec.state_dim() == 4 + 2 * 4 + 3);
  CHECK(spec.state_names[12] == "fingertip_minus_target.x");
  CHECK(spec.state_names[14] == "fingertip_minus_target.z");
  // What the previous step (or the reset) left: the distance v4 pays for next.
  auto seen = fingertip_minus_target(t.model(), t.data());
  int lagging = 0;
  for (int step = 0; step < 500; ++step) {
    CAPTURE(step);
    const auto before = full_state_of(t);
    const auto action = uniform_action(2, step % 5 == 0 ? 1.5f : 1.0f, gen);
    const auto d = bare_step_data(t.model(), before, action, 2);
    const auto out = t.step(action.data());
    const auto after = full_state_of(t);
    const auto mj = mujoco_state(t.model(), *d);
    CHECK(std::vector<double>(after.begin(), after.begin() + 12) == mj);
    const double reward_dist = -norm3(seen);
    const double reward_ctrl = -sum_of_squares(action);
    CHECK(close_reward(out.reward, reward_dist + reward_ctrl));
    CHECK(std::fabs(t.reward_dist - reward_dist) <= 1e-15);
    CHECK(close_reward(t.reward_ctrl, reward_ctrl));
    CHECK_FALSE(out.terminated);
    seen = fingertip_minus_target(t.model(), *d);
    CHECK(std::vector<double>(after.begin() + 12, after.end()) == seen);
    const auto obs = observation_of(t);
    CHECK(obs[0] == static_cast<float>(std::cos(mj[0])));
    CHECK(obs[1] == static_cast<float>(std::cos(mj[1])));
    CHECK(obs[2] == static_cast<float>(std::sin(mj[0])));
    CHECK(obs[3] == static_cast<float>(std::sin(mj[1])));
    CHECK(obs[4] == static_cast<float>(mj[2]));
    CHECK(obs[5] == static_cast<float>(mj[3]));
    CHECK(obs[6] == static_cast<float>(mj[4]));
    CHECK(obs[7] == static_cast<float>(mj[5]));
    for (size_t k = 0; k < 3; ++k)
      CHECK(obs[8 + k] == static_cast<float>(seen[k]));
    // The bodies' xpos are those of RK4's last stage, not of the final qpos:
    // why the state keeps them.
    data_ptr fresh(mj_makeData(&t.model()));
    std::copy(mj.begin(), mj.begin() + 4, fresh->qpos);
    mj_kinematics(&t.model(), fresh.get());
    lagging += fingertip_minus_target(t.model(), *fresh) != seen;
  }
  CHECK(lagging > 400);
}

TEST_CASE("Reacher-v4 resets the arm near qpos0 and the target uniformly in the disc of "
          "radius 0.2, at rest") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  mujoco::reacher t;
  rng r(seed);
  std::vector<double> arm, arm_velocity, target;
  double x_sum = 0, r2_sum = 0;
  const int resets = 2000;
  for (int k = 0; k < resets; ++k) {
    t.reset(r);
    const auto s = full_state_of(t);
    arm.push_back(s[0] - t.model().qpos0[0]);
    arm.push_back(s[1] - t.model().qpos0[1]);
    arm_velocity.push_back(s[4]);
    arm_velocity.push_back(s[5]);
    CHECK(s[6] == 0.0); // the target at rest
    CHECK(s[7] == 0.0);
    const double radius2 = s[2] * s[2] + s[3] * s[3];
    CHECK(std::sqrt(radius2) < 0.2);
    target.push_back(s[2]);
    target.push_back(s[3]);
    x_sum += s[2];
    r2_sum += radius2;
    // The kept fingertip - target is that of the reset's positions.
    data_ptr fresh(mj_makeData(&t.model()));
    std::copy(s.begin(), s.begin() + 4, fresh->qpos);
    mj_kinematics(&t.model(), fresh.get());
    CHECK(std::vector<double>(s.begin() + 12, s.end()) ==
          fingertip_minus_target(t.model(), *fresh));
  }
  check_uniform(arm, -0.1, 0.1);
  check_uniform(arm_velocity, -0.005, 0.005);
  check_uniform(target, -0.2, 0.2);
  // Uniform in the disc: E[x] = 0, E[r^2] = R^2 / 2 = 0.02 (sd of r^2: 0.0115).
  CHECK(std::fabs(x_sum / resets) < 5 * 0.1 / std::sqrt(static_cast<double>(resets)));
  CHECK(std::fabs(r2_sum / resets - 0.02) <
        5 * 0.0115 / std::sqrt(static_cast<double>(resets)));
}

TEST_CASE(
  "Reacher-v4 restored from its state continues bit for bit and truncates at 50") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  mujoco::reacher t;
  rng r(seed);
  t.reset(r);
  for (int k = 0; k < 10; ++k)
    t.step(uniform_action(2, 1.0f, gen).data());
  check_round_trip(t, gen, 1.0f, 60);
  check_time_limit("Reacher-v4", 50);
}

// -- InvertedDoublePendulum-v4 -----------------------------------------------------

TEST_CASE(
  "InvertedDoublePendulum-v4 steps as v4 does: five mj_steps, 10 minus the tip's "
  "distance and the poles' velocity penalties, ends when the tip is at 1 or below") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  mujoco::inverted_double_pendulum t;
  rng r(seed);
  t.reset(r);
  CHECK(t.dt() == 0.05);
  const auto spec = mujoco::inverted_double_pendulum::make_spec();
  CHECK(spec.observation_space.size() == 11);
  REQUIRE(spec.state_dim() == 3 + 2 * 3 + 3);
  CHECK(spec.state_names[9] == "qfrc_constraint.slider");
  const int tip = mj_name2id(&t.model(), mjOBJ_SITE, "tip");
  REQUIRE(tip >= 0);
  int episodes = 0;
  for (int step = 0; step < 2000; ++step) {
    CAPTURE(step);
    const auto before = full_state_of(t);
    const auto action = uniform_action(1, step % 5 == 0 ? 1.5f : 1.0f, gen);
    const auto d = bare_step_data(t.model(), before, action, 5);
    const auto out = t.step(action.data());
    const auto after = full_state_of(t);
    const auto mj = mujoco_state(t.model(), *d);
    CHECK(std::vector<double>(after.begin(), after.begin() + 9) == mj);
    CHECK(std::vector<double>(after.begin() + 9, after.end()) ==
          std::vector<double>(d->qfrc_constraint, d->qfrc_constraint + 3));
    const double x = d->site_xpos[3 * tip], y = d->site_xpos[3 * tip + 2];
    const double v1 = mj[4], v2 = mj[5];
    const double reward =
      10 - (0.01 * x * x + (y - 2) * (y - 2)) - (1e-3 * v1 * v1 + 5e-3 * v2 * v2);
    CHECK(std::fabs(out.reward - reward) <= 1e-12 * (1 + std::fabs(reward)));
    CHECK(out.terminated == (y <= 1));
    const auto obs = observation_of(t);
    CHECK(obs[0] == static_cast<float>(mj[0]));
    CHECK(obs[1] == static_cast<float>(std::sin(mj[1])));
    CHECK(obs[2] == static_cast<float>(std::sin(mj[2])));
    CHECK(obs[3] == static_cast<float>(std::cos(mj[1])));
    CHECK(obs[4] == static_cast<float>(std::cos(mj[2])));
    for (size_t i = 0; i < 3; ++i) {
      CHECK(obs[5 + i] == static_cast<float>(clip10(mj[3 + i])));
      CHECK(obs[8 + i] == static_cast<float>(clip10(d->qfrc_constraint[i])));
    }
    if (out.terminated) {
      ++episodes;
      t.reset(r);
    }
  }
  CHECK(episodes > 10);
}

TEST_CASE(
  "InvertedDoublePendulum-v4 clips the cart's constraint force, continues bit for "
  "bit when restored at its limit, and resets with v4's noise") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  mujoco::inverted_double_pendulum t;
  // The cart at 0.995 running into its limit at 1 at 5 m/s, the poles upright.
  std::vector<double> s(12, 0.0);
  s[0] = 0.995;
  s[3] = 5.0;
  s[4] = 30.0; // beyond the observation's clip
  t.set_state(s.data());
  CHECK(observation_of(t)[5] == 5.0f);
  CHECK(observation_of(t)[6] == 10.0f);
  const std::vector<float> action = {1.0f};
  const auto d = bare_step_data(t.model(), s, action, 5);
  t.step(action.data());
  REQUIRE(std::fabs(d->qfrc_constraint[0]) > 10);
  const auto obs = observation_of(t);
  CHECK(obs[8] == (d->qfrc_constraint[0] > 0 ? 10.0f : -10.0f));
  check_round_trip(t, gen, 1.0f, 20);

  // The cart at 0.985 running at 5 m/s: after the step it is past its limit,
  // but the force of RK4's last stage, which v4 observes, is not that of the
  // final state. Restored there, the force observed is the saved one.
  std::fill(s.begin(), s.end(), 0.0);
  s[0] = 0.985;
  s[3] = 5.0;
  t.set_state(s.data());
  const std::vector<float> no_push = {0.0f};
  const auto lagged = bare_step_data(t.model(), s, no_push, 5);
  t.step(no_push.data());
  data_ptr fresh(mj_makeData(&t.model()));
  std::copy(lagged->qpos, lagged->qpos + 3, fresh->qpos);
  std::copy(lagged->qvel, lagged->qvel + 3, fresh->qvel);
  mj_forward(&t.model(), fresh.get());
  REQUIRE(lagged->qfrc_constraint[0] != fresh->qfrc_constraint[0]);
  CHECK(observation_of(t)[8] == static_cast<float>(clip10(lagged->qfrc_constraint[0])));
  check_round_trip(t, gen, 1.0f, 20);

  rng r(seed);
  std::vector<double> qpos_noise, qvel_noise;
  for (int k = 0; k < 400; ++k) {
    t.reset(r);
    const auto st = full_state_of(t);
    for (int i = 0; i < 3; ++i) {
      qpos_noise.push_back(st[static_cast<size_t>(i)] - t.model().qpos0[i]);
      qvel_noise.push_back(st[static_cast<size_t>(3 + i)]);
      CHECK(st[static_cast<size_t>(9 + i)] == t.data().qfrc_constraint[i]);
    }
  }
  check_uniform(qpos_noise, -0.1, 0.1);
  check_normal(qvel_noise, 0.1);
  check_time_limit("InvertedDoublePendulum-v4", 1000);
}

// -- tasks with a free root joint (Ant-v4, Humanoid-v4) ----------------------------

namespace {

using data_ptr = std::unique_ptr<mjData, data_deleter>;

// A bare mjData restored to `state` as mujoco_task::set_state restores it
// (qpos and qvel, mj_forward, qpos again: MuJoCo 2.2's mj_forward
// renormalizes quaternions in place; then the warm start) and stepped as
// v4's do_simulation steps: ctrl = action, frame_skip mj_step,
// mj_rnePostConstraint.
data_ptr bare_data_step(const mjModel& m, const std::vector<double>& state,
                        const std::vector<float>& action, int frame_skip) {
  data_ptr d(mj_makeData(&m));
  const size_t nq = static_cast<size_t>(m.nq), nv = static_cast<size_t>(m.nv);
  std::copy(state.begin(), state.begin() + static_cast<long>(nq), d->qpos);
  std::copy(state.begin() + static_cast<long>(nq),
            state.begin() + static_cast<long>(nq + nv), d->qvel);
  mj_forward(&m, d.get());
  std::copy(state.begin(), state.begin() + static_cast<long>(nq), d->qpos);
  std::copy(state.begin() + static_cast<long>(nq + nv),
            state.begin() + static_cast<long>(nq + 2 * nv), d->qacc_warmstart);
  for (int i = 0; i < m.nu; ++i)
    d->ctrl[i] = static_cast<double>(action[static_cast<size_t>(i)]);
  for (int k = 0; k < frame_skip; ++k)
    mj_step(&m, d.get());
  mj_rnePostConstraint(&m, d.get());
  return d;
}

std::vector<double> state_of_data(const mjModel& m, const mjData& d) {
  std::vector<double> s(d.qpos, d.qpos + m.nq);
  s.insert(s.end(), d.qvel, d.qvel + m.nv);
  s.insert(s.end(), d.qacc_warmstart, d.qacc_warmstart + m.nv);
  return s;
}

// The physical part of a task's state: qpos, qvel, qacc_warmstart.
template <class Task>
std::vector<double> physics_of(const Task& t) {
  auto s = state_of(t);
  s.resize(static_cast<size_t>(t.model().nq + 2 * t.model().nv));
  return s;
}

// Finds two values of state[index] (the root's height or its vertical
// velocity; the rest as in `state`) whose states end one zero-action step
// with qpos[2] on either side of `boundary`, within 1e-9 of it, the
// boundary itself on the side that `boundary_below` says: bisection
// between `low` (which must end below) and `high` (above). Returns the
// states (below, above).
std::pair<std::vector<double>, std::vector<double>>
straddle(const mjModel& m, std::vector<double> state, int frame_skip, size_t index,
         double boundary, bool boundary_below, double low, double high) {
  const std::vector<float> zero(static_cast<size_t>(m.nu), 0.0f);
  auto z_after = [&](double value) {
    state[index] = value;
    return bare_data_step(m, state, zero, frame_skip)->qpos[2];
  };
  auto is_below = [&](double z) { return boundary_below ? z <= boundary : z < boundary; };
  REQUIRE(is_below(z_after(low)));
  REQUIRE_FALSE(is_below(z_after(high)));
  for (int k = 0; k < 100; ++k) {
    const double mid = 0.5 * (low + high);
    if (mid == low || mid == high)
      break;
    (is_below(z_after(mid)) ? low : high) = mid;
  }
  const double below = z_after(low), above = z_after(high);
  CAPTURE(below);
  CAPTURE(above);
  REQUIRE(is_below(below));
  REQUIRE_FALSE(is_below(above));
  REQUIRE(above - below < 1e-9);
  std::vector<double> a = state, b = state;
  a[index] = low;
  b[index] = high;
  return {a, b};
}

// The unit quaternion (cos 45 deg, 0, sin 45 deg, 0): the body turned on its side.
void lay_down(std::vector<double>& state) {
  state[3] = std::sqrt(0.5);
  state[4] = 0;
  state[5] = std::sqrt(0.5);
  state[6] = 0;
}

} // namespace

TEST_CASE("Ant-v4 steps as v4 does: the torso's x velocity plus 1 minus 0.5 sum(a^2), "
          "27 observations, terminated outside z in [0.2, 1]") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  mujoco::ant t;
  rng r(seed);
  t.reset(r);
  const mjModel& m = t.model();
  REQUIRE(std::string(m.names + m.name_bodyadr[1]) == "torso");
  const double dt = m.opt.timestep * 5;
  CHECK(std::fabs(dt - 0.05) < 1e-15);
  int ended = 0;
  for (int step = 0; step < 400; ++step) {
    CAPTURE(step);
    auto before = state_of(t);
    // v4's get_body_com("torso") before the step: the body position the
    // last step (or the reset's mj_forward) left in the data.
    const double x_before = t.data().xpos[3], y_before = t.data().xpos[4];
    // Every fourth action beyond the bounds: the cost takes it as given.
    auto action = uniform_action(8, step % 4 == 0 ? 1.5f : 1.0f, gen);
    auto d = bare_data_step(m, before, action, 5);
    auto out = t.step(action.data());
    CHECK(physics_of(t) == state_of_data(m, *d)); // the same calls: bit for bit
    // The state carries the torso's position the next step starts from.
    CHECK(state_of(t)[43] == d->xpos[3]);
    CHECK(state_of(t)[44] == d->xpos[4]);
    const double x_after = d->xpos[3], y_after = d->xpos[4];
    const double x_velocity = (x_after - x_before) / dt;
    const double y_velocity = (y_after - y_before) / dt;
    double sum_sq = 0;
    for (float a : action)
      sum_sq += static_cast<double>(a) * a;
    const double reward = x_velocity + 1.0 - 0.5 * sum_sq;
    CHECK(std::fabs(out.reward - reward) <= 1e-6 * (1 + std::fabs(reward)));
    bool finite = true;
    for (int i = 0; i < m.nq; ++i)
      finite = finite && std::isfinite(d->qpos[i]);
    for (int i = 0; i < m.nv; ++i)
      finite = finite && std::isfinite(d->qvel[i]);
    const bool healthy = finite && d->qpos[2] >= 0.2 && d->qpos[2] <= 1.0;
    CHECK(out.terminated == !healthy);
    // The reward terms, as v4's info names them.
    CHECK(t.x_position == x_after);
    CHECK(t.y_position == y_after);
    CHECK(t.x_velocity == x_velocity);
    CHECK(t.y_velocity == y_velocity);
    CHECK(t.forward_reward == x_velocity);
    CHECK(t.reward_forward == x_velocity);
    CHECK(t.reward_survive == 1.0);
    CHECK(std::fabs(t.reward_ctrl + 0.5 * sum_sq) <= 1e-6 * (1 + 0.5 * sum_sq));
    CHECK(std::fabs(t.distance_from_origin - std::hypot(x_after, y_after)) <=
          1e-15 * (1 + std::hypot(x_after, y_after)));
    // The observation: qpos without the root's x and y, then qvel.
    std::vector<float> obs(27);
    t.observe(obs.data());
    for (int i = 0; i < 13; ++i)
      CHECK(obs[static_cast<size_t>(i)] == static_cast<float>(d->qpos[i + 2]));
    for (int i = 0; i < 14; ++i)
      CHECK(obs[static_cast<size_t>(13 + i)] == static_cast<float>(d->qvel[i]));
    if (out.terminated) {
      ++ended;
      t.reset(r);
    }
  }
  CAPTURE(ended);
}

TEST_CASE("Ant-v4 resets to qpos0 plus U(-0.1, 0.1), the quaternion normalized, and "
          "velocities 0.1 N(0, 1)") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  mujoco::ant t;
  rng r(seed);
  const int resets = 400;
  double vel_sum = 0, vel_sq = 0, pos_min = 1, pos_max = -1;
  for (int k = 0; k < resets; ++k) {
    t.reset(r);
    auto s = state_of(t);
    for (int i : {0, 1, 2, 7, 8, 9, 10, 11, 12, 13, 14}) {
      const double noise = s[static_cast<size_t>(i)] - t.model().qpos0[i];
      CHECK(std::fabs(noise) <= 0.1);
      pos_min = std::min(pos_min, noise);
      pos_max = std::max(pos_max, noise);
    }
    // (1, 0, 0, 0) + U(-0.1, 0.1) each, which MuJoCo's mj_forward (v4's
    // set_state) normalizes in place: unit length, |q_k / q_w| <= 0.1 / 0.9.
    const double* q = &s[3];
    CHECK(std::fabs(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3] - 1) < 1e-14);
    CHECK(q[0] > 0);
    for (int k2 = 1; k2 < 4; ++k2)
      CHECK(std::fabs(q[k2] / q[0]) <= 0.1 / 0.9 + 1e-12);
    for (int i = 0; i < 14; ++i) {
      const double v = s[static_cast<size_t>(15 + i)];
      vel_sum += v;
      vel_sq += v * v;
      // v4's reset ends with mj_forward, whose solution is the warm start.
      CHECK(s[static_cast<size_t>(29 + i)] == t.data().qacc[i]);
    }
  }
  const double n = resets * 14.0;
  const double mean = vel_sum / n, sd = std::sqrt(vel_sq / n - mean * mean);
  // 5600 draws: the mean's standard error is 0.0013, the sd's about 0.001.
  CHECK(std::fabs(mean) < 0.01);
  CHECK(std::fabs(sd - 0.1) < 0.008);
  CHECK(pos_min < -0.09);
  CHECK(pos_max > 0.09);
}

TEST_CASE("Ant-v4 terminates when a step ends with the torso's z just outside [0.2, 1] "
          "and pays the healthy reward on that step") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  mujoco::ant t;
  rng r(seed);
  t.reset(r);
  const std::vector<float> zero(8, 0.0f);
  struct bound {
    double boundary;
    size_t index;
    double start_z, low, high;
    bool terminated_below;
  };
  // Above: the ant in free fall from about 1 m, by its height. Below: the
  // torso's sphere (radius 0.25) thrown into the floor from 0.26 m, by its
  // downward speed (30 to 100 m/s: slower, the contact holds it above
  // 0.2 m). Both ends of [0.2, 1] are healthy.
  for (const bound& b : {bound{1.0, 2, 1.0, 0.9, 1.1, false},
                         bound{0.2, 15 + 2, 0.26, -100.0, -30.0, true}}) {
    CAPTURE(b.boundary);
    auto start = state_of(t);
    start[2] = b.start_z;
    auto states = straddle(t.model(), start, 5, b.index, b.boundary, !b.terminated_below,
                           b.low, b.high);
    t.set_state(states.first.data());
    auto below = t.step(zero.data());
    CHECK(below.terminated == b.terminated_below);
    CHECK(t.reward_survive == 1.0);
    t.set_state(states.second.data());
    auto above = t.step(zero.data());
    CHECK(above.terminated == !b.terminated_below);
    CHECK(t.reward_survive == 1.0);
    // Zero action: the reward is the forward velocity plus 1.
    CHECK(above.reward == t.x_velocity + 1.0);
  }
}

TEST_CASE("Ant-v4 standing still runs 1000 steps and truncates at the 1000th") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  auto e = make_env("Ant-v4").value();
  e->reset(seed);
  for (int t = 1; t <= 1000; ++t) {
    auto tr = e->step(std::vector<float>(8, 0.0f)).value();
    REQUIRE_FALSE(tr.terminated);
    CHECK(tr.truncated == (t == 1000));
  }
}

TEST_CASE("Humanoid-v4 steps as v4 does: 1.25 times the mass centre's x velocity plus 5 "
          "minus 0.1 sum(ctrl^2), 376 observations, terminated outside z in (1, 2)") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  mujoco::humanoid t;
  rng r(seed);
  t.reset(r);
  const mjModel& m = t.model();
  REQUIRE(m.nbody == 14);
  const double dt = m.opt.timestep * 5;
  CHECK(std::fabs(dt - 0.015) < 1e-15);
  // v4's mass_center: sum of body_mass * xipos over the bodies / total mass.
  auto mass_centre = [&m](const mjData& d, int k) {
    double weighted = 0, total = 0;
    for (int b = 0; b < m.nbody; ++b) {
      weighted += m.body_mass[b] * d.xipos[3 * b + k];
      total += m.body_mass[b];
    }
    return weighted / total;
  };
  int ended = 0;
  for (int step = 0; step < 300; ++step) {
    CAPTURE(step);
    auto before = state_of(t);
    // Before the step: the body positions the last step (or the reset's
    // mj_forward) left in the data.
    const double x_before = mass_centre(t.data(), 0), y_before = mass_centre(t.data(), 1);
    // Every fourth action beyond the bounds: the cost takes ctrl as given.
    auto action = uniform_action(17, step % 4 == 0 ? 0.6f : 0.4f, gen);
    auto d = bare_data_step(m, before, action, 5);
    auto out = t.step(action.data());
    CHECK(physics_of(t) == state_of_data(m, *d));
    const double x_after = mass_centre(*d, 0), y_after = mass_centre(*d, 1);
    const double x_velocity = (x_after - x_before) / dt;
    double sum_sq = 0;
    for (float a : action)
      sum_sq += static_cast<double>(a) * a;
    const double reward = 1.25 * x_velocity + 5.0 - 0.1 * sum_sq;
    CHECK(std::fabs(out.reward - reward) <= 1e-9 * (1 + std::fabs(reward)));
    CHECK(out.terminated == !(d->qpos[2] > 1.0 && d->qpos[2] < 2.0));
    CHECK(std::fabs(t.x_position - x_after) <= 1e-14 * (1 + std::fabs(x_after)));
    CHECK(std::fabs(t.y_position - y_after) <= 1e-14 * (1 + std::fabs(y_after)));
    CHECK(std::fabs(t.x_velocity - x_velocity) <= 1e-9 * (1 + std::fabs(x_velocity)));
    CHECK(std::fabs(t.y_velocity - (y_after - y_before) / dt) <=
          1e-9 * (1 + std::fabs(t.y_velocity)));
    CHECK(t.reward_linvel == 1.25 * t.x_velocity);
    CHECK(t.forward_reward == t.reward_linvel);
    CHECK(t.reward_alive == 5.0);
    CHECK(std::fabs(t.reward_quadctrl + 0.1 * sum_sq) <= 1e-12 * (1 + 0.1 * sum_sq));
    CHECK(std::fabs(t.distance_from_origin - std::hypot(x_after, y_after)) <=
          1e-12 * (1 + std::hypot(x_after, y_after)));
    // The observation: qpos[2:], qvel, then the whole cinert, cvel,
    // qfrc_actuator and cfrc_ext of the data.
    std::vector<float> obs(376);
    t.observe(obs.data());
    std::vector<double> want(d->qpos + 2, d->qpos + 24);
    want.insert(want.end(), d->qvel, d->qvel + 23);
    want.insert(want.end(), d->cinert, d->cinert + 140);
    want.insert(want.end(), d->cvel, d->cvel + 84);
    want.insert(want.end(), d->qfrc_actuator, d->qfrc_actuator + 23);
    want.insert(want.end(), d->cfrc_ext, d->cfrc_ext + 84);
    REQUIRE(want.size() == 376);
    for (size_t i = 0; i < 376; ++i) {
      CAPTURE(i);
      CHECK(obs[i] == static_cast<float>(want[i]));
    }
    if (out.terminated) {
      ++ended;
      t.reset(r);
    }
  }
  CHECK(ended > 0); // random torques topple it within a few dozen steps
}

TEST_CASE("Humanoid-v4 resets to qpos0 plus U(-0.01, 0.01), the quaternion normalized, "
          "velocities U(-0.01, 0.01), and observes no contact forces yet") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  mujoco::humanoid t;
  rng r(seed);
  double lo = 1, hi = -1;
  for (int k = 0; k < 200; ++k) {
    t.reset(r);
    auto s = state_of(t);
    for (int i = 0; i < 24; ++i) {
      if (i >= 3 && i < 7)
        continue;
      const double noise = s[static_cast<size_t>(i)] - t.model().qpos0[i];
      CHECK(std::fabs(noise) <= 0.01);
    }
    const double* q = &s[3];
    CHECK(std::fabs(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3] - 1) < 1e-14);
    for (int k2 = 1; k2 < 4; ++k2)
      CHECK(std::fabs(q[k2] / q[0]) <= 0.01 / 0.99 + 1e-12);
    for (int i = 0; i < 23; ++i) {
      const double v = s[static_cast<size_t>(24 + i)];
      CHECK(std::fabs(v) <= 0.01);
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    // v4 observes after mj_resetData and mj_forward: cfrc_ext is still zero.
    std::vector<float> obs(376);
    t.observe(obs.data());
    for (size_t i = 376 - 84; i < 376; ++i)
      CHECK(obs[i] == 0.0f);
  }
  CHECK(lo < -0.009);
  CHECK(hi > 0.009);
}

TEST_CASE("Humanoid-v4 terminates when a step ends with the torso's z just outside "
          "(1, 2) and pays the healthy reward on that step") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  mujoco::humanoid t;
  rng r(seed);
  t.reset(r);
  const std::vector<float> zero(17, 0.0f);
  // In free fall, lying on its side so that nothing touches the floor.
  auto state = state_of(t);
  lay_down(state);
  for (double boundary : {1.0, 2.0}) {
    CAPTURE(boundary);
    // Both ends of (1, 2) are unhealthy.
    auto states = straddle(t.model(), state, 5, 2, boundary, boundary == 1.0,
                           boundary - 0.1, boundary + 0.1);
    t.set_state(states.first.data());
    auto below = t.step(zero.data());
    CHECK(below.terminated == (boundary == 1.0));
    CHECK(t.reward_alive == 5.0);
    t.set_state(states.second.data());
    auto above = t.step(zero.data());
    CHECK(above.terminated == (boundary == 2.0));
    CHECK(t.reward_alive == 5.0);
    CHECK(above.reward == (t.forward_reward + 5.0) - 0.0);
  }
}

TEST_CASE("Humanoid-v4 truncates at the 1000th step") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  auto e = make_env("Humanoid-v4").value();
  e->reset(seed);
  e->set_elapsed_steps(995);
  for (int t = 996; t <= 1000; ++t) {
    auto tr = e->step(std::vector<float>(17, 0.0f)).value();
    REQUIRE_FALSE(tr.terminated);
    CHECK(tr.truncated == (t == 1000));
  }
}

TEST_CASE("an Ant-v4 or Humanoid-v4 state restored into another instance continues bit "
          "for bit") {
  for (const std::string id : {"Ant-v4", "Humanoid-v4"}) {
    CAPTURE(id);
    const uint64_t seed = fresh_seed();
    CAPTURE(seed);
    std::mt19937_64 gen(seed);
    auto a = make_env(id).value(), b = make_env(id).value();
    const auto& as = a->spec().action_space;
    a->reset(seed);
    b->reset(seed + 1);
    std::vector<float> obs_a;
    for (int k = 0; k < 15; ++k) {
      obs_a = a->step(random_actions(as, 1, gen)).value().obs;
      REQUIRE(b->step(random_actions(as, 1, gen)));
    }
    const auto saved = a->state();
    std::vector<float> obs_b(obs_a.size());
    REQUIRE(b->set_state(saved, obs_b.data()));
    // qpos as given, quaternion included, and the values carried besides
    // (the position the next reward starts from; Humanoid's observed
    // cinert, cvel, qfrc_actuator and cfrc_ext).
    CHECK(b->state() == saved);
    CHECK(obs_b == obs_a);
    for (int k = 0; k < 20; ++k) {
      CAPTURE(k);
      auto action = random_actions(as, 1, gen);
      auto ta = a->step(action).value(), tb = b->step(action).value();
      CHECK(a->state() == b->state());
      CHECK(ta.obs == tb.obs);
      CHECK(ta.reward == tb.reward);
      CHECK(ta.terminated == tb.terminated);
    }
  }
}

TEST_CASE("numpy_sum adds in NumPy's pairwise order") {
  // Worked by hand in float32, where 2^24 + 1 rounds to 2^24: in sequence
  // the seven ones are lost; NumPy's eight partial sums add them in pairs
  // ((2^24 + 1) + (1 + 1)) + ((1 + 1) + (1 + 1)) = 2^24 + 2 + 4.
  const float eight[8] = {16777216.0f, 1, 1, 1, 1, 1, 1, 1};
  CHECK(mujoco::numpy_sum(eight, 8) == 16777222.0f);
  // Below eight values, in sequence: 2^24 + 1 + 1 + 1 = 2^24.
  CHECK(mujoco::numpy_sum(eight, 4) == 16777216.0f);
  // Past a multiple of eight the rest is added in sequence to the tree's
  // sum: 2^24 + 6 + 1 is a tie, which rounds to the even 2^24 + 8.
  const float nine[9] = {16777216.0f, 1, 1, 1, 1, 1, 1, 1, 1};
  CHECK(mujoco::numpy_sum(nine, 9) == 16777224.0f);
  // Any length, against a float64 sum.
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (int n = 0; n < 400; ++n) {
    std::vector<double> x(static_cast<size_t>(n));
    double sum = 0, sum_abs = 0;
    for (auto& v : x) {
      v = u(gen);
      sum += v;
      sum_abs += std::fabs(v);
    }
    CHECK(std::fabs(mujoco::numpy_sum(x.data(), n) - sum) <= 1e-13 * (1 + sum_abs));
  }
}

TEST_CASE("the float32 control cost is v4's: float32 squares summed in NumPy's order") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  // Beyond the bounds too: v4 takes the cost from the action as given.
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (int trial = 0; trial < 1000; ++trial) {
    float a[8];
    for (float& x : a)
      x = u(gen);
    float sq[8];
    for (int i = 0; i < 8; ++i)
      sq[i] = a[i] * a[i]; // np.square of a float32 array: float32
    // Below eight values np.sum adds in sequence, in float32.
    const float six = ((((sq[0] + sq[1]) + sq[2]) + sq[3]) + sq[4]) + sq[5];
    CHECK(mujoco::float32_control_cost<6>(0.1, a) == 0.1f * six);
    const float three = (sq[0] + sq[1]) + sq[2];
    CHECK(mujoco::float32_control_cost<3>(1e-3, a) == 1e-3f * three);
    const float two = sq[0] + sq[1];
    CHECK(mujoco::float32_control_cost<2>(1e-4, a) == 1e-4f * two);
    CHECK(mujoco::float32_control_cost<2>(1.0, a) == two);
    // Eight: the eight partial sums added as a tree.
    const float eight =
      ((sq[0] + sq[1]) + (sq[2] + sq[3])) + ((sq[4] + sq[5]) + (sq[6] + sq[7]));
    CHECK(mujoco::float32_control_cost<8>(0.5, a) == 0.5f * eight);
    // And within float32 rounding of the float64 cost.
    double exact = 0;
    for (int i = 0; i < 8; ++i)
      exact += static_cast<double>(a[i]) * static_cast<double>(a[i]);
    CHECK(std::fabs(mujoco::float32_control_cost<8>(0.5, a) - 0.5 * exact) <=
          1e-6 * 0.5 * exact);
  }
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
