// Hand-checked transitions: each environment's step against a float64
// reference written here from Gymnasium's equations, from random states, and
// the termination and truncation edges.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "envs/registry.hpp"
#include "tests/seed.hpp"

using namespace troupe::envs;
using troupe::test::fresh_seed;

namespace {

constexpr double pi = 3.14159265358979323846;

double uniform(std::mt19937_64& gen, double lo, double hi) {
  return std::uniform_real_distribution<double>(lo, hi)(gen);
}

bool close(double got, double want, double rel, double abs = 0) {
  return std::fabs(got - want) <= abs + rel * std::fabs(want);
}

struct reference_step {
  std::vector<double> state;
  std::vector<double> obs;
  double reward;
  bool terminated;
};

// Steps `id` from `state` with `action` through the library.
transition library_step(const std::string& id, const std::vector<double>& state,
                        std::vector<float> action) {
  auto e = make_env(id).value();
  e->set_clip_box_actions(true);
  REQUIRE(e->set_state(state));
  return e->step(action).value();
}

void check_step(const std::string& id, const std::vector<double>& state,
                std::vector<float> action, const reference_step& want, double rel,
                double abs) {
  auto e = make_env(id).value();
  e->set_clip_box_actions(true);
  REQUIRE(e->set_state(state));
  auto got = e->step(action).value();
  auto got_state = e->state();
  REQUIRE(got_state.size() == want.state.size());
  for (size_t i = 0; i < want.state.size(); ++i) {
    CAPTURE(i);
    CAPTURE(got_state[i]);
    CAPTURE(want.state[i]);
    CHECK(close(got_state[i], want.state[i], rel, abs));
  }
  REQUIRE(got.obs.size() == want.obs.size());
  for (size_t i = 0; i < want.obs.size(); ++i) {
    CAPTURE(i);
    CAPTURE(got.obs[i]);
    CAPTURE(want.obs[i]);
    CHECK(close(got.obs[i], want.obs[i], 1e-6, 1e-7));
  }
  CAPTURE(got.reward);
  CAPTURE(want.reward);
  CHECK(close(got.reward, want.reward, 1e-6, 1e-9));
  CHECK(got.terminated == want.terminated);
  CHECK_FALSE(got.truncated);
}

// -- float64 references ------------------------------------------------------

// Cart-pole (Florian 2007, Gymnasium's cartpole.py), explicit Euler.
reference_step cartpole_reference(const std::vector<double>& s, int action) {
  const double g = 9.8, mc = 1.0, mp = 0.1, half_len = 0.5, f_mag = 10.0, dt = 0.02;
  double x = s[0], v = s[1], th = s[2], w = s[3];
  double f = action == 1 ? f_mag : -f_mag;
  double m = mc + mp;
  double tmp = (f + mp * half_len * w * w * std::sin(th)) / m;
  double alpha = (g * std::sin(th) - std::cos(th) * tmp) /
                 (half_len * (4.0 / 3.0 - mp * std::cos(th) * std::cos(th) / m));
  double acc = tmp - mp * half_len * alpha * std::cos(th) / m;
  std::vector<double> n = {x + dt * v, v + dt * acc, th + dt * w, w + dt * alpha};
  bool done = std::fabs(n[0]) > 2.4 || std::fabs(n[2]) > 12 * 2 * pi / 360;
  return {n, n, 1.0, done};
}

reference_step pendulum_reference(const std::vector<double>& s, double u) {
  double th = s[0], w = s[1];
  u = std::fmin(std::fmax(u, -2.0), 2.0);
  double a = std::remainder(th, 2 * pi); // in [-pi, pi]
  double cost = a * a + 0.1 * w * w + 0.001 * u * u;
  double nw = w + (3 * 10.0 / 2.0 * std::sin(th) + 3.0 * u) * 0.05;
  nw = std::fmin(std::fmax(nw, -8.0), 8.0);
  double nth = th + nw * 0.05;
  return {{nth, nw}, {std::cos(nth), std::sin(nth), nw}, -cost, false};
}

reference_step mountain_car_reference(const std::vector<double>& s, int action) {
  double p = s[0], v = s[1];
  v = v + (action - 1) * 0.001 - 0.0025 * std::cos(3 * p);
  v = std::fmin(std::fmax(v, -0.07), 0.07);
  p = std::fmin(std::fmax(p + v, -1.2), 0.6);
  if (p == -1.2 && v < 0)
    v = 0;
  bool done = p >= 0.5 && v >= 0;
  return {{p, v}, {p, v}, -1.0, done};
}

reference_step continuous_car_reference(const std::vector<double>& s, double a) {
  double p = s[0], v = s[1];
  double force = std::fmin(std::fmax(a, -1.0), 1.0);
  v = v + force * 0.0015 - 0.0025 * std::cos(3 * p);
  v = std::fmin(std::fmax(v, -0.07), 0.07);
  p = std::fmin(std::fmax(p + v, -1.2), 0.6);
  if (p == -1.2 && v < 0)
    v = 0;
  bool done = p >= 0.45 && v >= 0;
  double reward = (done ? 100.0 : 0.0) - 0.1 * a * a;
  // Gymnasium keeps this state as float32.
  p = static_cast<float>(p);
  v = static_cast<float>(v);
  return {{p, v}, {p, v}, reward, done};
}

// Acrobot, Sutton and Barto's book equations, one classical RK4 step.
std::vector<double> acrobot_derivative(const std::vector<double>& y, double tau) {
  const double m1 = 1, m2 = 1, l1 = 1, lc1 = 0.5, lc2 = 0.5, i1 = 1, i2 = 1, g = 9.8;
  double t1 = y[0], t2 = y[1], w1 = y[2], w2 = y[3];
  double d1 =
    m1 * lc1 * lc1 + m2 * (l1 * l1 + lc2 * lc2 + 2 * l1 * lc2 * std::cos(t2)) + i1 + i2;
  double d2 = m2 * (lc2 * lc2 + l1 * lc2 * std::cos(t2)) + i2;
  double phi2 = m2 * lc2 * g * std::sin(t1 + t2); // cos(a - pi/2) = sin(a)
  double phi1 = -m2 * l1 * lc2 * w2 * w2 * std::sin(t2) -
                2 * m2 * l1 * lc2 * w2 * w1 * std::sin(t2) +
                (m1 * lc1 + m2 * l1) * g * std::sin(t1) + phi2;
  double a2 = (tau + d2 / d1 * phi1 - m2 * l1 * lc2 * w1 * w1 * std::sin(t2) - phi2) /
              (m2 * lc2 * lc2 + i2 - d2 * d2 / d1);
  double a1 = -(d2 * a2 + phi1) / d1;
  return {w1, w2, a1, a2};
}

reference_step acrobot_reference(const std::vector<double>& s, int action) {
  double tau = action - 1.0, h = 0.2;
  auto axpy = [](const std::vector<double>& y, double c, const std::vector<double>& k) {
    std::vector<double> out(4);
    for (int j = 0; j < 4; ++j)
      out[j] = y[j] + c * k[j];
    return out;
  };
  auto k1 = acrobot_derivative(s, tau);
  auto k2 = acrobot_derivative(axpy(s, h / 2, k1), tau);
  auto k3 = acrobot_derivative(axpy(s, h / 2, k2), tau);
  auto k4 = acrobot_derivative(axpy(s, h, k3), tau);
  std::vector<double> n(4);
  for (int j = 0; j < 4; ++j)
    n[j] = s[j] + h / 6 * (k1[j] + 2 * k2[j] + 2 * k3[j] + k4[j]);
  for (int j = 0; j < 2; ++j) {
    while (n[j] > pi)
      n[j] -= 2 * pi;
    while (n[j] < -pi)
      n[j] += 2 * pi;
  }
  n[2] = std::fmin(std::fmax(n[2], -4 * pi), 4 * pi);
  n[3] = std::fmin(std::fmax(n[3], -9 * pi), 9 * pi);
  bool done = -std::cos(n[0]) - std::cos(n[1] + n[0]) > 1.0;
  return {n,
          {std::cos(n[0]), std::sin(n[0]), std::cos(n[1]), std::sin(n[1]), n[2], n[3]},
          done ? 0.0 : -1.0,
          done};
}

} // namespace

// -- random states -------------------------------------------------------------

TEST_CASE("CartPole transitions match the float64 cart-pole equations") {
  uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  for (int k = 0; k < 500; ++k) {
    std::vector<double> s = {uniform(gen, -2.4, 2.4), uniform(gen, -3, 3),
                             uniform(gen, -0.2, 0.2), uniform(gen, -3, 3)};
    int action = k % 2;
    CAPTURE(s[0]);
    CAPTURE(s[1]);
    CAPTURE(s[2]);
    CAPTURE(s[3]);
    check_step("CartPole-v1", s, {static_cast<float>(action)},
               cartpole_reference(s, action), 1e-13, 1e-15);
  }
}

TEST_CASE("Pendulum transitions match the float64 pendulum equations") {
  uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  for (int k = 0; k < 500; ++k) {
    std::vector<double> s = {uniform(gen, -10, 10), uniform(gen, -8, 8)};
    float u = static_cast<float>(uniform(gen, -3, 3)); // beyond the bounds: clipped
    CAPTURE(s[0]);
    CAPTURE(s[1]);
    CAPTURE(u);
    // The torque is float32 in Gymnasium; products with it are float32.
    check_step("Pendulum-v1", s, {u}, pendulum_reference(s, u), 1e-7, 5e-8);
  }
}

TEST_CASE("MountainCar transitions match the float64 mountain-car equations") {
  uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  for (int k = 0; k < 500; ++k) {
    std::vector<double> s = {uniform(gen, -1.2, 0.6), uniform(gen, -0.07, 0.07)};
    int action = k % 3;
    CAPTURE(s[0]);
    CAPTURE(s[1]);
    CAPTURE(action);
    check_step("MountainCar-v0", s, {static_cast<float>(action)},
               mountain_car_reference(s, action), 1e-13, 1e-16);
  }
}

TEST_CASE("MountainCarContinuous transitions match the float64 equations") {
  uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  for (int k = 0; k < 500; ++k) {
    std::vector<double> s = {uniform(gen, -1.2, 0.6), uniform(gen, -0.07, 0.07)};
    float a = static_cast<float>(uniform(gen, -1.5, 1.5));
    CAPTURE(s[0]);
    CAPTURE(s[1]);
    CAPTURE(a);
    // Float32 state: one float32 rounding apart at most.
    check_step("MountainCarContinuous-v0", s, {a}, continuous_car_reference(s, a), 2e-7,
               1e-9);
  }
}

TEST_CASE("Acrobot transitions match an RK4 step of the book's equations") {
  uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  for (int k = 0; k < 500; ++k) {
    std::vector<double> s = {uniform(gen, -pi, pi), uniform(gen, -pi, pi),
                             uniform(gen, -4 * pi, 4 * pi),
                             uniform(gen, -9 * pi, 9 * pi)};
    int action = k % 3;
    CAPTURE(s[0]);
    CAPTURE(s[1]);
    CAPTURE(s[2]);
    CAPTURE(s[3]);
    CAPTURE(action);
    check_step("Acrobot-v1", s, {static_cast<float>(action)},
               acrobot_reference(s, action), 1e-10, 1e-11);
  }
}

// -- edges ---------------------------------------------------------------------

TEST_CASE("CartPole terminates strictly beyond the cart position and pole angle limits") {
  const double theta_limit = 12 * 2 * pi / 360;
  // Exactly at a limit with no velocity stays in; any motion beyond it ends.
  CHECK_FALSE(library_step("CartPole-v1", {2.4, 0, 0, 0}, {1}).terminated);
  CHECK(library_step("CartPole-v1", {2.4, 1e-3, 0, 0}, {1}).terminated);
  CHECK(library_step("CartPole-v1", {-2.4, -1e-3, 0, 0}, {0}).terminated);
  CHECK_FALSE(library_step("CartPole-v1", {0, 0, theta_limit, 0}, {1}).terminated);
  CHECK(library_step("CartPole-v1", {0, 0, theta_limit, 1e-3}, {1}).terminated);
  CHECK(library_step("CartPole-v1", {0, 0, -theta_limit, -1e-3}, {0}).terminated);
}

TEST_CASE("CartPole rewards 1 on the terminating step and 0 on steps after it") {
  auto e = make_env("CartPole-v1").value();
  REQUIRE(e->set_state({2.39, 1.0, 0, 0}));
  auto last = e->step({1.0f}).value();
  CHECK(last.terminated);
  CHECK(last.reward == 1.0);
  auto after = e->step({1.0f}).value();
  CHECK(after.terminated);
  CHECK(after.reward == 0.0);
  e->reset(7);
  CHECK(e->step({1.0f}).value().reward == 1.0);
}

TEST_CASE("MountainCar terminates at the goal only with a non-negative velocity") {
  // Reaches 0.5 moving right: the goal.
  auto up = library_step("MountainCar-v0", {0.49, 0.02}, {2});
  CHECK(up.terminated);
  CHECK(up.reward == -1.0);
  // Beyond 0.5 but moving left: not the goal.
  auto e = make_env("MountainCar-v0").value();
  REQUIRE(e->set_state({0.55, -0.001}));
  auto back = e->step({0.0f}).value();
  CHECK(e->state()[0] >= 0.5);
  CHECK(e->state()[1] < 0);
  CHECK_FALSE(back.terminated);
}

TEST_CASE("MountainCar's left wall stops the car inelastically") {
  auto e = make_env("MountainCar-v0").value();
  REQUIRE(e->set_state({-1.19, -0.05}));
  e->step({0.0f}).value();
  CHECK(e->state()[0] == -1.2);
  CHECK(e->state()[1] == 0.0);
  REQUIRE(e->set_state({-1.1, 0.09}));
  e->step({2.0f}).value();
  CHECK(e->state()[1] == 0.07); // velocity clipped
}

TEST_CASE("MountainCarContinuous pays 100 at the goal and charges the unclipped action") {
  auto goal = library_step("MountainCarContinuous-v0", {0.44, 0.02}, {0.5f});
  CHECK(goal.terminated);
  CHECK(close(goal.reward, 100.0 - 0.1 * 0.25, 1e-12));
  auto e = make_env("MountainCarContinuous-v0").value();
  e->set_clip_box_actions(true);
  REQUIRE(e->set_state({-0.5, 0.0}));
  auto big = e->step({3.0f}).value();
  CHECK_FALSE(big.terminated);
  CHECK(close(big.reward, -0.1 * 9.0, 1e-12));
  // The force is clipped to 1: the same velocity as action 1.
  auto one = library_step("MountainCarContinuous-v0", {-0.5, 0.0}, {1.0f});
  CHECK(e->state()[1] == doctest::Approx(one.obs[1]).epsilon(1e-6));
  CHECK(e->state()[1] == doctest::Approx(0.0015 - 0.0025 * std::cos(-1.5)).epsilon(1e-6));
}

TEST_CASE("Acrobot terminates when the tip rises above the height of one link") {
  auto up = library_step("Acrobot-v1", {pi - 0.01, 0.0, 0.0, 0.0}, {1});
  CHECK(up.terminated);
  CHECK(up.reward == 0.0);
  auto down = library_step("Acrobot-v1", {0.0, 0.0, 0.0, 0.0}, {1});
  CHECK_FALSE(down.terminated);
  CHECK(down.reward == -1.0);
  // Both links horizontal (tip at height 0 relative to... the pivot) stay in.
  auto level = library_step("Acrobot-v1", {pi / 2, 0.0, 0.0, 0.0}, {1});
  CHECK_FALSE(level.terminated);
}

TEST_CASE("Acrobot wraps angles into [-pi, pi] and bounds angular velocities") {
  uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  auto e = make_env("Acrobot-v1").value();
  for (int k = 0; k < 200; ++k) {
    std::vector<double> s = {uniform(gen, -pi, pi), uniform(gen, -pi, pi),
                             uniform(gen, -4 * pi, 4 * pi),
                             uniform(gen, -9 * pi, 9 * pi)};
    REQUIRE(e->set_state(s));
    e->step({static_cast<float>(k % 3)}).value();
    auto n = e->state();
    CHECK(std::fabs(n[0]) <= pi);
    CHECK(std::fabs(n[1]) <= pi);
    CHECK(std::fabs(n[2]) <= 4 * pi);
    CHECK(std::fabs(n[3]) <= 9 * pi);
  }
}

TEST_CASE("initial states follow Gymnasium's uniform ranges") {
  std::random_device device;
  uint64_t seed = device();
  CAPTURE(seed);
  struct range {
    const char* id;
    std::vector<double> lo, hi;
  };
  std::vector<range> ranges = {
    {"CartPole-v1", {-0.05, -0.05, -0.05, -0.05}, {0.05, 0.05, 0.05, 0.05}},
    {"Pendulum-v1", {-pi, -1}, {pi, 1}},
    {"MountainCar-v0", {-0.6, 0}, {-0.4, 0}},
    {"MountainCarContinuous-v0", {-0.6, 0}, {-0.4, 0}},
    {"Acrobot-v1", {-0.1, -0.1, -0.1, -0.1}, {0.1, 0.1, 0.1, 0.1}},
  };
  for (auto& r : ranges) {
    CAPTURE(r.id);
    auto e = make_env(r.id).value();
    std::vector<double> mean(r.lo.size(), 0.0);
    const int n = 4000;
    for (int k = 0; k < n; ++k) {
      e->reset(seed + k);
      auto s = e->state();
      for (size_t j = 0; j < s.size(); ++j) {
        CHECK(s[j] >= static_cast<float>(r.lo[j]) - 1e-9);
        CHECK(s[j] <= static_cast<float>(r.hi[j]) + 1e-9);
        mean[j] += s[j] / n;
      }
    }
    // A uniform mean is within 5 standard errors of the midpoint.
    for (size_t j = 0; j < mean.size(); ++j) {
      double width = r.hi[j] - r.lo[j];
      CHECK(std::fabs(mean[j] - (r.lo[j] + r.hi[j]) / 2) <=
            5 * width / std::sqrt(12.0 * n) + 1e-12);
    }
  }
}

TEST_CASE("Acrobot's initial state is rounded to float32 as Gymnasium's reset does") {
  auto e = make_env("Acrobot-v1").value();
  e->reset(123);
  for (double v : e->state())
    CHECK(v == static_cast<double>(static_cast<float>(v)));
}
