#include "learners/optimizer.hpp"
#include "tests/seed.hpp"

#include <cmath>
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
