// Device-side pieces of a PPO update that the host enqueues whole and reads
// once: gathering a minibatch by index at a cursor the device advances,
// normalizing its advantages, and Adam steps whose clipping norm, step count,
// skip decision and loss records stay on the device. With the cursor on the
// device, one minibatch's work is the same for every minibatch of its size,
// so it is captured once as a CUDA graph and replayed (docs/learners.md,
// "Whole updates on the GPU").
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/error.hpp"

namespace troupe::kernels {

/// The controls of a run of clipped Adam steps on the device: the host sets
/// the settings, the step count and zero cursors before an update; each
/// minibatch advances them.
struct device_step_control {
  double lr = 0;               ///< learning rate of every step
  double max_grad_norm = 0;    ///< clipping threshold (<= 0: no clipping)
  double beta1 = 0.9;          ///< Adam's first-moment decay
  double beta2 = 0.999;        ///< Adam's second-moment decay
  double eps = 1e-8;           ///< Adam's epsilon
  int64_t step = 0;            ///< Adam steps taken before the next one
  int64_t taken = 0;           ///< steps applied since the host set it
  int64_t rejected = 0;        ///< gradients with a non-finite norm, not applied
  int64_t cursor = 0;          ///< position in the row order of the next minibatch
  int64_t index = 0;           ///< number of the next minibatch (its record slot)
  float coef = 1.0f;           ///< the next step's clipping factor
  float step_size = 0.0f;      ///< the next step's lr / (1 - beta1^t)
  float inv_bias2_sqrt = 1.0f; ///< the next step's 1 / sqrt(1 - beta2^t)
  int32_t apply = 0;           ///< whether the next step is applied
};

/// One array of a minibatch gather: `cols` elements of `elem_bytes` bytes
/// (4 or 8) per row.
struct gather_part {
  const void* src = nullptr; ///< device rows to gather from
  void* dst = nullptr;       ///< device rows to gather into
  size_t cols = 0;           ///< elements per row
  size_t elem_bytes = 4;     ///< 4 or 8
};

/// Most parts one gather takes.
constexpr size_t max_gather_parts = 8;

/// dst[r, :] = src[order[control->cursor + r], :] for r < rows and every part
/// (at most max_gather_parts), in one launch; asynchronous on `stream`.
status cuda_gather_parts_async(const uint32_t* d_order,
                               const device_step_control* d_control, size_t rows,
                               const gather_part* parts, size_t count,
                               void* stream) noexcept;

/// PPO's advantage normalization on the device, in place: (a - mean) /
/// (std + 1e-8) with the unbiased std, in float64 as normalize_advantages
/// does on the host (fewer than two rows are left unchanged).
status cuda_normalize_advantages_async(float* d_adv, size_t rows, void* stream) noexcept;

/// Partial sums of a squared norm: squared_norm_partials doubles.
constexpr size_t squared_norm_partials = 128;

/// d_partials[b] = the sum of x[i]^2 over block b's share of n floats, in
/// float64; cuda_step_prepare_async adds them up in a fixed order.
status cuda_squared_norm_async(const float* d_x, size_t n, double* d_partials,
                               void* stream) noexcept;

/// Records a minibatch of `rows` rows and decides its step: the gradient's
/// norm (from the partial sums) goes to d_norms[index] and the five loss-term
/// sums to d_records[5 * index]; the cursor advances by `rows` and the index
/// by one. A non-finite norm is counted rejected and skips the step;
/// otherwise the step count advances and the clipping factor (max_grad_norm /
/// (norm + 1e-6) when below 1) and Adam's bias-corrected constants are set,
/// in float64 as make_adam_constants does.
status cuda_step_prepare_async(const double* d_partials, const float* d_term_sums,
                               size_t rows, device_step_control* d_control,
                               double* d_norms, float* d_records, void* stream) noexcept;

/// One Adam step on n parameters with the gradient scaled by the clipping
/// factor, when d_control says to apply it (the gradient is left as it is).
status cuda_clipped_adam_step_async(float* d_param, const float* d_grad, float* d_m,
                                    float* d_v, size_t n,
                                    const device_step_control* d_control,
                                    void* stream) noexcept;

} // namespace troupe::kernels
