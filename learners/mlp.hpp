// The MLP math of the actor-critic on the CPU with hand-written backward
// passes, templated on the scalar type: float for training (the kernels' CPU
// twins between Eigen GEMMs), double for the reference path (docs/learners.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/moments.hpp"
#include "learners/model.hpp"

namespace troupe::learners {

/// Which statistics batch norm normalizes with.
enum class forward_mode : uint8_t {
  train, ///< local mode: the batch's own; global mode: the running buffers
  eval,  ///< the running buffers (both modes)
};

/// What one network's forward pass keeps for its backward pass.
template <class T>
struct network_cache {
  const T* input = nullptr;               ///< [rows x in], not owned
  size_t rows = 0;                        ///< batch rows
  std::vector<std::vector<T>> z;          ///< per hidden stage with BN: Linear output
  std::vector<std::vector<T>> zhat;       ///< per hidden stage with BN: normalized z
  std::vector<std::vector<T>> h;          ///< per hidden stage: activation output
  std::vector<std::vector<T>> bn_mean;    ///< per BN stage: mean used
  std::vector<std::vector<T>> bn_var;     ///< per BN stage: (biased) variance used
  std::vector<std::vector<T>> bn_inv_std; ///< per BN stage: 1/sqrt(var + eps)
  std::vector<T> out;                     ///< [rows x output width]
  std::vector<T> zeros;   ///< zero bias for the activation after batch norm
  std::vector<T> d_upper; ///< backward scratch
  std::vector<T> d_lower; ///< backward scratch
};

/// Forward pass of one network on `input` [rows x in]; `buffers` holds the
/// running statistics (read in eval mode and in global train mode).
template <class T>
void network_forward(const network_layout& net, const model_spec& spec, const T* params,
                     const T* buffers, const T* input, size_t rows, forward_mode mode,
                     network_cache<T>& cache);

/// Backward pass of one network from dL/d(output) [rows x out], overwriting
/// this network's slots of `grad` and leaving the others alone.
template <class T>
void network_backward(const network_layout& net, const model_spec& spec, const T* params,
                      network_cache<T>& cache, const T* d_output, T* grad);

/// Local mode: moves the running statistics toward the batch's, as PyTorch
/// does (momentum, unbiased variance).
template <class T>
void update_running_stats(const network_layout& net, const model_spec& spec,
                          const network_cache<T>& cache, T* buffers);

/// Moments (float64) of the Linear output that feeds each batch-norm layer,
/// appended to `out` in layer order: the delta a global-mode learner sends.
template <class T>
void batch_norm_moments(const network_layout& net, const network_cache<T>& cache,
                        std::vector<kernels::moments>& out);

/// Whether the float passes run the AVX-512 copy (built for x86-64, on a CPU
/// with AVX-512, without TROUPE_NO_AVX512 or set_avx512_enabled(false)).
bool avx512_in_use() noexcept;

/// Turns the AVX-512 copy off (or back on where the CPU has it) so that one
/// process can compare both copies, never while passes run.
void set_avx512_enabled(bool enabled) noexcept;

/// One-thread rate (GFLOP/s) of the forward pass's float GEMM for [rows x k]
/// * [k x n] in the copy this CPU uses, the floor of `troupe bench learner`.
double gemm_gflops(size_t rows, size_t k, size_t n, double min_seconds);

// -- heads -------------------------------------------------------------------

/// Per-row log-probability of the taken action and entropy, plus what the
/// head's backward pass needs.
template <class T>
struct head_cache {
  std::vector<T> logp;    ///< [rows] log pi(a|s)
  std::vector<T> entropy; ///< [rows]
  std::vector<T> aux;     ///< categorical: log-softmax [rows x n]; box: z=(a-mean)/std
  std::vector<T> d_log_std_rows; ///< box backward scratch: per-row dL/dlog_std [rows x d]
};

/// Categorical head: log-softmax of `logits` [rows x n], log-probability of
/// `actions` and entropy.
template <class T>
void categorical_forward(const T* logits, size_t rows, size_t n, const int64_t* actions,
                         head_cache<T>& cache);

/// dL/dlogits from per-row dL/dlogp and dL/dentropy.
template <class T>
void categorical_backward(const head_cache<T>& cache, size_t rows, size_t n,
                          const int64_t* actions, const T* d_logp, const T* d_entropy,
                          T* d_logits);

/// Diagonal Gaussian head: log-probability of `actions` [rows x d] under
/// N(mean, exp(log_std)^2) and entropy.
template <class T>
void gaussian_forward(const T* mean, const T* log_std, size_t rows, size_t d,
                      const T* actions, head_cache<T>& cache);

/// dL/dmean [rows x d] and dL/dlog_std [d] from per-row dL/dlogp and
/// dL/dentropy (the cache's d_log_std_rows is the scratch for the per-row terms).
template <class T>
void gaussian_backward(head_cache<T>& cache, const T* log_std, size_t rows, size_t d,
                       const T* d_logp, const T* d_entropy, T* d_mean, T* d_log_std);

} // namespace troupe::learners
