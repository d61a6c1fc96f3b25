// Normalization on row-major float32 [rows x cols] buffers: the observation
// normalizer and batch norm with its backward pass (CPU twins; the CUDA ones
// are in kernels/cuda/normalize.cu).
#pragma once

#include <cstddef>

#include "base/error.hpp"

namespace troupe::kernels {

/// out = clip((x - mean) * inv_std, -clip, clip), per column; inv_std[j] =
/// 1 / sqrt(var[j] + eps) computed by the caller.
void normalize_clip(const float* x, const float* mean, const float* inv_std, size_t rows,
                    size_t cols, float clip, float* out) noexcept;

/// Batch norm forward with given statistics: zhat = (z - mean) inv_std,
/// y = gamma zhat + beta.
void batch_norm_forward(const float* z, const float* mean, const float* inv_std,
                        const float* gamma, const float* beta, size_t rows, size_t cols,
                        float* zhat, float* y) noexcept;

/// Batch norm backward from the column sums sum_dy and sum_dy_zhat of dL/dy
/// and dL/dy * zhat, through the batch's statistics or fixed ones
/// (docs/design-notes.md, "kernels/").
void batch_norm_backward(const float* dy, const float* zhat, const float* gamma,
                         const float* inv_std, const float* sum_dy,
                         const float* sum_dy_zhat, size_t rows, size_t cols,
                         bool batch_statistics, float* dz) noexcept;

/// inv_std[j] = 1 / sqrt(var[j] + eps).
void inverse_std(const float* var, size_t cols, double eps, float* inv_std) noexcept;

/// Local batch norm's running statistics moved toward a batch's float64
/// moments (count, mean[cols], m2[cols]) with PyTorch's momentum update.
void running_stats_update(const double* moments, size_t cols, double momentum,
                          float* running_mean, float* running_var) noexcept;

/// CUDA twin of running_stats_update (moments on the device).
status cuda_running_stats_update_async(const double* moments, size_t cols,
                                       double momentum, float* running_mean,
                                       float* running_var, void* stream) noexcept;

/// CUDA twin of normalize_clip.
status cuda_normalize_clip_async(const float* x, const float* mean, const float* inv_std,
                                 size_t rows, size_t cols, float clip, float* out,
                                 void* stream) noexcept;
/// CUDA twin of batch_norm_forward.
status cuda_batch_norm_forward_async(const float* z, const float* mean,
                                     const float* inv_std, const float* gamma,
                                     const float* beta, size_t rows, size_t cols,
                                     float* zhat, float* y, void* stream) noexcept;
/// CUDA twin of batch_norm_backward.
status cuda_batch_norm_backward_async(const float* dy, const float* zhat,
                                      const float* gamma, const float* inv_std,
                                      const float* sum_dy, const float* sum_dy_zhat,
                                      size_t rows, size_t cols, bool batch_statistics,
                                      float* dz, void* stream) noexcept;
/// CUDA twin of inverse_std.
status cuda_inverse_std_async(const float* var, size_t cols, double eps, float* inv_std,
                              void* stream) noexcept;
/// out[i] = a[i] * b[i] on the device (for column sums of products).
status cuda_multiply_async(const float* a, const float* b, size_t count, float* out,
                           void* stream) noexcept;
/// From moments (count, mean[cols], m2[cols]) in float64 on the device, the
/// float mean, biased variance and 1 / sqrt(var + eps) of each column.
status cuda_moments_to_stats_async(const double* moments, size_t cols, double eps,
                                   float* mean, float* var, float* inv_std,
                                   void* stream) noexcept;

} // namespace troupe::kernels
