// CUDA twin of kernels/cpu/normalize.cpp, plus the small glue kernels the
// CUDA learner backend needs around batch norm.
#include "kernels/cuda/launch.cuh"
#include "kernels/normalize.hpp"

namespace troupe::kernels {

namespace {

#define TROUPE_INDEX_LOOP(i, count)                                                      \
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < (count);            \
       i += size_t{gridDim.x} * blockDim.x)

__global__ void normalize_clip_kernel(const float* x, const float* mean,
                                      const float* inv_std, size_t rows, size_t cols,
                                      float clip, float* out) {
  TROUPE_INDEX_LOOP(i, rows * cols) {
    const size_t j = i % cols;
    out[i] = fminf(fmaxf((x[i] - mean[j]) * inv_std[j], -clip), clip);
  }
}

__global__ void batch_norm_forward_kernel(const float* z, const float* mean,
                                          const float* inv_std, const float* gamma,
                                          const float* beta, size_t rows, size_t cols,
                                          float* zhat, float* y) {
  TROUPE_INDEX_LOOP(i, rows * cols) {
    const size_t j = i % cols;
    const float n = (z[i] - mean[j]) * inv_std[j];
    zhat[i] = n;
    y[i] = gamma[j] * n + beta[j];
  }
}

__global__ void batch_norm_backward_kernel(const float* dy, const float* zhat,
                                           const float* gamma, const float* inv_std,
                                           const float* sum_dy, const float* sum_dy_zhat,
                                           size_t rows, size_t cols,
                                           bool batch_statistics, float* dz) {
  const float inv_rows = 1.0f / static_cast<float>(rows);
  TROUPE_INDEX_LOOP(i, rows * cols) {
    const size_t j = i % cols;
    const float scale = gamma[j] * inv_std[j];
    dz[i] =
      batch_statistics
        ? scale * (dy[i] - sum_dy[j] * inv_rows - zhat[i] * sum_dy_zhat[j] * inv_rows)
        : scale * dy[i];
  }
}

__global__ void multiply_kernel(const float* a, const float* b, size_t count,
                                float* out) {
  TROUPE_INDEX_LOOP(i, count) {
    out[i] = a[i] * b[i];
  }
}

__global__ void moments_to_stats_kernel(const double* moments, size_t cols, double eps,
                                        float* mean, float* var, float* inv_std) {
  TROUPE_INDEX_LOOP(j, cols) {
    const double count = moments[0];
    const double v = count > 0.0 ? moments[1 + cols + j] / count : 0.0;
    mean[j] = static_cast<float>(moments[1 + j]);
    var[j] = static_cast<float>(v);
    inv_std[j] = static_cast<float>(1.0 / sqrt(v + eps));
  }
}

__global__ void inverse_std_kernel(const float* var, size_t cols, double eps,
                                   float* inv_std) {
  TROUPE_INDEX_LOOP(j, cols) {
    inv_std[j] = static_cast<float>(1.0 / sqrt(static_cast<double>(var[j]) + eps));
  }
}

__global__ void running_stats_update_kernel(const double* moments, size_t cols,
                                            double momentum, float* running_mean,
                                            float* running_var) {
  const double count = moments[0];
  const double unbiased = count > 1.0 ? 1.0 / (count - 1.0) : (count > 0.0 ? 1.0 : 0.0);
  TROUPE_INDEX_LOOP(j, cols) {
    running_mean[j] =
      static_cast<float>((1.0 - momentum) * running_mean[j] + momentum * moments[1 + j]);
    running_var[j] = static_cast<float>((1.0 - momentum) * running_var[j] +
                                        momentum * moments[1 + cols + j] * unbiased);
  }
}

cudaStream_t as_stream(void* s) {
  return static_cast<cudaStream_t>(s);
}

} // namespace

using cuda_detail::block_threads;
using cuda_detail::grid_for;
using cuda_detail::launch_status;

status cuda_normalize_clip_async(const float* x, const float* mean, const float* inv_std,
                                 size_t rows, size_t cols, float clip, float* out,
                                 void* stream) noexcept {
  if (rows * cols == 0)
    return ok_status();
  normalize_clip_kernel<<<grid_for(rows * cols), block_threads, 0, as_stream(stream)>>>(
    x, mean, inv_std, rows, cols, clip, out);
  return launch_status("normalize_clip");
}

status cuda_batch_norm_forward_async(const float* z, const float* mean,
                                     const float* inv_std, const float* gamma,
                                     const float* beta, size_t rows, size_t cols,
                                     float* zhat, float* y, void* stream) noexcept {
  if (rows * cols == 0)
    return ok_status();
  batch_norm_forward_kernel<<<grid_for(rows * cols), block_threads, 0,
                              as_stream(stream)>>>(z, mean, inv_std, gamma, beta, rows,
                                                   cols, zhat, y);
  return launch_status("batch_norm_forward");
}

status cuda_batch_norm_backward_async(const float* dy, const float* zhat,
                                      const float* gamma, const float* inv_std,
                                      const float* sum_dy, const float* sum_dy_zhat,
                                      size_t rows, size_t cols, bool batch_statistics,
                                      float* dz, void* stream) noexcept {
  if (rows * cols == 0)
    return ok_status();
  batch_norm_backward_kernel<<<grid_for(rows * cols), block_threads, 0,
                               as_stream(stream)>>>(
    dy, zhat, gamma, inv_std, sum_dy, sum_dy_zhat, rows, cols, batch_statistics, dz);
  return launch_status("batch_norm_backward");
}

status cuda_inverse_std_async(const float* var, size_t cols, double eps, float* inv_std,
                              void* stream) noexcept {
  if (cols == 0)
    return ok_status();
  inverse_std_kernel<<<grid_for(cols), block_threads, 0, as_stream(stream)>>>(
    var, cols, eps, inv_std);
  return launch_status("inverse_std");
}

status cuda_running_stats_update_async(const double* moments, size_t cols,
                                       double momentum, float* running_mean,
                                       float* running_var, void* stream) noexcept {
  if (cols == 0)
    return ok_status();
  running_stats_update_kernel<<<grid_for(cols), block_threads, 0, as_stream(stream)>>>(
    moments, cols, momentum, running_mean, running_var);
  return launch_status("running_stats_update");
}

status cuda_multiply_async(const float* a, const float* b, size_t count, float* out,
                           void* stream) noexcept {
  if (count == 0)
    return ok_status();
  multiply_kernel<<<grid_for(count), block_threads, 0, as_stream(stream)>>>(a, b, count,
                                                                            out);
  return launch_status("multiply");
}

status cuda_moments_to_stats_async(const double* moments, size_t cols, double eps,
                                   float* mean, float* var, float* inv_std,
                                   void* stream) noexcept {
  if (cols == 0)
    return ok_status();
  moments_to_stats_kernel<<<grid_for(cols), block_threads, 0, as_stream(stream)>>>(
    moments, cols, eps, mean, var, inv_std);
  return launch_status("moments_to_stats");
}

} // namespace troupe::kernels
