#include "kernels/normalize.hpp"

#include <algorithm>
#include <cmath>

namespace troupe::kernels {

void normalize_clip(const float* x, const float* mean, const float* inv_std, size_t rows,
                    size_t cols, float clip, float* out) noexcept {
  for (size_t r = 0; r < rows; ++r)
    for (size_t j = 0; j < cols; ++j)
      out[r * cols + j] =
        std::clamp((x[r * cols + j] - mean[j]) * inv_std[j], -clip, clip);
}

void inverse_std(const float* var, size_t cols, double eps, float* inv_std) noexcept {
  for (size_t j = 0; j < cols; ++j)
    inv_std[j] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(var[j]) + eps));
}

void running_stats_update(const double* moments, size_t cols, double momentum,
                          float* running_mean, float* running_var) noexcept {
  const double count = moments[0];
  const double unbiased = count > 1.0 ? 1.0 / (count - 1.0) : (count > 0.0 ? 1.0 : 0.0);
  for (size_t j = 0; j < cols; ++j) {
    running_mean[j] =
      static_cast<float>((1.0 - momentum) * running_mean[j] + momentum * moments[1 + j]);
    running_var[j] = static_cast<float>((1.0 - momentum) * running_var[j] +
                                        momentum * moments[1 + cols + j] * unbiased);
  }
}

void batch_norm_forward(const float* z, const float* mean, const float* inv_std,
                        const float* gamma, const float* beta, size_t rows, size_t cols,
                        float* zhat, float* y) noexcept {
  for (size_t r = 0; r < rows; ++r)
    for (size_t j = 0; j < cols; ++j) {
      const size_t i = r * cols + j;
      const float n = (z[i] - mean[j]) * inv_std[j];
      zhat[i] = n;
      y[i] = gamma[j] * n + beta[j];
    }
}

void batch_norm_backward(const float* dy, const float* zhat, const float* gamma,
                         const float* inv_std, const float* sum_dy,
                         const float* sum_dy_zhat, size_t rows, size_t cols,
                         bool batch_statistics, float* dz) noexcept {
  const float inv_rows = 1.0f / static_cast<float>(rows);
  for (size_t r = 0; r < rows; ++r)
    for (size_t j = 0; j < cols; ++j) {
      const size_t i = r * cols + j;
      const float scale = gamma[j] * inv_std[j];
      dz[i] =
        batch_statistics
          ? scale * (dy[i] - sum_dy[j] * inv_rows - zhat[i] * sum_dy_zhat[j] * inv_rows)
          : scale * dy[i];
    }
}

} // namespace troupe::kernels
