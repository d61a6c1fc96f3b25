#include "kernels/activation.hpp"

#include <algorithm>
#include <cmath>

namespace troupe::kernels {

void bias_activation(float* z, const float* bias, size_t rows, size_t cols,
                     activation_op act, float* out) noexcept {
  for (size_t r = 0; r < rows; ++r) {
    float* zr = z + r * cols;
    float* outr = out + r * cols;
    for (size_t j = 0; j < cols; ++j) {
      const float v = zr[j] + bias[j];
      zr[j] = v;
      outr[j] = act == activation_op::tanh   ? std::tanh(v)
                : act == activation_op::relu ? std::max(v, 0.0f)
                                             : v;
    }
  }
}

void activation_backward(const float* h, float* d, size_t count,
                         activation_op act) noexcept {
  if (act == activation_op::tanh) {
    for (size_t i = 0; i < count; ++i)
      d[i] *= 1.0f - h[i] * h[i];
  } else if (act == activation_op::relu) {
    for (size_t i = 0; i < count; ++i)
      d[i] = h[i] > 0.0f ? d[i] : 0.0f;
  }
}

} // namespace troupe::kernels
