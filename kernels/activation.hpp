// Bias plus activation, and the activation's backward pass, on row-major
// [rows x cols] float32 buffers: the elementwise work between the GEMMs of
// an MLP. CPU twins here, CUDA twins in kernels/cuda/activation.cu.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/error.hpp"

namespace troupe::kernels {

/// Elementwise activation of a hidden layer.
enum class activation_op : uint8_t { identity, tanh, relu };

/// z[r, j] += bias[j]; out[r, j] = act(z[r, j]). `out` may equal `z`.
void bias_activation(float* z, const float* bias, size_t rows, size_t cols,
                     activation_op act, float* out) noexcept;

/// d[i] *= act'(.) written with the activation's output h: 1 - h^2 for
/// tanh, [h > 0] for relu, 1 for identity.
void activation_backward(const float* h, float* d, size_t count,
                         activation_op act) noexcept;

/// CUDA twin of bias_activation on device buffers, on `stream`.
status cuda_bias_activation_async(float* d_z, const float* d_bias, size_t rows,
                                  size_t cols, activation_op act, float* d_out,
                                  void* stream) noexcept;

/// CUDA twin of activation_backward.
status cuda_activation_backward_async(const float* d_h, float* d_grad, size_t count,
                                      activation_op act, void* stream) noexcept;

} // namespace troupe::kernels
