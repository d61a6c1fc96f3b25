#include "kernels/adam.hpp"

#include <cmath>

namespace troupe::kernels {

adam_constants make_adam_constants(const adam_hyper& h) noexcept {
  const double t = static_cast<double>(h.step);
  const double bias1 = 1.0 - std::pow(h.beta1, t);
  const double bias2 = 1.0 - std::pow(h.beta2, t);
  adam_constants c;
  c.step_size = static_cast<float>(h.lr / bias1);
  c.inv_bias2_sqrt = static_cast<float>(1.0 / std::sqrt(bias2));
  c.beta1 = static_cast<float>(h.beta1);
  c.beta2 = static_cast<float>(h.beta2);
  c.eps = static_cast<float>(h.eps);
  return c;
}

void adam_step(float* param, const float* grad, float* m, float* v, size_t n,
               const adam_hyper& hyper) noexcept {
  const adam_constants c = make_adam_constants(hyper);
  const float one_minus_beta1 = 1.0f - c.beta1;
  const float one_minus_beta2 = 1.0f - c.beta2;
  for (size_t i = 0; i < n; ++i) {
    const float g = grad[i];
    const float mi = c.beta1 * m[i] + one_minus_beta1 * g;
    const float vi = c.beta2 * v[i] + one_minus_beta2 * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] -= c.step_size * mi / (std::sqrt(vi) * c.inv_bias2_sqrt + c.eps);
  }
}

} // namespace troupe::kernels
