#include "kernels/policy_heads.hpp"

#include <algorithm>
#include <cmath>

namespace troupe::kernels {

namespace {
constexpr float half_log_two_pi = 0.918938533204672742f;
} // namespace

void categorical_forward(const float* logits, const int64_t* actions, size_t rows,
                         size_t n, float* log_softmax, float* logp,
                         float* entropy) noexcept {
  for (size_t r = 0; r < rows; ++r) {
    const float* row = logits + r * n;
    float* out = log_softmax + r * n;
    const float top = *std::max_element(row, row + n);
    float total = 0.0f;
    for (size_t j = 0; j < n; ++j)
      total += std::exp(row[j] - top);
    const float log_total = top + std::log(total);
    float h = 0.0f;
    for (size_t j = 0; j < n; ++j) {
      out[j] = row[j] - log_total;
      h -= std::exp(out[j]) * out[j];
    }
    entropy[r] = h;
    logp[r] = out[actions[r]];
  }
}

void categorical_backward(const float* log_softmax, const float* entropy,
                          const int64_t* actions, const float* d_logp,
                          const float* d_entropy, size_t rows, size_t n,
                          float* d_logits) noexcept {
  for (size_t r = 0; r < rows; ++r) {
    const float* ls = log_softmax + r * n;
    float* out = d_logits + r * n;
    for (size_t j = 0; j < n; ++j) {
      const float p = std::exp(ls[j]);
      out[j] = -d_logp[r] * p - d_entropy[r] * p * (ls[j] + entropy[r]);
    }
    out[actions[r]] += d_logp[r];
  }
}

void gaussian_forward(const float* mean, const float* log_std, const float* actions,
                      size_t rows, size_t d, float* z, float* logp,
                      float* entropy) noexcept {
  float h = 0.0f, log_std_sum = 0.0f;
  for (size_t j = 0; j < d; ++j) {
    h += 0.5f + half_log_two_pi + log_std[j];
    log_std_sum += log_std[j];
  }
  for (size_t r = 0; r < rows; ++r) {
    float acc = 0.0f;
    for (size_t j = 0; j < d; ++j) {
      const float v = (actions[r * d + j] - mean[r * d + j]) * std::exp(-log_std[j]);
      z[r * d + j] = v;
      acc -= 0.5f * v * v;
    }
    logp[r] = acc - log_std_sum - static_cast<float>(d) * half_log_two_pi;
    entropy[r] = h;
  }
}

void gaussian_backward(const float* z, const float* log_std, const float* d_logp,
                       const float* d_entropy, size_t rows, size_t d, float* d_mean,
                       float* d_log_std_rows) noexcept {
  for (size_t r = 0; r < rows; ++r)
    for (size_t j = 0; j < d; ++j) {
      const float v = z[r * d + j];
      d_mean[r * d + j] = d_logp[r] * v * std::exp(-log_std[j]);
      d_log_std_rows[r * d + j] = d_logp[r] * (v * v - 1.0f) + d_entropy[r];
    }
}

void ppo_policy_terms(const float* logp, const float* entropy, const float* old_logp,
                      const float* advantages, size_t rows, const ppo_term_constants& c,
                      float* d_logp, float* d_entropy, float* terms) noexcept {
  for (size_t r = 0; r < rows; ++r) {
    const float log_ratio = logp[r] - old_logp[r];
    const float ratio = std::exp(log_ratio);
    const float adv = advantages[r];
    const float unclipped = -adv * ratio;
    const float clipped = -adv * std::clamp(ratio, 1.0f - c.clip, 1.0f + c.clip);
    const bool take_unclipped = unclipped >= clipped;
    d_logp[r] = take_unclipped ? -adv * ratio * c.inv_rows : 0.0f;
    d_entropy[r] = -c.ent_coef * c.inv_rows;
    float* t = terms + r * 5;
    t[0] = take_unclipped ? unclipped : clipped;
    t[2] = entropy[r];
    t[3] = (ratio - 1.0f) - log_ratio;
    t[4] = std::abs(ratio - 1.0f) > c.clip ? 1.0f : 0.0f;
  }
}

void ppo_value_terms(const float* value, const float* returns, const float* old_values,
                     size_t rows, const ppo_term_constants& c, float* d_value,
                     float* terms) noexcept {
  for (size_t r = 0; r < rows; ++r) {
    const float err = value[r] - returns[r];
    float sq = err * err;
    float dv = c.vf_coef * err * c.inv_rows;
    if (c.clip_value_loss) {
      const float delta = value[r] - old_values[r];
      const float err_clipped =
        old_values[r] + std::clamp(delta, -c.clip, c.clip) - returns[r];
      if (err_clipped * err_clipped > sq) {
        sq = err_clipped * err_clipped;
        dv =
          delta > -c.clip && delta < c.clip ? c.vf_coef * err_clipped * c.inv_rows : 0.0f;
      }
    }
    d_value[r] = dv;
    terms[r * 5 + 1] = sq;
  }
}

void ppo_terms(const float* logp, const float* entropy, const float* value,
               const float* old_logp, const float* advantages, const float* returns,
               const float* old_values, size_t rows, const ppo_term_constants& c,
               float* d_logp, float* d_entropy, float* d_value, float* terms) noexcept {
  // Each row's terms depend on that row alone, so the two halves may run apart.
  ppo_policy_terms(logp, entropy, old_logp, advantages, rows, c, d_logp, d_entropy,
                   terms);
  ppo_value_terms(value, returns, old_values, rows, c, d_value, terms);
}

} // namespace troupe::kernels
