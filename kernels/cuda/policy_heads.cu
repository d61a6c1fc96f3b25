// CUDA twin of kernels/cpu/policy_heads.cpp: one thread per row (heads are
// narrow: a few actions or action dimensions).
#include "kernels/cuda/launch.cuh"
#include "kernels/policy_heads.hpp"

namespace troupe::kernels {

namespace {

constexpr float half_log_two_pi = 0.918938533204672742f;

#define TROUPE_ROWS_LOOP(r, rows)                                                        \
  for (size_t r = blockIdx.x * size_t{blockDim.x} + threadIdx.x; r < (rows);             \
       r += size_t{gridDim.x} * blockDim.x)

__global__ void categorical_forward_kernel(const float* logits, const int64_t* actions,
                                           size_t rows, size_t n, float* log_softmax,
                                           float* logp, float* entropy) {
  TROUPE_ROWS_LOOP(r, rows) {
    const float* row = logits + r * n;
    float* out = log_softmax + r * n;
    float top = row[0];
    for (size_t j = 1; j < n; ++j)
      top = fmaxf(top, row[j]);
    float total = 0.0f;
    for (size_t j = 0; j < n; ++j)
      total += expf(row[j] - top);
    const float log_total = top + logf(total);
    float h = 0.0f;
    for (size_t j = 0; j < n; ++j) {
      out[j] = row[j] - log_total;
      h -= expf(out[j]) * out[j];
    }
    entropy[r] = h;
    logp[r] = out[actions[r]];
  }
}

__global__ void categorical_backward_kernel(const float* log_softmax,
                                            const float* entropy, const int64_t* actions,
                                            const float* d_logp, const float* d_entropy,
                                            size_t rows, size_t n, float* d_logits) {
  TROUPE_ROWS_LOOP(r, rows) {
    const float* ls = log_softmax + r * n;
    float* out = d_logits + r * n;
    for (size_t j = 0; j < n; ++j) {
      const float p = expf(ls[j]);
      out[j] = -d_logp[r] * p - d_entropy[r] * p * (ls[j] + entropy[r]);
    }
    out[actions[r]] += d_logp[r];
  }
}

__global__ void gaussian_forward_kernel(const float* mean, const float* log_std,
                                        const float* actions, size_t rows, size_t d,
                                        float* z, float* logp, float* entropy) {
  TROUPE_ROWS_LOOP(r, rows) {
    float acc = 0.0f, h = 0.0f, log_std_sum = 0.0f;
    for (size_t j = 0; j < d; ++j) {
      const float v = (actions[r * d + j] - mean[r * d + j]) * expf(-log_std[j]);
      z[r * d + j] = v;
      acc -= 0.5f * v * v;
      h += 0.5f + half_log_two_pi + log_std[j];
      log_std_sum += log_std[j];
    }
    logp[r] = acc - log_std_sum - static_cast<float>(d) * half_log_two_pi;
    entropy[r] = h;
  }
}

__global__ void gaussian_backward_kernel(const float* z, const float* log_std,
                                         const float* d_logp, const float* d_entropy,
                                         size_t rows, size_t d, float* d_mean,
                                         float* d_log_std_rows) {
  TROUPE_ROWS_LOOP(r, rows) {
    for (size_t j = 0; j < d; ++j) {
      const float v = z[r * d + j];
      d_mean[r * d + j] = d_logp[r] * v * expf(-log_std[j]);
      d_log_std_rows[r * d + j] = d_logp[r] * (v * v - 1.0f) + d_entropy[r];
    }
  }
}

__global__ void ppo_terms_kernel(const float* logp, const float* entropy,
                                 const float* value, const float* old_logp,
                                 const float* advantages, const float* returns,
                                 const float* old_values, size_t rows,
                                 ppo_term_constants c, float* d_logp, float* d_entropy,
                                 float* d_value, float* terms) {
  TROUPE_ROWS_LOOP(r, rows) {
    const float log_ratio = logp[r] - old_logp[r];
    const float ratio = expf(log_ratio);
    const float adv = advantages[r];
    const float unclipped = -adv * ratio;
    const float clipped = -adv * fminf(fmaxf(ratio, 1.0f - c.clip), 1.0f + c.clip);
    const bool take_unclipped = unclipped >= clipped;
    d_logp[r] = take_unclipped ? -adv * ratio * c.inv_rows : 0.0f;
    const float err = value[r] - returns[r];
    float sq = err * err;
    float dv = c.vf_coef * err * c.inv_rows;
    if (c.clip_value_loss) {
      const float delta = value[r] - old_values[r];
      const float err_clipped =
        old_values[r] + fminf(fmaxf(delta, -c.clip), c.clip) - returns[r];
      if (err_clipped * err_clipped > sq) {
        sq = err_clipped * err_clipped;
        dv =
          delta > -c.clip && delta < c.clip ? c.vf_coef * err_clipped * c.inv_rows : 0.0f;
      }
    }
    d_value[r] = dv;
    d_entropy[r] = -c.ent_coef * c.inv_rows;
    float* t = terms + r * 5;
    t[0] = take_unclipped ? unclipped : clipped;
    t[1] = sq;
    t[2] = entropy[r];
    t[3] = (ratio - 1.0f) - log_ratio;
    t[4] = fabsf(ratio - 1.0f) > c.clip ? 1.0f : 0.0f;
  }
}

cudaStream_t as_stream(void* s) {
  return static_cast<cudaStream_t>(s);
}

} // namespace

using cuda_detail::block_threads;
using cuda_detail::grid_for;
using cuda_detail::launch_status;

status cuda_categorical_forward_async(const float* logits, const int64_t* actions,
                                      size_t rows, size_t n, float* log_softmax,
                                      float* logp, float* entropy,
                                      void* stream) noexcept {
  if (rows == 0)
    return ok_status();
  categorical_forward_kernel<<<grid_for(rows), block_threads, 0, as_stream(stream)>>>(
    logits, actions, rows, n, log_softmax, logp, entropy);
  return launch_status("categorical_forward");
}

status cuda_categorical_backward_async(const float* log_softmax, const float* entropy,
                                       const int64_t* actions, const float* d_logp,
                                       const float* d_entropy, size_t rows, size_t n,
                                       float* d_logits, void* stream) noexcept {
  if (rows == 0)
    return ok_status();
  categorical_backward_kernel<<<grid_for(rows), block_threads, 0, as_stream(stream)>>>(
    log_softmax, entropy, actions, d_logp, d_entropy, rows, n, d_logits);
  return launch_status("categorical_backward");
}

status cuda_gaussian_forward_async(const float* mean, const float* log_std,
                                   const float* actions, size_t rows, size_t d, float* z,
                                   float* logp, float* entropy, void* stream) noexcept {
  if (rows == 0)
    return ok_status();
  gaussian_forward_kernel<<<grid_for(rows), block_threads, 0, as_stream(stream)>>>(
    mean, log_std, actions, rows, d, z, logp, entropy);
  return launch_status("gaussian_forward");
}

status cuda_gaussian_backward_async(const float* z, const float* log_std,
                                    const float* d_logp, const float* d_entropy,
                                    size_t rows, size_t d, float* d_mean,
                                    float* d_log_std_rows, void* stream) noexcept {
  if (rows == 0)
    return ok_status();
  gaussian_backward_kernel<<<grid_for(rows), block_threads, 0, as_stream(stream)>>>(
    z, log_std, d_logp, d_entropy, rows, d, d_mean, d_log_std_rows);
  return launch_status("gaussian_backward");
}

status cuda_ppo_terms_async(const float* logp, const float* entropy, const float* value,
                            const float* old_logp, const float* advantages,
                            const float* returns, const float* old_values, size_t rows,
                            const ppo_term_constants& c, float* d_logp, float* d_entropy,
                            float* d_value, float* terms, void* stream) noexcept {
  if (rows == 0)
    return ok_status();
  ppo_terms_kernel<<<grid_for(rows), block_threads, 0, as_stream(stream)>>>(
    logp, entropy, value, old_logp, advantages, returns, old_values, rows, c, d_logp,
    d_entropy, d_value, terms);
  return launch_status("ppo_terms");
}

} // namespace troupe::kernels
