// Adam with PyTorch's semantics (torch.optim.Adam, single-tensor path: bias
// correction on both moments, eps after the square root; docs/learners.md,
// "Optimizer").
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/error.hpp"

namespace troupe::kernels {

/// Hyperparameters of one Adam step.
struct adam_hyper {
  double lr = 3e-4;     ///< learning rate of this step
  double beta1 = 0.9;   ///< decay of the first moment
  double beta2 = 0.999; ///< decay of the second moment
  double eps = 1e-8;    ///< added to the bias-corrected sqrt(v)
  int64_t step = 1;     ///< 1-based step number, for bias correction
};

/// The step's per-element constants, computed once in float64.
struct adam_constants {
  float step_size;         ///< lr / (1 - beta1^t)
  float inv_bias2_sqrt;    ///< 1 / sqrt(1 - beta2^t)
  float beta1, beta2, eps; ///< as given
};

/// Folds the bias corrections of step `hyper.step` into constants.
adam_constants make_adam_constants(const adam_hyper& hyper) noexcept;

/// One Adam step on n float32 parameters on the CPU; m and v are updated in
/// place.
void adam_step(float* param, const float* grad, float* m, float* v, size_t n,
               const adam_hyper& hyper) noexcept;

/// The same step on device buffers, asynchronous on `stream` (a
/// cudaStream_t), or errc::unavailable in a build without CUDA.
status cuda_adam_step_async(float* d_param, const float* d_grad, float* d_m, float* d_v,
                            size_t n, const adam_hyper& hyper, void* stream) noexcept;

} // namespace troupe::kernels
