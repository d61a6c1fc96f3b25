#include "kernels/moments.hpp"

#include <algorithm>
#include <cmath>

namespace troupe::kernels {

std::vector<double> moments::variance() const {
  std::vector<double> v(dim(), 0.0);
  if (count == 0)
    return v;
  const double inv = 1.0 / static_cast<double>(count);
  for (size_t j = 0; j < dim(); ++j)
    v[j] = m2[j] * inv;
  return v;
}

std::vector<double> moments::sample_variance() const {
  std::vector<double> v(dim(), 0.0);
  if (count < 2)
    return v;
  const double inv = 1.0 / static_cast<double>(count - 1);
  for (size_t j = 0; j < dim(); ++j)
    v[j] = m2[j] * inv;
  return v;
}

bool moments::well_formed() const noexcept {
  if (mean.size() != m2.size())
    return false;
  for (size_t j = 0; j < mean.size(); ++j)
    if (!std::isfinite(mean[j]) || !std::isfinite(m2[j]) || m2[j] < 0.0)
      return false;
  return true;
}

// -- merging -----------------------------------------------------------------

void merge(uint64_t& na, double* mean_a, double* m2_a, uint64_t nb, const double* mean_b,
           const double* m2_b, size_t dim) noexcept {
  if (nb == 0)
    return;
  if (na == 0) {
    std::copy(mean_b, mean_b + dim, mean_a);
    std::copy(m2_b, m2_b + dim, m2_a);
    na = nb;
    return;
  }
  const double a = static_cast<double>(na);
  const double b = static_cast<double>(nb);
  const double n = a + b;
  const double wb = b / n;      // weight of b's mean in the merged mean
  const double wab = a * b / n; // weight of the squared mean difference
  for (size_t j = 0; j < dim; ++j) {
    const double delta = mean_b[j] - mean_a[j];
    mean_a[j] += delta * wb;
    m2_a[j] += m2_b[j] + delta * delta * wab;
  }
  na += nb;
}

void merge(moments& a, const moments& b) {
  if (a.count == 0 && a.dim() != b.dim()) {
    a = b;
    return;
  }
  TROUPE_CHECK(a.dim() == b.dim(), "merging moments of dim {} and {}", a.dim(), b.dim());
  merge(a.count, a.mean.data(), a.m2.data(), b.count, b.mean.data(), b.m2.data(),
        a.dim());
}

// -- computing ---------------------------------------------------------------

namespace {

// Rows per block: a block of float32 rows stays in L2 for the second pass.
constexpr size_t block_bytes = 256 * 1024;

// Corrected two-pass moments of one block of rows. `sum` and `dev` are
// scratch of size dim. Inner loops run along contiguous columns so that the
// compiler vectorizes them.
void block_moments(const float* x, size_t rows, size_t dim, double* mean, double* m2,
                   double* dev) {
  std::fill(mean, mean + dim, 0.0);
  for (size_t r = 0; r < rows; ++r) {
    const float* row = x + r * dim;
    for (size_t j = 0; j < dim; ++j)
      mean[j] += static_cast<double>(row[j]);
  }
  const double inv = 1.0 / static_cast<double>(rows);
  for (size_t j = 0; j < dim; ++j)
    mean[j] *= inv;
  std::fill(m2, m2 + dim, 0.0);
  std::fill(dev, dev + dim, 0.0);
  for (size_t r = 0; r < rows; ++r) {
    const float* row = x + r * dim;
    for (size_t j = 0; j < dim; ++j) {
      const double d = static_cast<double>(row[j]) - mean[j];
      dev[j] += d;
      m2[j] += d * d;
    }
  }
  // The correction term removes the rounding error of the mean (Chan,
  // Golub and LeVeque's "corrected two-pass algorithm").
  for (size_t j = 0; j < dim; ++j)
    m2[j] -= dev[j] * dev[j] * inv;
}

} // namespace

void compute_moments_into(const float* x, size_t rows, size_t dim, moments& out) {
  out.count = 0;
  out.mean.assign(dim, 0.0);
  out.m2.assign(dim, 0.0);
  if (rows == 0 || dim == 0)
    return;
  // Per-thread scratch: a runner that updates its statistics at every step
  // calls this once per step, which must not allocate.
  thread_local std::vector<double> scratch;
  if (scratch.size() < 3 * dim)
    scratch.resize(3 * dim);
  const size_t rows_per_block = std::max<size_t>(1, block_bytes / (dim * sizeof(float)));
  if (rows <= rows_per_block) {
    block_moments(x, rows, dim, out.mean.data(), out.m2.data(), scratch.data());
    out.count = rows;
    return;
  }
  double* mean = scratch.data();
  double* m2 = mean + dim;
  double* dev = m2 + dim;
  for (size_t r0 = 0; r0 < rows; r0 += rows_per_block) {
    const size_t n = std::min(rows_per_block, rows - r0);
    block_moments(x + r0 * dim, n, dim, mean, m2, dev);
    merge(out.count, out.mean.data(), out.m2.data(), n, mean, m2, dim);
  }
}

moments compute_moments(const float* x, size_t rows, size_t dim) {
  moments out;
  compute_moments_into(x, rows, dim, out);
  return out;
}

} // namespace troupe::kernels
