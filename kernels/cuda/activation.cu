// CUDA twin of kernels/cpu/activation.cpp.
#include <cstdint>

#include "kernels/activation.hpp"
#include "kernels/cuda/launch.cuh"

namespace troupe::kernels {

namespace {

// In place when out == z (one write per element); Index is 32-bit where the
// element count fits, which spares the 64-bit division of the bias index.
template <class Index>
__global__ void bias_activation_kernel(float* z, const float* __restrict__ bias,
                                       Index count, Index cols, activation_op act,
                                       float* out) {
  const bool in_place = out == z;
  for (Index i = blockIdx.x * Index{blockDim.x} + threadIdx.x; i < count;
       i += Index{gridDim.x} * blockDim.x) {
    const float v = z[i] + bias[i % cols];
    if (!in_place)
      z[i] = v;
    out[i] = act == activation_op::tanh   ? tanhf(v)
             : act == activation_op::relu ? fmaxf(v, 0.0f)
                                          : v;
  }
}

__global__ void activation_backward_kernel(const float* __restrict__ h,
                                           float* __restrict__ d, size_t count,
                                           activation_op act) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    if (act == activation_op::tanh)
      d[i] *= 1.0f - h[i] * h[i];
    else if (act == activation_op::relu)
      d[i] = h[i] > 0.0f ? d[i] : 0.0f;
  }
}

} // namespace

using cuda_detail::block_threads;
using cuda_detail::grid_for;
using cuda_detail::launch_status;

status cuda_bias_activation_async(float* d_z, const float* d_bias, size_t rows,
                                  size_t cols, activation_op act, float* d_out,
                                  void* stream) noexcept {
  if (rows * cols == 0)
    return ok_status();
  const size_t count = rows * cols;
  const auto s = static_cast<cudaStream_t>(stream);
  // The grid-stride index may pass count by one grid before the loop ends.
  const size_t reach = count + size_t{grid_for(count)} * block_threads;
  if (reach <= UINT32_MAX)
    bias_activation_kernel<uint32_t><<<grid_for(count), block_threads, 0, s>>>(
      d_z, d_bias, static_cast<uint32_t>(count), static_cast<uint32_t>(cols), act, d_out);
  else
    bias_activation_kernel<size_t>
      <<<grid_for(count), block_threads, 0, s>>>(d_z, d_bias, count, cols, act, d_out);
  return launch_status("bias_activation");
}

status cuda_activation_backward_async(const float* d_h, float* d_grad, size_t count,
                                      activation_op act, void* stream) noexcept {
  if (count == 0 || act == activation_op::identity)
    return ok_status();
  activation_backward_kernel<<<grid_for(count), block_threads, 0,
                               static_cast<cudaStream_t>(stream)>>>(d_h, d_grad, count,
                                                                    act);
  return launch_status("activation_backward");
}

} // namespace troupe::kernels
