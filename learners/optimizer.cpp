#include "learners/optimizer.hpp"

#include <cmath>

namespace troupe::learners {

adam_optimizer::adam_optimizer(size_t n, adam_config config)
  : config_(config), m_(n, 0.0f), v_(n, 0.0f) {}

kernels::adam_hyper adam_hyper_for(const adam_config& config, double lr, int64_t step) {
  kernels::adam_hyper hyper;
  hyper.lr = lr;
  hyper.beta1 = config.beta1;
  hyper.beta2 = config.beta2;
  hyper.eps = config.eps;
  hyper.step = step;
  return hyper;
}

void adam_optimizer::step(float* params, const float* grad, double lr) {
  ++steps_;
  kernels::adam_step(params, grad, m_.data(), v_.data(), m_.size(),
                     adam_hyper_for(config_, lr, steps_));
}

kernels::adam_hyper adam_optimizer::begin_step(double lr) {
  ++steps_;
  return adam_hyper_for(config_, lr, steps_);
}

void adam_optimizer::apply_range(float* params, const float* grad,
                                 const kernels::adam_hyper& hyper, size_t begin,
                                 size_t end) noexcept {
  kernels::adam_step(params + begin, grad + begin, m_.data() + begin, v_.data() + begin,
                     end - begin, hyper);
}

double global_norm(const float* grad, size_t n) noexcept {
  // Eight running sums (in a fixed order, so the result is the same on every
  // run): one sum would chain every addition behind the last (four cycles
  // each); eight vectorize.
  double part[8] = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (size_t k = 0; k < 8; ++k)
      part[k] += static_cast<double>(grad[i + k]) * static_cast<double>(grad[i + k]);
  for (size_t k = 0; i < n; ++i, ++k)
    part[k] += static_cast<double>(grad[i]) * static_cast<double>(grad[i]);
  const double total = ((part[0] + part[1]) + (part[2] + part[3])) +
                       ((part[4] + part[5]) + (part[6] + part[7]));
  return std::sqrt(total);
}

void scale_to_norm(float* grad, size_t n, double norm, double max_norm) noexcept {
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) {
    const float scale = static_cast<float>(coef);
    for (size_t i = 0; i < n; ++i)
      grad[i] *= scale;
  }
}

double clip_grad_norm(float* grad, size_t n, double max_norm) noexcept {
  const double norm = global_norm(grad, n);
  scale_to_norm(grad, n, norm, max_norm);
  return norm;
}

double linear_lr(double lr0, int64_t update, int64_t total_updates) noexcept {
  if (total_updates <= 0)
    return lr0;
  const double frac =
    1.0 - static_cast<double>(update - 1) / static_cast<double>(total_updates);
  return lr0 * frac;
}

} // namespace troupe::learners
