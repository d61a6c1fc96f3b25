// IMPALA's inputs from next-step-autoreset batches: a reset step contributes
// neither a policy gradient nor a value error, the trace does not cross it,
// a terminated step is not bootstrapped and a truncated one is, with the
// value of its episode's last observation. Checked against a float64
// per-environment recursion written here that handles each case by hand.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "learners/losses.hpp"
#include "learners/rollout.hpp"
#include "tests/seed.hpp"

using namespace troupe;

TEST_CASE("V-trace over an autoreset batch skips reset steps, cuts at terminations and "
          "bootstraps truncations, as a float64 recursion written here does") {
  const uint64_t seed = test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const size_t steps = 40, envs = 6, rows = steps * envs;
  const double gamma = 0.97;
  const double gamma_f = static_cast<float>(gamma); // discounts travel as floats
  learners::vtrace_config cfg;
  cfg.rho_bar = 1.0;
  cfg.c_bar = 0.9;
  cfg.pg_rho_bar = 1.2;
  // Episodes end at random (terminated or truncated); the next step of that
  // environment is its reset.
  std::vector<uint8_t> terminated(rows, 0), truncated(rows, 0), autoreset(rows, 0);
  std::vector<float> rewards(rows), mu(rows);
  std::vector<double> values(rows), bootstrap(envs), pi(rows);
  for (size_t e = 0; e < envs; ++e) {
    bool reset_next = unit(gen) < 0.2;
    for (size_t t = 0; t < steps; ++t) {
      const size_t i = t * envs + e;
      autoreset[i] = reset_next;
      reset_next = false;
      if (!autoreset[i] && unit(gen) < 0.15) {
        (unit(gen) < 0.5 ? terminated[i] : truncated[i]) = 1;
        reset_next = true;
      }
      rewards[i] = autoreset[i] ? 0.0f : static_cast<float>(unit(gen) * 2 - 0.5);
      mu[i] = static_cast<float>(std::log(0.1 + 0.8 * unit(gen)));
      pi[i] = std::log(0.1 + 0.8 * unit(gen));
      values[i] = unit(gen) * 10 - 2;
    }
    bootstrap[e] = unit(gen) * 10 - 2;
  }
  std::vector<float> discounts(rows), masked(rows);
  learners::vtrace_inputs(rows, terminated.data(), autoreset.data(), mu.data(), gamma,
                          discounts.data(), masked.data());
  std::vector<double> log_rhos(rows), d_discounts(rows), d_rewards(rows);
  for (size_t i = 0; i < rows; ++i) {
    log_rhos[i] = pi[i] - static_cast<double>(masked[i]);
    d_discounts[i] = discounts[i];
    d_rewards[i] = rewards[i];
  }
  std::vector<double> vs(rows), pg(rows);
  learners::vtrace_targets<double>(steps, envs, log_rhos.data(), d_discounts.data(),
                                   d_rewards.data(), values.data(), bootstrap.data(), cfg,
                                   vs.data(), pg.data());
  size_t resets = 0, truncations = 0;
  for (size_t e = 0; e < envs; ++e) {
    std::vector<double> ref_vs(steps);
    double acc = 0; // vs_{t+1} - V(x_{t+1})
    for (size_t t = steps; t-- > 0;) {
      const size_t i = t * envs + e;
      if (autoreset[i]) {
        ref_vs[t] = values[i];
        acc = 0;
        continue;
      }
      const double rho = std::exp(pi[i] - mu[i]);
      const double next_value = t + 1 < steps ? values[i + envs] : bootstrap[e];
      const double disc = terminated[i] ? 0.0 : gamma_f; // truncation bootstraps
      const double delta =
        std::min(cfg.rho_bar, rho) * (rewards[i] + disc * next_value - values[i]);
      acc = delta + disc * std::min(cfg.c_bar, rho) * acc;
      ref_vs[t] = values[i] + acc;
    }
    for (size_t t = 0; t < steps; ++t) {
      const size_t i = t * envs + e;
      CAPTURE(e);
      CAPTURE(t);
      CHECK(vs[i] == doctest::Approx(ref_vs[t]).epsilon(1e-12));
      if (autoreset[i]) {
        ++resets;
        CHECK(std::fabs(pg[i]) < 1e-30); // no policy gradient on an ignored action
        continue;
      }
      truncations += truncated[i];
      const double rho = std::exp(pi[i] - mu[i]);
      const double next_vs = t + 1 < steps ? ref_vs[t + 1] : bootstrap[e];
      const double disc = terminated[i] ? 0.0 : gamma_f;
      const double ref_pg =
        std::min(cfg.pg_rho_bar, rho) * (rewards[i] + disc * next_vs - values[i]);
      CHECK(pg[i] == doctest::Approx(ref_pg).epsilon(1e-12));
    }
  }
  CHECK(resets > 0);
  CHECK(truncations > 0);
}
