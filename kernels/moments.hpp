// Moments of batches of samples, (count, mean[d], m2[d]) in float64, and
// their exact parallel merge (docs/statistics.md, "Moments and the merge").
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/error.hpp"

namespace troupe::kernels {

/// Count, per-dimension mean and sum of squared deviations, in float64.
struct moments {
  uint64_t count = 0;       ///< number of samples
  std::vector<double> mean; ///< per-dimension mean (size dim)
  std::vector<double> m2;   ///< per-dimension sum of squared deviations

  moments() = default;
  /// Empty moments (count 0, zeros) of dimension `dim`.
  explicit moments(size_t dim) : mean(dim, 0.0), m2(dim, 0.0) {}

  /// Number of dimensions.
  size_t dim() const noexcept { return mean.size(); }

  /// Population variance m2 / count (zeros when count is 0).
  std::vector<double> variance() const;

  /// Sample variance m2 / (count - 1) (zeros when count < 2).
  std::vector<double> sample_variance() const;

  /// Whether every number is finite and mean and m2 have the same size.
  bool well_formed() const noexcept;
};

/// Merges b into a (Chan et al.), so that a becomes the moments of both
/// sample sets (same dimension, unless a is empty: count 0, any dim).
void merge(moments& a, const moments& b);

/// Raw-buffer form of merge for hot paths: (na, mean_a, m2_a) += (nb, mean_b, m2_b).
void merge(uint64_t& na, double* mean_a, double* m2_a, uint64_t nb, const double* mean_b,
           const double* m2_b, size_t dim) noexcept;

// -- CPU ---------------------------------------------------------------------

/// Moments of a row-major float32 batch [rows x dim], computed on the CPU with
/// a corrected two-pass over cache-sized blocks of rows merged with Chan's
/// update (never E[x^2] - E[x]^2).
moments compute_moments(const float* x, size_t rows, size_t dim);

/// Same as compute_moments, writing into `out` (resized to dim) so that a
/// caller that reuses `out` allocates nothing.
void compute_moments_into(const float* x, size_t rows, size_t dim, moments& out);

// -- CUDA --------------------------------------------------------------------

/// Bytes of device workspace that cuda_moments_async needs for [rows x dim].
size_t cuda_moments_workspace_bytes(size_t rows, size_t dim) noexcept;

/// Computes, asynchronously on `stream` (a cudaStream_t) and without
/// allocating, the moments of a row-major float32 device buffer [rows x dim]
/// as 2*dim+1 doubles (count, mean, m2) at `d_out`, with `d_workspace` of
/// cuda_moments_workspace_bytes(rows, dim) (errc::unavailable without CUDA).
status cuda_moments_async(const float* d_x, size_t rows, size_t dim, double* d_out,
                          void* d_workspace, size_t workspace_bytes,
                          void* stream) noexcept;

/// For tests and tools (hot paths keep their data on the device): copies
/// host rows to the device, runs cuda_moments_async on the default stream
/// and copies the result back.
result<moments> cuda_compute_moments(const float* x, size_t rows, size_t dim);

/// Number of CUDA devices the runtime sees; 0 when none, when the driver is
/// missing or when the build has no CUDA. Never an error.
int cuda_device_count() noexcept;

} // namespace troupe::kernels
