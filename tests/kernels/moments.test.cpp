#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <new>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/moments.hpp"
#include "tests/seed.hpp"
#include "tests/skip.hpp"

using troupe::kernels::compute_moments;
using troupe::kernels::merge;
using troupe::kernels::moments;

// This binary counts its allocations, so that a test can say a hot path makes
// none (the kernels are single-threaded; the count is global all the same).
namespace {
std::atomic<uint64_t> allocations{0};
} // namespace

void* operator new(std::size_t size) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size))
    return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}

namespace {

// Float64 reference: two-pass over the float32 values, in long double.
moments reference_moments(const std::vector<float>& x, size_t rows, size_t dim) {
  moments out(dim);
  out.count = rows;
  for (size_t j = 0; j < dim; ++j) {
    long double s = 0;
    for (size_t r = 0; r < rows; ++r)
      s += x[r * dim + j];
    long double m = s / rows;
    long double q = 0;
    for (size_t r = 0; r < rows; ++r) {
      long double d = x[r * dim + j] - m;
      q += d * d;
    }
    out.mean[j] = static_cast<double>(m);
    out.m2[j] = static_cast<double>(q);
  }
  return out;
}

std::vector<float> random_rows(std::mt19937_64& rng, size_t rows, size_t dim,
                               double offset, double spread) {
  std::normal_distribution<double> noise(0.0, 1.0);
  std::uniform_real_distribution<double> col_shift(-3.0, 3.0);
  std::vector<double> shifts(dim);
  for (auto& s : shifts)
    s = col_shift(rng);
  std::vector<float> x(rows * dim);
  for (size_t r = 0; r < rows; ++r)
    for (size_t j = 0; j < dim; ++j)
      x[r * dim + j] = static_cast<float>(offset + spread * (shifts[j] + noise(rng)));
  return x;
}

void check_close(const moments& got, const moments& want, double rel) {
  REQUIRE(got.dim() == want.dim());
  CHECK(got.count == want.count);
  for (size_t j = 0; j < want.dim(); ++j) {
    CHECK(std::fabs(got.mean[j] - want.mean[j]) <=
          rel * std::max(1e-300, std::fabs(want.mean[j])) + 1e-300);
    CHECK(std::fabs(got.m2[j] - want.m2[j]) <= rel * std::fabs(want.m2[j]));
  }
}

} // namespace

TEST_CASE("the moments of a batch equal the float64 two-pass reference") {
  auto seed = troupe::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  for (size_t dim : {1u, 3u, 17u, 64u}) {
    for (size_t rows : {1u, 2u, 7u, 1000u, 50000u}) {
      auto x = random_rows(rng, rows, dim, 5.0, 2.0);
      auto got = compute_moments(x.data(), rows, dim);
      auto want = reference_moments(x, rows, dim);
      CAPTURE(dim);
      CAPTURE(rows);
      check_close(got, want, 1e-12);
    }
  }
}

TEST_CASE(
  "merging random shards in any order and grouping equals the single-pass result") {
  auto seed = troupe::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const size_t dim = 9, rows = 20000;
  auto x = random_rows(rng, rows, dim, -2.0, 3.0);
  auto want = reference_moments(x, rows, dim);
  for (int trial = 0; trial < 10; ++trial) {
    // Random cut points into shards of unequal sizes (some empty).
    std::uniform_int_distribution<size_t> cut(0, rows);
    std::vector<size_t> cuts = {0, rows};
    for (int i = 0; i < 12; ++i)
      cuts.push_back(cut(rng));
    std::sort(cuts.begin(), cuts.end());
    std::vector<moments> shards;
    for (size_t i = 0; i + 1 < cuts.size(); ++i)
      shards.push_back(
        compute_moments(x.data() + cuts[i] * dim, cuts[i + 1] - cuts[i], dim));
    std::shuffle(shards.begin(), shards.end(), rng);
    // Random grouping: repeatedly merge two random entries.
    while (shards.size() > 1) {
      std::uniform_int_distribution<size_t> pick(0, shards.size() - 1);
      size_t a = pick(rng), b = pick(rng);
      if (a == b)
        continue;
      merge(shards[a], shards[b]);
      shards.erase(shards.begin() + static_cast<std::ptrdiff_t>(b));
    }
    check_close(shards[0], want, 1e-12);
  }
}

TEST_CASE("a large offset with a tiny spread keeps the variance to 1e-6 relative") {
  auto seed = troupe::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const size_t dim = 4, rows = 100000;
  auto x = random_rows(rng, rows, dim, 1e4, 1e-2);
  auto want = reference_moments(x, rows, dim);
  auto got = compute_moments(x.data(), rows, dim);
  auto var_got = got.variance();
  auto var_want = want.variance();
  for (size_t j = 0; j < dim; ++j) {
    REQUIRE(var_want[j] > 0.0);
    CHECK(std::fabs(var_got[j] - var_want[j]) <= 1e-6 * var_want[j]);
  }
  // The same data merged from shards of 1000 rows.
  moments merged(dim);
  for (size_t r = 0; r < rows; r += 1000)
    merge(merged, compute_moments(x.data() + r * dim, 1000, dim));
  auto var_merged = merged.variance();
  for (size_t j = 0; j < dim; ++j)
    CHECK(std::fabs(var_merged[j] - var_want[j]) <= 1e-6 * var_want[j]);
}

TEST_CASE(
  "unequal shards with different means give the pooled variance, not the average") {
  auto seed = troupe::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const size_t dim = 2;
  auto a = random_rows(rng, 100, dim, 0.0, 1.0);
  auto b = random_rows(rng, 5000, dim, 50.0, 4.0);
  std::vector<float> all = a;
  all.insert(all.end(), b.begin(), b.end());
  auto want = reference_moments(all, 5100, dim);
  auto ma = compute_moments(a.data(), 100, dim);
  auto mb = compute_moments(b.data(), 5000, dim);
  auto pooled = ma;
  merge(pooled, mb);
  check_close(pooled, want, 1e-12);
  // The naive average of per-worker variances is far off: the test data are
  // such that the bug this project exists to remove would show.
  auto va = ma.variance(), vb = mb.variance(), vp = pooled.variance();
  for (size_t j = 0; j < dim; ++j)
    CHECK(std::fabs((va[j] + vb[j]) / 2 - vp[j]) > 0.1 * vp[j]);
}

TEST_CASE("merging with empty moments leaves the other side unchanged") {
  std::mt19937_64 rng(troupe::test::fresh_seed());
  auto x = random_rows(rng, 50, 3, 1.0, 1.0);
  auto m = compute_moments(x.data(), 50, 3);
  moments empty(3);
  auto left = empty;
  merge(left, m);
  check_close(left, m, 0.0);
  auto right = m;
  merge(right, empty);
  check_close(right, m, 0.0);
  moments no_dim;
  merge(no_dim, m);
  check_close(no_dim, m, 0.0);
}

TEST_CASE(
  "computing moments into a sized output allocates nothing after the first call") {
  // A runner with model.norm_update = "step" computes the moments of every
  // step's rows: that call must not allocate once its output has its size.
  std::mt19937_64 rng(troupe::test::fresh_seed());
  const size_t dim = 17;
  const size_t big = 2 * (256 * 1024 / (dim * sizeof(float))) + 5; // several blocks
  auto small = random_rows(rng, 4, dim, 2.0, 1.0);
  auto large = random_rows(rng, big, dim, 2.0, 1.0);
  moments out;
  troupe::kernels::compute_moments_into(large.data(), big, dim, out);
  troupe::kernels::compute_moments_into(small.data(), 4, dim, out);
  const uint64_t before = allocations.load();
  for (int k = 0; k < 3; ++k) {
    troupe::kernels::compute_moments_into(small.data(), 4, dim, out);
    troupe::kernels::compute_moments_into(small.data(), 1, dim, out);
    troupe::kernels::compute_moments_into(large.data(), big, dim, out);
  }
  CHECK(allocations.load() - before == 0);
  check_close(out, reference_moments(large, big, dim), 1e-12);
  troupe::kernels::compute_moments_into(small.data(), 4, dim, out);
  check_close(out, reference_moments(small, 4, dim), 1e-12);
}

TEST_CASE("well_formed rejects non-finite values and mismatched sizes") {
  moments m(2);
  m.count = 3;
  m.mean = {1.0, 2.0};
  m.m2 = {0.5, 0.25};
  CHECK(m.well_formed());
  m.mean[1] = std::nan("");
  CHECK_FALSE(m.well_formed());
  m.mean[1] = 2.0;
  m.m2[0] = INFINITY;
  CHECK_FALSE(m.well_formed());
  m.m2 = {0.5};
  CHECK_FALSE(m.well_formed());
}

TEST_CASE("CUDA moments match the CPU twin") {
  if (troupe::kernels::cuda_device_count() == 0) {
    TROUPE_SKIP(
      "no CUDA device (or built without CUDA); CPU/CUDA moments parity not checked");
  }
  std::mt19937_64 rng(troupe::test::fresh_seed());
  for (size_t dim : {1u, 5u, 33u, 64u, 300u}) {
    for (size_t rows : {1u, 100u, 4096u, 200000u}) {
      auto x = random_rows(rng, rows, dim, 100.0, 0.5);
      auto cpu = compute_moments(x.data(), rows, dim);
      auto gpu = troupe::kernels::cuda_compute_moments(x.data(), rows, dim);
      REQUIRE_MESSAGE(gpu.has_value(), (gpu ? "" : gpu.err().message));
      CAPTURE(dim);
      CAPTURE(rows);
      check_close(*gpu, cpu, 1e-10);
    }
  }
}
