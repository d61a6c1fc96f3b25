#include "learners/optimizer.hpp"
#include "tests/seed.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include <doctest/doctest.h>

using namespace troupe::learners;
using troupe::test::fresh_seed;

TEST_CASE("Adam follows PyTorch's update with bias correction and eps after the root") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  const size_t n = 1000;
  adam_config config;
  config.lr = 1e-2;
  config.beta1 = 0.85;
  config.beta2 = 0.99;
  config.eps = 1e-6;
  adam_optimizer opt(n, config);
  std::vector<float> p(n);
  std::vector<double> p64(n), m64(n, 0.0), v64(n, 0.0);
  for (size_t i = 0; i < n; ++i)
    p64[i] = p[i] = static_cast<float>(normal(rng));
  for (int t = 1; t <= 25; ++t) {
    std::vector<float> g(n);
    for (auto& x : g)
      x = static_cast<float>(normal(rng) * (t % 3 == 0 ? 1e-4 : 1.0));
    double lr = linear_lr(config.lr, t, 25);
    opt.step(p.data(), g.data(), lr);
    for (size_t i = 0; i < n; ++i) {
      m64[i] = config.beta1 * m64[i] + (1 - config.beta1) * g[i];
      v64[i] = config.beta2 * v64[i] + (1 - config.beta2) * g[i] * g[i];
      double m_hat_step = lr / (1 - std::pow(config.beta1, t));
      double denom =
        std::sqrt(v64[i]) / std::sqrt(1 - std::pow(config.beta2, t)) + config.eps;
      p64[i] -= m_hat_step * m64[i] / denom;
    }
  }
  CHECK(opt.steps() == 25);
  for (size_t i = 0; i < n; ++i) {
    CAPTURE(i);
    CHECK(std::abs(p[i] - p64[i]) <= 1e-5 * std::max(1.0, std::abs(p64[i])));
    // m sums terms of size ~1 that may cancel: compare on that scale.
    CHECK(std::abs(opt.first_moment()[i] - m64[i]) <= 1e-6);
  }
}

TEST_CASE("clipping by global norm scales only gradients above the limit") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> g(300);
  for (auto& x : g)
    x = normal(rng);
  double norm64 = 0;
  for (auto x : g)
    norm64 += static_cast<double>(x) * x;
  norm64 = std::sqrt(norm64);
  auto original = g;
  double reported = clip_grad_norm(g.data(), g.size(), norm64 * 2);
  CHECK(reported == doctest::Approx(norm64).epsilon(1e-12));
  CHECK(g == original);
  clip_grad_norm(g.data(), g.size(), 0.5);
  double scale = 0.5 / (norm64 + 1e-6);
  for (size_t i = 0; i < g.size(); ++i)
    CHECK(g[i] == doctest::Approx(original[i] * scale).epsilon(1e-6));
  CHECK(global_norm(g.data(), g.size()) == doctest::Approx(0.5).epsilon(1e-5));
}

TEST_CASE("the learning rate anneals linearly from lr0 to lr0 / total") {
  CHECK(linear_lr(3e-4, 1, 100) == doctest::Approx(3e-4));
  CHECK(linear_lr(3e-4, 51, 100) == doctest::Approx(1.5e-4));
  CHECK(linear_lr(3e-4, 100, 100) == doctest::Approx(3e-6));
}

TEST_CASE("an Adam step taken in ranges by begin_step and apply_range is step() bit for "
          "bit, whatever the cuts") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t n = 1 + rng() % 5000;
  CAPTURE(n);
  adam_config config;
  config.eps = 1e-5;
  adam_optimizer whole(n, config), parts(n, config);
  std::vector<float> p(n);
  for (auto& x : p)
    x = normal(rng);
  std::vector<float> q = p;
  for (int t = 1; t <= 10; ++t) {
    std::vector<float> g(n);
    for (auto& x : g)
      x = normal(rng) * (t % 4 == 0 ? 1e-6f : 1.0f);
    const double lr = 1e-3 * t;
    whole.step(p.data(), g.data(), lr);
    // Cuts anywhere (vector bodies and scalar tails of any length), applied
    // in any order.
    std::vector<size_t> cuts{0, n};
    for (int c = 0; c < 3; ++c)
      cuts.push_back(rng() % (n + 1));
    std::sort(cuts.begin(), cuts.end());
    const auto hyper = parts.begin_step(lr);
    CHECK(hyper.step == t);
    for (size_t k = cuts.size() - 1; k-- > 0;)
      parts.apply_range(q.data(), g.data(), hyper, cuts[k], cuts[k + 1]);
  }
  CHECK(parts.steps() == whole.steps());
  CHECK(std::memcmp(q.data(), p.data(), n * sizeof(float)) == 0);
  CHECK(std::memcmp(parts.first_moment().data(), whole.first_moment().data(),
                    n * sizeof(float)) == 0);
  CHECK(std::memcmp(parts.second_moment().data(), whole.second_moment().data(),
                    n * sizeof(float)) == 0);
}
