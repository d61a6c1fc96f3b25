// CUDA twin of kernels/cpu/adam.cpp: one thread per parameter, the bias
// corrections folded into constants on the host in float64.
#include "kernels/adam.hpp"
#include "kernels/cuda/launch.cuh"

namespace troupe::kernels {

namespace {

__global__ void adam_kernel(float* __restrict__ p, const float* __restrict__ g,
                            float* __restrict__ m, float* __restrict__ v, size_t n,
                            adam_constants c) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    const float gi = g[i];
    const float mi = c.beta1 * m[i] + (1.0f - c.beta1) * gi;
    const float vi = c.beta2 * v[i] + (1.0f - c.beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] -= c.step_size * mi / (sqrtf(vi) * c.inv_bias2_sqrt + c.eps);
  }
}

} // namespace

status cuda_adam_step_async(float* d_param, const float* d_grad, float* d_m, float* d_v,
                            size_t n, const adam_hyper& hyper, void* stream) noexcept {
  if (n == 0)
    return ok_status();
  adam_kernel<<<cuda_detail::grid_for(n), cuda_detail::block_threads, 0,
                static_cast<cudaStream_t>(stream)>>>(d_param, d_grad, d_m, d_v, n,
                                                     make_adam_constants(hyper));
  return cuda_detail::launch_status("adam");
}

} // namespace troupe::kernels
