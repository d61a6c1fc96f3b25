#include "learners/rollout.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace troupe::learners {

void compute_gae(size_t steps, size_t envs, const float* rewards,
                 const uint8_t* terminated, const uint8_t* truncated,
                 const uint8_t* autoreset, const float* values, double gamma,
                 double lambda, float* advantages, float* returns, uint8_t* valid) {
  std::vector<double> next_adv(envs, 0.0);
  for (size_t t = steps; t-- > 0;) {
    for (size_t e = 0; e < envs; ++e) {
      const size_t k = t * envs + e;
      if (autoreset[k]) {
        advantages[k] = 0;
        returns[k] = 0;
        valid[k] = 0;
        next_adv[e] = 0;
        continue;
      }
      const double v = values[k];
      const double v_next = values[k + envs];
      const bool term = terminated[k] != 0;
      const bool done = term || truncated[k] != 0;
      const double delta = rewards[k] + (term ? 0.0 : gamma * v_next) - v;
      const double adv = delta + (done ? 0.0 : gamma * lambda * next_adv[e]);
      next_adv[e] = adv;
      advantages[k] = static_cast<float>(adv);
      returns[k] = static_cast<float>(adv + v);
      valid[k] = 1;
    }
  }
}

void vtrace_inputs(size_t rows, const uint8_t* terminated, const uint8_t* autoreset,
                   const float* behavior_logp, double gamma, float* discounts,
                   float* masked_logp) {
  for (size_t k = 0; k < rows; ++k) {
    discounts[k] = terminated[k] || autoreset[k] ? 0.0f : static_cast<float>(gamma);
    masked_logp[k] = autoreset[k] ? vtrace_reset_logprob : behavior_logp[k];
  }
}

void sample_categorical(const float* logits, size_t rows, size_t n, base::rng& gen,
                        float* actions, float* logp, std::vector<double>& scratch) {
  scratch.resize(n); // each exp is computed once, for the sum and the draw
  double* e = scratch.data();
  for (size_t r = 0; r < rows; ++r) {
    const float* l = logits + r * n;
    const double top = *std::max_element(l, l + n);
    double total = 0;
    for (size_t j = 0; j < n; ++j) {
      e[j] = std::exp(l[j] - top);
      total += e[j];
    }
    double u = gen.unit() * total;
    size_t pick = n - 1;
    for (size_t j = 0; j < n; ++j) {
      u -= e[j];
      if (u < 0) {
        pick = j;
        break;
      }
    }
    actions[r] = static_cast<float>(pick);
    if (logp)
      logp[r] = static_cast<float>(l[pick] - top - std::log(total));
  }
}

void sample_categorical(const float* logits, size_t rows, size_t n, base::rng& gen,
                        float* actions, float* logp) {
  std::vector<double> scratch;
  sample_categorical(logits, rows, n, gen, actions, logp, scratch);
}

void most_likely_categorical(const float* logits, size_t rows, size_t n, float* actions) {
  for (size_t r = 0; r < rows; ++r) {
    const float* l = logits + r * n;
    actions[r] = static_cast<float>(std::max_element(l, l + n) - l);
  }
}

double standard_normal(base::rng& gen) {
  constexpr double two_pi = 6.283185307179586;
  double u1 = gen.unit();
  while (u1 <= 0)
    u1 = gen.unit();
  const double u2 = gen.unit();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(two_pi * u2);
}

void sample_gaussian(const float* mean, const float* log_std, size_t rows, size_t d,
                     base::rng& gen, float* actions, float* logp) {
  constexpr double half_log_two_pi = 0.91893853320467274;
  for (size_t r = 0; r < rows; ++r) {
    double lp = 0;
    for (size_t j = 0; j < d; ++j) {
      const double z = standard_normal(gen);
      actions[r * d + j] = static_cast<float>(mean[r * d + j] + std::exp(log_std[j]) * z);
      lp += -0.5 * z * z - log_std[j] - half_log_two_pi;
    }
    if (logp)
      logp[r] = static_cast<float>(lp);
  }
}

} // namespace troupe::learners
