// The optimizer of the learners: Adam with PyTorch's semantics, gradient
// clipping by global norm (torch.nn.utils.clip_grad_norm_) and CleanRL's
// linear learning-rate annealing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/adam.hpp"

namespace troupe::learners {

/// Adam's settings (CleanRL's PPO uses eps = 1e-5).
struct adam_config {
  double lr = 2.5e-4;   ///< initial learning rate
  double beta1 = 0.9;   ///< first-moment decay
  double beta2 = 0.999; ///< second-moment decay
  double eps = 1e-5;    ///< added after the square root
};

/// The Adam kernels' hyperparameters for step `step` (1-based) at rate `lr`.
kernels::adam_hyper adam_hyper_for(const adam_config& config, double lr, int64_t step);

/// Adam's state for one flat parameter vector.
class adam_optimizer {
public:
  /// State for `n` parameters: zero moments, step 0.
  adam_optimizer(size_t n, adam_config config);

  /// Applies one step with learning rate `lr` (use config().lr when not
  /// annealing); advances the step counter first, as PyTorch does.
  void step(float* params, const float* grad, double lr);

  /// step() in parts, for threads that share one step: advances the step
  /// counter and returns the step's hyperparameters, which apply_range then
  /// applies to parameters [begin, end). Disjoint ranges covering every
  /// parameter give exactly what step() gives (Adam is element by element).
  kernels::adam_hyper begin_step(double lr);
  /// Applies `hyper` (from begin_step) to parameters [begin, end).
  void apply_range(float* params, const float* grad, const kernels::adam_hyper& hyper,
                   size_t begin, size_t end) noexcept;

  /// The settings given at construction.
  const adam_config& config() const noexcept { return config_; }
  /// Steps taken so far.
  int64_t steps() const noexcept { return steps_; }
  /// First moments (for checkpoints).
  std::vector<float>& first_moment() noexcept { return m_; }
  /// Second moments (for checkpoints).
  std::vector<float>& second_moment() noexcept { return v_; }
  /// Restores the step counter (for checkpoints).
  void set_steps(int64_t steps) noexcept { steps_ = steps; }

private:
  adam_config config_;
  std::vector<float> m_;
  std::vector<float> v_;
  int64_t steps_ = 0;
};

/// Global L2 norm of `grad`, accumulated in float64.
double global_norm(const float* grad, size_t n) noexcept;

/// Scales `grad`, whose global norm is `norm`, by max_norm / (norm + 1e-6)
/// when that is below 1 (the second half of clip_grad_norm).
void scale_to_norm(float* grad, size_t n, double norm, double max_norm) noexcept;

/// torch.nn.utils.clip_grad_norm_: scales `grad` by max_norm / (norm + 1e-6)
/// when that is below 1 and returns the norm before clipping.
double clip_grad_norm(float* grad, size_t n, double max_norm) noexcept;

/// CleanRL's annealing: lr0 (1 - (update - 1) / total_updates) for the
/// 1-based `update` in [1, total_updates].
double linear_lr(double lr0, int64_t update, int64_t total_updates) noexcept;

} // namespace troupe::learners
