// The device side of a PPO update run as one CUDA graph (kernels/ppo_update.hpp):
// nothing here reads back to the host, so a whole update can be captured.
#include <algorithm>

#include "kernels/cuda/launch.cuh"
#include "kernels/ppo_update.hpp"

namespace troupe::kernels {

namespace {

constexpr int reduce_threads = 1024;
constexpr int norm_threads = 256;

struct device_gather_part {
  const void* src;
  void* dst;
  size_t cols;
  size_t elem_bytes;
};

struct device_gather_parts {
  device_gather_part part[max_gather_parts];
};

// blockIdx.y picks the part; a grid-stride loop over its rows x cols.
__global__ void gather_parts_kernel(const uint32_t* __restrict__ order,
                                    const device_step_control* __restrict__ control,
                                    size_t rows, device_gather_parts parts) {
  const device_gather_part p = parts.part[blockIdx.y];
  order += control->cursor;
  const size_t total = rows * p.cols;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < total;
       i += size_t{gridDim.x} * blockDim.x) {
    const size_t r = i / p.cols, c = i - r * p.cols;
    const size_t from = static_cast<size_t>(order[r]) * p.cols + c;
    if (p.elem_bytes == 8)
      static_cast<uint64_t*>(p.dst)[i] = static_cast<const uint64_t*>(p.src)[from];
    else
      static_cast<uint32_t*>(p.dst)[i] = static_cast<const uint32_t*>(p.src)[from];
  }
}

// Sum of a double per thread over the block; thread 0 holds the result.
__device__ double block_sum(double value) {
  __shared__ double partial[reduce_threads / 32];
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_down_sync(0xffffffffu, value, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0)
    partial[warp] = value;
  __syncthreads();
  value = 0.0;
  if (warp == 0) {
    const int warps = (blockDim.x + 31) / 32;
    value = lane < warps ? partial[lane] : 0.0;
    for (int offset = 16; offset > 0; offset /= 2)
      value += __shfl_down_sync(0xffffffffu, value, offset);
  }
  __syncthreads(); // partial[] may be reused by a following call
  return value;
}

__global__ void normalize_advantages_kernel(float* __restrict__ adv, size_t rows) {
  __shared__ double shared_mean, shared_scale;
  // Four sums per thread, so that a thread's loads do not wait on each other.
  const size_t stride = blockDim.x;
  double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
  size_t r = threadIdx.x;
  for (; r + 3 * stride < rows; r += 4 * stride) {
    s0 += static_cast<double>(adv[r]);
    s1 += static_cast<double>(adv[r + stride]);
    s2 += static_cast<double>(adv[r + 2 * stride]);
    s3 += static_cast<double>(adv[r + 3 * stride]);
  }
  for (; r < rows; r += stride)
    s0 += static_cast<double>(adv[r]);
  const double sum = block_sum((s0 + s1) + (s2 + s3));
  if (threadIdx.x == 0)
    shared_mean = sum / static_cast<double>(rows);
  __syncthreads();
  const double mean = shared_mean;
  s0 = s1 = s2 = s3 = 0.0;
  r = threadIdx.x;
  for (; r + 3 * stride < rows; r += 4 * stride) {
    const double d0 = static_cast<double>(adv[r]) - mean;
    const double d1 = static_cast<double>(adv[r + stride]) - mean;
    const double d2 = static_cast<double>(adv[r + 2 * stride]) - mean;
    const double d3 = static_cast<double>(adv[r + 3 * stride]) - mean;
    s0 += d0 * d0;
    s1 += d1 * d1;
    s2 += d2 * d2;
    s3 += d3 * d3;
  }
  for (; r < rows; r += stride) {
    const double d = static_cast<double>(adv[r]) - mean;
    s0 += d * d;
  }
  const double ss = block_sum((s0 + s1) + (s2 + s3));
  if (threadIdx.x == 0)
    shared_scale = sqrt(ss / static_cast<double>(rows - 1)) + 1e-8;
  __syncthreads();
  const double scale = shared_scale;
  for (size_t i = threadIdx.x; i < rows; i += stride)
    adv[i] = static_cast<float>((static_cast<double>(adv[i]) - mean) / scale);
}

__global__ void squared_norm_kernel(const float* __restrict__ x, size_t n,
                                    double* __restrict__ partials) {
  double sum = 0.0;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    const double v = static_cast<double>(x[i]);
    sum += v * v;
  }
  sum = block_sum(sum);
  if (threadIdx.x == 0)
    partials[blockIdx.x] = sum;
}

__global__ void step_prepare_kernel(const double* __restrict__ partials,
                                    const float* __restrict__ term_sums, size_t rows,
                                    device_step_control* __restrict__ c,
                                    double* __restrict__ norms,
                                    float* __restrict__ records) {
  double squared = 0.0;
  for (size_t b = 0; b < squared_norm_partials; ++b)
    squared += partials[b];
  const double norm = sqrt(squared);
  const int64_t k = c->index;
  norms[k] = norm;
  for (int t = 0; t < 5; ++t)
    records[5 * k + t] = term_sums[t];
  c->index = k + 1;
  c->cursor += static_cast<int64_t>(rows);
  if (!isfinite(norm)) {
    c->apply = 0;
    c->rejected += 1;
    return;
  }
  c->apply = 1;
  c->taken += 1;
  c->step += 1;
  c->coef = 1.0f;
  if (c->max_grad_norm > 0) {
    const double coef = c->max_grad_norm / (norm + 1e-6);
    if (coef < 1.0)
      c->coef = static_cast<float>(coef);
  }
  const double t = static_cast<double>(c->step);
  c->step_size = static_cast<float>(c->lr / (1.0 - pow(c->beta1, t)));
  c->inv_bias2_sqrt = static_cast<float>(1.0 / sqrt(1.0 - pow(c->beta2, t)));
}

__global__ void clipped_adam_kernel(float* __restrict__ p, const float* __restrict__ g,
                                    float* __restrict__ m, float* __restrict__ v,
                                    size_t n, const device_step_control* __restrict__ c) {
  if (!c->apply)
    return;
  const float coef = c->coef, step_size = c->step_size,
              inv_bias2_sqrt = c->inv_bias2_sqrt;
  const float beta1 = static_cast<float>(c->beta1), beta2 = static_cast<float>(c->beta2);
  const float eps = static_cast<float>(c->eps);
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    const float gi = coef < 1.0f ? g[i] * coef : g[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] -= step_size * mi / (sqrtf(vi) * inv_bias2_sqrt + eps);
  }
}

} // namespace

status cuda_gather_parts_async(const uint32_t* d_order,
                               const device_step_control* d_control, size_t rows,
                               const gather_part* parts, size_t count,
                               void* stream) noexcept {
  if (count > max_gather_parts)
    return make_error(errc::invalid_argument, "gather: {} parts, at most {}", count,
                      max_gather_parts);
  if (rows == 0 || count == 0)
    return ok_status();
  device_gather_parts device{};
  size_t widest = 1;
  for (size_t i = 0; i < count; ++i) {
    if (parts[i].elem_bytes != 4 && parts[i].elem_bytes != 8)
      return make_error(errc::invalid_argument,
                        "gather: part {} has elements of {} bytes (4 or 8 are supported)",
                        i, parts[i].elem_bytes);
    device.part[i] = {parts[i].src, parts[i].dst, parts[i].cols, parts[i].elem_bytes};
    widest = std::max(widest, parts[i].cols);
  }
  const dim3 grid(cuda_detail::grid_for(rows * widest), static_cast<unsigned>(count));
  gather_parts_kernel<<<grid, cuda_detail::block_threads, 0,
                        static_cast<cudaStream_t>(stream)>>>(d_order, d_control, rows,
                                                             device);
  return cuda_detail::launch_status("gather");
}

status cuda_normalize_advantages_async(float* d_adv, size_t rows, void* stream) noexcept {
  if (rows < 2)
    return ok_status();
  normalize_advantages_kernel<<<1, reduce_threads, 0,
                                static_cast<cudaStream_t>(stream)>>>(d_adv, rows);
  return cuda_detail::launch_status("normalize advantages");
}

status cuda_squared_norm_async(const float* d_x, size_t n, double* d_partials,
                               void* stream) noexcept {
  squared_norm_kernel<<<squared_norm_partials, norm_threads, 0,
                        static_cast<cudaStream_t>(stream)>>>(d_x, n, d_partials);
  return cuda_detail::launch_status("squared norm");
}

status cuda_step_prepare_async(const double* d_partials, const float* d_term_sums,
                               size_t rows, device_step_control* d_control,
                               double* d_norms, float* d_records, void* stream) noexcept {
  step_prepare_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(
    d_partials, d_term_sums, rows, d_control, d_norms, d_records);
  return cuda_detail::launch_status("step prepare");
}

status cuda_clipped_adam_step_async(float* d_param, const float* d_grad, float* d_m,
                                    float* d_v, size_t n,
                                    const device_step_control* d_control,
                                    void* stream) noexcept {
  if (n == 0)
    return ok_status();
  clipped_adam_kernel<<<cuda_detail::grid_for(n), cuda_detail::block_threads, 0,
                        static_cast<cudaStream_t>(stream)>>>(d_param, d_grad, d_m, d_v, n,
                                                             d_control);
  return cuda_detail::launch_status("clipped adam");
}

} // namespace troupe::kernels
