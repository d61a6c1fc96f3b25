// Policy heads on float32 buffers (categorical and diagonal Gaussian, with
// backward passes) and PPO's per-row loss terms (CPU twins; the CUDA ones are
// in kernels/cuda/policy_heads.cu).
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/error.hpp"

namespace troupe::kernels {

/// Categorical head: log_softmax[rows x n] of logits, logp[r] of actions[r]
/// and entropy[r] = -sum p log p.
void categorical_forward(const float* logits, const int64_t* actions, size_t rows,
                         size_t n, float* log_softmax, float* logp,
                         float* entropy) noexcept;

/// d_logits[r, j] = d_logp[r] ([j == a_r] - p_j) - d_entropy[r] p_j (log p_j + H_r).
void categorical_backward(const float* log_softmax, const float* entropy,
                          const int64_t* actions, const float* d_logp,
                          const float* d_entropy, size_t rows, size_t n,
                          float* d_logits) noexcept;

/// Diagonal Gaussian: z = (a - mean) exp(-log_std) [rows x d],
/// logp[r] = sum_j -z^2/2 - log_std_j - log(2 pi)/2, entropy[r] =
/// sum_j 1/2 + log(2 pi)/2 + log_std_j.
void gaussian_forward(const float* mean, const float* log_std, const float* actions,
                      size_t rows, size_t d, float* z, float* logp,
                      float* entropy) noexcept;

/// d_mean[r, j] = d_logp[r] z exp(-log_std_j); per-row contributions to
/// dL/dlog_std: d_log_std_rows[r, j] = d_logp[r] (z^2 - 1) + d_entropy[r]
/// (summed over rows by the caller).
void gaussian_backward(const float* z, const float* log_std, const float* d_logp,
                       const float* d_entropy, size_t rows, size_t d, float* d_mean,
                       float* d_log_std_rows) noexcept;

/// PPO's constants for the per-row terms.
struct ppo_term_constants {
  float clip;           ///< c
  float vf_coef;        ///< value-loss weight
  float ent_coef;       ///< entropy weight
  float inv_rows;       ///< 1 / rows of the whole batch
  bool clip_value_loss; ///< clip the value loss
};

/// Per-row PPO terms: writes dL/dlogp, dL/dH, dL/dV and, in terms[r * 5 +
/// k], the row's policy loss, squared value error, entropy, approx-kl term
/// and clip indicator (means are taken by the caller).
void ppo_terms(const float* logp, const float* entropy, const float* value,
               const float* old_logp, const float* advantages, const float* returns,
               const float* old_values, size_t rows, const ppo_term_constants& c,
               float* d_logp, float* d_entropy, float* d_value, float* terms) noexcept;

/// The policy half of ppo_terms: dL/dlogp, dL/dH and the terms' columns 0, 2,
/// 3 and 4 (the actor's outputs alone; the same floats as ppo_terms).
void ppo_policy_terms(const float* logp, const float* entropy, const float* old_logp,
                      const float* advantages, size_t rows, const ppo_term_constants& c,
                      float* d_logp, float* d_entropy, float* terms) noexcept;

/// The value half of ppo_terms: dL/dV and the terms' column 1 (the critic's
/// outputs alone; the same floats as ppo_terms).
void ppo_value_terms(const float* value, const float* returns, const float* old_values,
                     size_t rows, const ppo_term_constants& c, float* d_value,
                     float* terms) noexcept;

/// CUDA twin of categorical_forward.
status cuda_categorical_forward_async(const float* logits, const int64_t* actions,
                                      size_t rows, size_t n, float* log_softmax,
                                      float* logp, float* entropy, void* stream) noexcept;
/// CUDA twin of categorical_backward.
status cuda_categorical_backward_async(const float* log_softmax, const float* entropy,
                                       const int64_t* actions, const float* d_logp,
                                       const float* d_entropy, size_t rows, size_t n,
                                       float* d_logits, void* stream) noexcept;
/// CUDA twin of gaussian_forward.
status cuda_gaussian_forward_async(const float* mean, const float* log_std,
                                   const float* actions, size_t rows, size_t d, float* z,
                                   float* logp, float* entropy, void* stream) noexcept;
/// CUDA twin of gaussian_backward.
status cuda_gaussian_backward_async(const float* z, const float* log_std,
                                    const float* d_logp, const float* d_entropy,
                                    size_t rows, size_t d, float* d_mean,
                                    float* d_log_std_rows, void* stream) noexcept;
/// CUDA twin of ppo_terms.
status cuda_ppo_terms_async(const float* logp, const float* entropy, const float* value,
                            const float* old_logp, const float* advantages,
                            const float* returns, const float* old_values, size_t rows,
                            const ppo_term_constants& c, float* d_logp, float* d_entropy,
                            float* d_value, float* terms, void* stream) noexcept;

} // namespace troupe::kernels
