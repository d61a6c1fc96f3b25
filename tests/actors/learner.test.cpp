// The learner's batch preparation: GAE over time-major batches with
// next-step autoreset, against a float64 reference written episode by
// episode; and the action samplers' log-probabilities.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "envs/rng.hpp"
#include "learners/rollout.hpp"

using namespace troupe;

namespace {

uint64_t fresh_seed() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) | device();
}

} // namespace

TEST_CASE("GAE over an autoreset batch matches a per-environment float64 recursion that "
          "bootstraps truncations and cuts at episode ends") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const size_t steps = 37, envs = 5;
  const double gamma = 0.9 + 0.09 * unit(gen), lambda = 0.8 + 0.2 * unit(gen);
  std::vector<float> rewards(steps * envs), values((steps + 1) * envs);
  std::vector<uint8_t> term(steps * envs, 0), trunc(steps * envs, 0),
    reset(steps * envs, 0);
  for (auto& v : values)
    v = static_cast<float>(unit(gen) * 4 - 2);
  for (size_t e = 0; e < envs; ++e) {
    bool was_done = false;
    for (size_t t = 0; t < steps; ++t) {
      const size_t k = t * envs + e;
      if (was_done) {
        reset[k] = 1; // next-step autoreset: a reset, reward 0
        was_done = false;
        continue;
      }
      rewards[k] = static_cast<float>(unit(gen));
      const double u = unit(gen);
      term[k] = u < 0.1;
      trunc[k] = !term[k] && u < 0.15;
      was_done = term[k] || trunc[k];
    }
  }
  std::vector<float> adv(steps * envs), ret(steps * envs);
  std::vector<uint8_t> valid(steps * envs);
  learners::compute_gae(steps, envs, rewards.data(), term.data(), trunc.data(),
                        reset.data(), values.data(), gamma, lambda, adv.data(),
                        ret.data(), valid.data());
  // Reference: forward over each environment, every advantage as the explicit
  // discounted sum of TD errors up to its episode's end (or the batch's end).
  for (size_t e = 0; e < envs; ++e) {
    for (size_t t = 0; t < steps; ++t) {
      const size_t k = t * envs + e;
      CAPTURE(t);
      CAPTURE(e);
      if (reset[k]) {
        CHECK(valid[k] == 0);
        continue;
      }
      CHECK(valid[k] == 1);
      double sum = 0, weight = 1;
      for (size_t u = t; u < steps; ++u) {
        const size_t j = u * envs + e;
        const double next = term[j] ? 0.0 : gamma * values[j + envs];
        sum += weight * (rewards[j] + next - values[j]);
        if (term[j] || trunc[j])
          break;
        weight *= gamma * lambda;
      }
      CHECK(adv[k] == doctest::Approx(sum).epsilon(1e-5));
      CHECK(ret[k] == doctest::Approx(sum + values[k]).epsilon(1e-5));
    }
  }
}

TEST_CASE("categorical sampling reports the log-softmax of the drawn action and draws "
          "with the softmax frequencies") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  envs::rng gen(seed);
  const float logits[3] = {0.3f, -1.2f, 1.1f};
  double total = 0;
  for (float l : logits)
    total += std::exp(static_cast<double>(l));
  std::vector<size_t> counts(3, 0);
  const size_t draws = 60000;
  for (size_t i = 0; i < draws; ++i) {
    float action = 0, logp = 0;
    learners::sample_categorical(logits, 1, 3, gen, &action, &logp);
    const auto a = static_cast<size_t>(action);
    REQUIRE(a < 3);
    counts[a] += 1;
    CHECK(logp == doctest::Approx(logits[a] - std::log(total)).epsilon(1e-5));
  }
  for (size_t a = 0; a < 3; ++a) {
    const double p = std::exp(static_cast<double>(logits[a])) / total;
    const double sd = std::sqrt(p * (1 - p) / draws);
    CHECK(std::abs(static_cast<double>(counts[a]) / draws - p) < 6 * sd);
  }
}

TEST_CASE("Gaussian sampling reports the log-density of the drawn action") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  envs::rng gen(seed);
  const float mean[2] = {0.5f, -1.5f}, log_std[2] = {-0.3f, 0.4f};
  for (int i = 0; i < 100; ++i) {
    float a[2], logp = 0;
    learners::sample_gaussian(mean, log_std, 1, 2, gen, a, &logp);
    double ref = 0;
    for (int j = 0; j < 2; ++j) {
      const double s = std::exp(static_cast<double>(log_std[j]));
      const double z = (a[j] - mean[j]) / s;
      ref += -0.5 * z * z - std::log(s) - 0.5 * std::log(2 * M_PI);
    }
    CHECK(logp == doctest::Approx(ref).epsilon(1e-4));
  }
}
