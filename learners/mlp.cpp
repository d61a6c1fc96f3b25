#include "learners/mlp.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <chrono>
#include <cmath>
#include <limits>
#include <type_traits>

#include <Eigen/Core>

#include "kernels/activation.hpp"
#include "kernels/normalize.hpp"
#include "kernels/policy_heads.hpp"
#if defined(TROUPE_HAVE_MLP_AVX512)
#include "learners/avx512/mlp_avx512.hpp"
#endif

namespace troupe::learners {

// -- network -----------------------------------------------------------------

namespace portable {
#include "learners/mlp_impl.inc"
} // namespace portable

namespace {

// Whether the CPU runs the AVX-512 copy, asked once; TROUPE_NO_AVX512 in the
// environment says no.
bool cpu_runs_avx512() noexcept {
#if defined(TROUPE_HAVE_MLP_AVX512)
  static const bool yes = [] {
    if (std::getenv("TROUPE_NO_AVX512"))
      return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx2") &&
           __builtin_cpu_supports("fma");
  }();
  return yes;
#else
  return false;
#endif
}

std::atomic<bool> avx512_enabled{true};

} // namespace

bool avx512_in_use() noexcept {
  return cpu_runs_avx512() && avx512_enabled.load(std::memory_order_relaxed);
}

void set_avx512_enabled(bool enabled) noexcept {
  avx512_enabled.store(enabled, std::memory_order_relaxed);
}

double gemm_gflops(size_t rows, size_t k, size_t n, double min_seconds) {
#if defined(TROUPE_HAVE_MLP_AVX512)
  if (avx512_in_use())
    return avx512::gemm_gflops(rows, k, n, min_seconds);
#endif
  return portable::gemm_gflops_impl(rows, k, n, min_seconds);
}

template <class T>
void network_forward(const network_layout& net, const model_spec& spec, const T* params,
                     const T* buffers, const T* input, size_t rows, forward_mode mode,
                     network_cache<T>& cache) {
  if constexpr (std::is_same_v<T, float>) {
#if defined(TROUPE_HAVE_MLP_AVX512)
    if (avx512_in_use()) {
      avx512::network_forward_float(net, spec, params, buffers, input, rows, mode, cache);
      return;
    }
#endif
  }
  portable::forward_impl(net, spec, params, buffers, input, rows, mode, cache);
}

template <class T>
void network_backward(const network_layout& net, const model_spec& spec, const T* params,
                      network_cache<T>& cache, const T* d_output, T* grad) {
  if constexpr (std::is_same_v<T, float>) {
#if defined(TROUPE_HAVE_MLP_AVX512)
    if (avx512_in_use()) {
      avx512::network_backward_float(net, spec, params, cache, d_output, grad);
      return;
    }
#endif
  }
  portable::backward_impl(net, spec, params, cache, d_output, grad);
}

template <class T>
void update_running_stats(const network_layout& net, const model_spec& spec,
                          const network_cache<T>& cache, T* buffers) {
  const double rows = static_cast<double>(cache.rows);
  std::vector<double> moments;
  for (size_t l = 0; l < net.hidden.size(); ++l) {
    const auto& stage = net.hidden[l];
    if (!stage.has_batch_norm)
      continue;
    const auto& bn = stage.batch_norm;
    const size_t width = static_cast<size_t>(bn.width);
    // (count, mean, m2) of the batch from the mean and biased variance its
    // forward pass used.
    moments.assign(1 + 2 * width, rows);
    for (size_t j = 0; j < width; ++j) {
      moments[1 + j] = static_cast<double>(cache.bn_mean[l][j]);
      moments[1 + width + j] = static_cast<double>(cache.bn_var[l][j]) * rows;
    }
    if constexpr (std::is_same_v<T, float>) {
      kernels::running_stats_update(moments.data(), width, spec.batch_norm_momentum,
                                    buffers + bn.running_mean, buffers + bn.running_var);
    } else {
      const double m = spec.batch_norm_momentum;
      const double unbiased = rows > 1 ? 1.0 / (rows - 1) : 1.0;
      for (size_t j = 0; j < width; ++j) {
        T& rm = buffers[bn.running_mean + j];
        T& rv = buffers[bn.running_var + j];
        rm = (1 - m) * rm + m * moments[1 + j];
        rv = (1 - m) * rv + m * moments[1 + width + j] * unbiased;
      }
    }
  }
}

template <class T>
void batch_norm_moments(const network_layout& net, const network_cache<T>& cache,
                        std::vector<kernels::moments>& out) {
  for (size_t l = 0; l < net.hidden.size(); ++l) {
    const auto& stage = net.hidden[l];
    if (!stage.has_batch_norm)
      continue;
    const size_t width = static_cast<size_t>(stage.linear.out);
    const auto& z = cache.z[l];
    if constexpr (std::is_same_v<T, float>) {
      out.push_back(kernels::compute_moments(z.data(), cache.rows, width));
    } else {
      kernels::moments m(width);
      m.count = cache.rows;
      for (size_t r = 0; r < cache.rows; ++r)
        for (size_t j = 0; j < width; ++j)
          m.mean[j] += static_cast<double>(z[r * width + j]);
      for (auto& v : m.mean)
        v /= static_cast<double>(cache.rows);
      for (size_t r = 0; r < cache.rows; ++r)
        for (size_t j = 0; j < width; ++j) {
          double d = static_cast<double>(z[r * width + j]) - m.mean[j];
          m.m2[j] += d * d;
        }
      out.push_back(std::move(m));
    }
  }
}

// -- heads -------------------------------------------------------------------
// Float runs the kernels' CPU twins (kernels/policy_heads.hpp); double, the
// reference, the same formulas in float64.

template <class T>
void categorical_forward(const T* logits, size_t rows, size_t n, const int64_t* actions,
                         head_cache<T>& cache) {
  cache.logp.resize(rows);
  cache.entropy.resize(rows);
  cache.aux.resize(rows * n);
  if constexpr (std::is_same_v<T, float>) {
    kernels::categorical_forward(logits, actions, rows, n, cache.aux.data(),
                                 cache.logp.data(), cache.entropy.data());
  } else {
    for (size_t r = 0; r < rows; ++r) {
      const T* row = logits + r * n;
      T* log_softmax = cache.aux.data() + r * n;
      T top = *std::max_element(row, row + n);
      T total = T{0};
      for (size_t j = 0; j < n; ++j)
        total += std::exp(row[j] - top);
      T log_total = top + std::log(total);
      T entropy = T{0};
      for (size_t j = 0; j < n; ++j) {
        log_softmax[j] = row[j] - log_total;
        entropy -= std::exp(log_softmax[j]) * log_softmax[j];
      }
      cache.entropy[r] = entropy;
      cache.logp[r] = log_softmax[actions[r]];
    }
  }
}

template <class T>
void categorical_backward(const head_cache<T>& cache, size_t rows, size_t n,
                          const int64_t* actions, const T* d_logp, const T* d_entropy,
                          T* d_logits) {
  if constexpr (std::is_same_v<T, float>) {
    kernels::categorical_backward(cache.aux.data(), cache.entropy.data(), actions, d_logp,
                                  d_entropy, rows, n, d_logits);
  } else {
    // dlogp_a/dz_j = [j == a] - p_j;  dH/dz_j = -p_j (log p_j + H).
    for (size_t r = 0; r < rows; ++r) {
      const T* log_softmax = cache.aux.data() + r * n;
      T* out = d_logits + r * n;
      T entropy = cache.entropy[r];
      for (size_t j = 0; j < n; ++j) {
        T p = std::exp(log_softmax[j]);
        out[j] = -d_logp[r] * p - d_entropy[r] * p * (log_softmax[j] + entropy);
      }
      out[actions[r]] += d_logp[r];
    }
  }
}

template <class T>
void gaussian_forward(const T* mean, const T* log_std, size_t rows, size_t d,
                      const T* actions, head_cache<T>& cache) {
  cache.logp.resize(rows);
  cache.entropy.resize(rows);
  cache.aux.resize(rows * d);
  if constexpr (std::is_same_v<T, float>) {
    kernels::gaussian_forward(mean, log_std, actions, rows, d, cache.aux.data(),
                              cache.logp.data(), cache.entropy.data());
  } else {
    const T half_log_two_pi = 0.91893853320467274178;
    T entropy = T{0};
    T log_std_sum = T{0};
    for (size_t j = 0; j < d; ++j) {
      entropy += T{0.5} + half_log_two_pi + log_std[j];
      log_std_sum += log_std[j];
    }
    for (size_t r = 0; r < rows; ++r) {
      T logp = T{0};
      for (size_t j = 0; j < d; ++j) {
        T z = (actions[r * d + j] - mean[r * d + j]) * std::exp(-log_std[j]);
        cache.aux[r * d + j] = z;
        logp -= T{0.5} * z * z;
      }
      cache.logp[r] = logp - log_std_sum - static_cast<T>(d) * half_log_two_pi;
      cache.entropy[r] = entropy;
    }
  }
}

template <class T>
void gaussian_backward(head_cache<T>& cache, const T* log_std, size_t rows, size_t d,
                       const T* d_logp, const T* d_entropy, T* d_mean, T* d_log_std) {
  // logp = sum_j -z_j^2/2 - log_std_j - log(2 pi)/2 with z = (a - mean)/std:
  // dlogp/dmean_j = z_j/std_j, dlogp/dlog_std_j = z_j^2 - 1; dH/dlog_std_j = 1.
  auto& per_row = cache.d_log_std_rows;
  per_row.resize(rows * d);
  if constexpr (std::is_same_v<T, float>) {
    kernels::gaussian_backward(cache.aux.data(), log_std, d_logp, d_entropy, rows, d,
                               d_mean, per_row.data());
  } else {
    for (size_t r = 0; r < rows; ++r)
      for (size_t j = 0; j < d; ++j) {
        T z = cache.aux[r * d + j];
        d_mean[r * d + j] = d_logp[r] * z * std::exp(-log_std[j]);
        per_row[r * d + j] = d_logp[r] * (z * z - T{1}) + d_entropy[r];
      }
  }
  std::fill(d_log_std, d_log_std + d, T{0});
  for (size_t r = 0; r < rows; ++r)
    for (size_t j = 0; j < d; ++j)
      d_log_std[j] += per_row[r * d + j];
}

// -- observation normalizer ---------------------------------------------------

template <class T>
void normalize_observations(const float* obs, size_t rows, size_t dim, const double* mean,
                            const double* var, double eps, double clip, T* out) {
  if constexpr (std::is_same_v<T, float>) {
    // The kernel takes float statistics: 1 / sqrt(var + eps) is formed in
    // float64 and rounded once.
    thread_local std::vector<float> stats;
    stats.resize(2 * dim);
    for (size_t j = 0; j < dim; ++j) {
      stats[j] = static_cast<float>(mean[j]);
      stats[dim + j] = static_cast<float>(1.0 / std::sqrt(var[j] + eps));
    }
    const float limit = clip < static_cast<double>(std::numeric_limits<float>::max())
                          ? static_cast<float>(clip)
                          : std::numeric_limits<float>::infinity();
    kernels::normalize_clip(obs, stats.data(), stats.data() + dim, rows, dim, limit, out);
  } else {
    for (size_t r = 0; r < rows; ++r)
      for (size_t j = 0; j < dim; ++j) {
        double v =
          (static_cast<double>(obs[r * dim + j]) - mean[j]) / std::sqrt(var[j] + eps);
        out[r * dim + j] = std::clamp(v, -clip, clip);
      }
  }
}

#define TROUPE_INSTANTIATE_MLP(T)                                                        \
  template void network_forward<T>(const network_layout&, const model_spec&, const T*,   \
                                   const T*, const T*, size_t, forward_mode,             \
                                   network_cache<T>&);                                   \
  template void network_backward<T>(const network_layout&, const model_spec&, const T*,  \
                                    network_cache<T>&, const T*, T*);                    \
  template void update_running_stats<T>(const network_layout&, const model_spec&,        \
                                        const network_cache<T>&, T*);                    \
  template void batch_norm_moments<T>(const network_layout&, const network_cache<T>&,    \
                                      std::vector<kernels::moments>&);                   \
  template void categorical_forward<T>(const T*, size_t, size_t, const int64_t*,         \
                                       head_cache<T>&);                                  \
  template void categorical_backward<T>(const head_cache<T>&, size_t, size_t,            \
                                        const int64_t*, const T*, const T*, T*);         \
  template void gaussian_forward<T>(const T*, const T*, size_t, size_t, const T*,        \
                                    head_cache<T>&);                                     \
  template void gaussian_backward<T>(head_cache<T>&, const T*, size_t, size_t, const T*, \
                                     const T*, T*, T*);                                  \
  template void normalize_observations<T>(const float*, size_t, size_t, const double*,   \
                                          const double*, double, double, T*);

TROUPE_INSTANTIATE_MLP(float)
TROUPE_INSTANTIATE_MLP(double)

} // namespace troupe::learners
