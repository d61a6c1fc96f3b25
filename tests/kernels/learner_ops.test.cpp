// The learners' elementwise kernels: each CPU twin against a float64
// reference, each CUDA twin against its CPU twin (skipped without a GPU).
#include <algorithm>
#include <cmath>
#include <random>

#include <doctest/doctest.h>

#include "kernels/activation.hpp"
#include "kernels/adam.hpp"
#include "kernels/cuda_context.hpp"
#include "kernels/moments.hpp"
#include "kernels/normalize.hpp"
#include "kernels/policy_heads.hpp"
#include "tests/skip.hpp"
#include "tests/seed.hpp"

using namespace troupe::kernels;
using troupe::test::fresh_seed;

namespace {

std::vector<float> random_floats(size_t n, std::mt19937_64& rng, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> out(n);
  for (auto& v : out)
    v = normal(rng);
  return out;
}

bool close(double got, double want, double tol = 1e-5) {
  return std::abs(got - want) <= tol * std::max(1.0, std::abs(want));
}

bool have_gpu() {
  return cuda_device_count() > 0;
}

template <class T>
device_array<T> to_device(const std::vector<T>& host) {
  device_array<T> d;
  REQUIRE(d.reserve(std::max<size_t>(host.size(), 1)));
  REQUIRE(cuda_copy_to_device(d.data(), host.data(), host.size() * sizeof(T), nullptr));
  // Pageable uploads may still be in flight; the context streams do not wait
  // for the default stream.
  REQUIRE(cuda_synchronize_device());
  return d;
}

template <class T>
std::vector<T> to_host(const device_array<T>& d, size_t n) {
  std::vector<T> out(n);
  REQUIRE(cuda_synchronize_device());
  REQUIRE(cuda_copy_to_host(out.data(), d.data(), n * sizeof(T), nullptr));
  REQUIRE(cuda_synchronize_device());
  return out;
}

void require_close(const std::vector<float>& a, const std::vector<float>& b, double tol) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    CHECK(close(a[i], b[i], tol));
  }
}

} // namespace

TEST_CASE(
  "bias plus activation and its backward match float64 for tanh, relu and identity") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const size_t rows = 37, cols = 19;
  for (auto act : {activation_op::tanh, activation_op::relu, activation_op::identity}) {
    auto z = random_floats(rows * cols, rng), bias = random_floats(cols, rng);
    auto d = random_floats(rows * cols, rng);
    auto z0 = z;
    std::vector<float> h(rows * cols);
    bias_activation(z.data(), bias.data(), rows, cols, act, h.data());
    auto d_out = d;
    activation_backward(h.data(), d_out.data(), rows * cols, act);
    for (size_t i = 0; i < rows * cols; ++i) {
      double v = static_cast<double>(z0[i]) + bias[i % cols];
      double want = act == activation_op::tanh   ? std::tanh(v)
                    : act == activation_op::relu ? std::max(v, 0.0)
                                                 : v;
      double slope = act == activation_op::tanh   ? 1.0 - std::tanh(v) * std::tanh(v)
                     : act == activation_op::relu ? (v > 0 ? 1.0 : 0.0)
                                                  : 1.0;
      CHECK(close(z[i], v));
      CHECK(close(h[i], want));
      CHECK(close(d_out[i], d[i] * slope, 1e-5));
    }
    if (!have_gpu())
      continue;
    auto dz = to_device(z0), db = to_device(bias), dd = to_device(d);
    device_array<float> dh;
    REQUIRE(dh.reserve(rows * cols));
    REQUIRE(cuda_bias_activation_async(dz.data(), db.data(), rows, cols, act, dh.data(),
                                       nullptr));
    REQUIRE(
      cuda_activation_backward_async(dh.data(), dd.data(), rows * cols, act, nullptr));
    require_close(to_host(dh, rows * cols), h, 1e-6);
    require_close(to_host(dd, rows * cols), d_out, 1e-5);
  }
  if (!have_gpu())
    TROUPE_SKIP("CUDA twins of bias_activation/activation_backward not checked (no GPU); "
                "the CPU twins were checked against float64");
}

TEST_CASE("the categorical head's log-softmax, entropy and backward match float64") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const size_t rows = 41, n = 5;
  auto logits = random_floats(rows * n, rng, 2.0f);
  std::vector<int64_t> actions(rows);
  for (auto& a : actions)
    a = static_cast<int64_t>(rng() % n);
  auto d_logp = random_floats(rows, rng), d_ent = random_floats(rows, rng);
  std::vector<float> ls(rows * n), logp(rows), ent(rows), d_logits(rows * n);
  categorical_forward(logits.data(), actions.data(), rows, n, ls.data(), logp.data(),
                      ent.data());
  categorical_backward(ls.data(), ent.data(), actions.data(), d_logp.data(), d_ent.data(),
                       rows, n, d_logits.data());
  for (size_t r = 0; r < rows; ++r) {
    double total = 0;
    for (size_t j = 0; j < n; ++j)
      total += std::exp(static_cast<double>(logits[r * n + j]));
    double h = 0;
    std::vector<double> p(n);
    for (size_t j = 0; j < n; ++j) {
      p[j] = std::exp(static_cast<double>(logits[r * n + j])) / total;
      h -= p[j] * std::log(p[j]);
    }
    CHECK(close(logp[r], std::log(p[actions[r]])));
    CHECK(close(ent[r], h));
    for (size_t j = 0; j < n; ++j) {
      double want = d_logp[r] * ((j == static_cast<size_t>(actions[r])) - p[j]) -
                    d_ent[r] * p[j] * (std::log(p[j]) + h);
      CHECK(close(d_logits[r * n + j], want));
    }
  }
  if (!have_gpu()) {
    TROUPE_SKIP("CUDA twins of the categorical head not checked (no GPU); the CPU twins "
                "were checked against float64");
  }
  auto dl = to_device(logits);
  auto da = to_device(actions);
  auto ddl = to_device(d_logp), dde = to_device(d_ent);
  device_array<float> dls, dlogp, dent, dgrad;
  REQUIRE(dls.reserve(rows * n));
  REQUIRE(dlogp.reserve(rows));
  REQUIRE(dent.reserve(rows));
  REQUIRE(dgrad.reserve(rows * n));
  REQUIRE(cuda_categorical_forward_async(dl.data(), da.data(), rows, n, dls.data(),
                                         dlogp.data(), dent.data(), nullptr));
  REQUIRE(cuda_categorical_backward_async(dls.data(), dent.data(), da.data(), ddl.data(),
                                          dde.data(), rows, n, dgrad.data(), nullptr));
  require_close(to_host(dlogp, rows), logp, 1e-5);
  require_close(to_host(dent, rows), ent, 1e-5);
  require_close(to_host(dgrad, rows * n), d_logits, 1e-5);
}

TEST_CASE("the diagonal Gaussian head's log-probability and backward match float64") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const size_t rows = 33, d = 3;
  auto mean = random_floats(rows * d, rng), actions = random_floats(rows * d, rng);
  auto log_std = random_floats(d, rng, 0.5f);
  auto d_logp = random_floats(rows, rng), d_ent = random_floats(rows, rng);
  std::vector<float> z(rows * d), logp(rows), ent(rows), d_mean(rows * d), d_ls(rows * d);
  gaussian_forward(mean.data(), log_std.data(), actions.data(), rows, d, z.data(),
                   logp.data(), ent.data());
  gaussian_backward(z.data(), log_std.data(), d_logp.data(), d_ent.data(), rows, d,
                    d_mean.data(), d_ls.data());
  const double pi = 3.14159265358979323846;
  for (size_t r = 0; r < rows; ++r) {
    double lp = 0, h = 0;
    for (size_t j = 0; j < d; ++j) {
      double s = std::exp(static_cast<double>(log_std[j]));
      double zz = (actions[r * d + j] - static_cast<double>(mean[r * d + j])) / s;
      lp += -0.5 * zz * zz - std::log(s) - 0.5 * std::log(2 * pi);
      h += 0.5 + 0.5 * std::log(2 * pi) + log_std[j];
      CHECK(close(d_mean[r * d + j], d_logp[r] * zz / s));
      CHECK(close(d_ls[r * d + j], d_logp[r] * (zz * zz - 1) + d_ent[r]));
    }
    CHECK(close(logp[r], lp));
    CHECK(close(ent[r], h));
  }
  if (!have_gpu()) {
    TROUPE_SKIP(
      "CUDA twins of the Gaussian head not checked (no GPU); the CPU twins were "
      "checked against float64");
  }
  auto dm = to_device(mean), dact = to_device(actions), dls = to_device(log_std);
  auto ddl = to_device(d_logp), dde = to_device(d_ent);
  device_array<float> dz, dlogp, dent, ddm, ddls;
  REQUIRE(dz.reserve(rows * d));
  REQUIRE(dlogp.reserve(rows));
  REQUIRE(dent.reserve(rows));
  REQUIRE(ddm.reserve(rows * d));
  REQUIRE(ddls.reserve(rows * d));
  REQUIRE(cuda_gaussian_forward_async(dm.data(), dls.data(), dact.data(), rows, d,
                                      dz.data(), dlogp.data(), dent.data(), nullptr));
  REQUIRE(cuda_gaussian_backward_async(dz.data(), dls.data(), ddl.data(), dde.data(),
                                       rows, d, ddm.data(), ddls.data(), nullptr));
  require_close(to_host(dlogp, rows), logp, 1e-5);
  require_close(to_host(ddm, rows * d), d_mean, 1e-5);
  require_close(to_host(ddls, rows * d), d_ls, 1e-5);
}

TEST_CASE("PPO's per-row terms pick the clipped or unclipped branch like the loss") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const size_t rows = 200;
  auto logp = random_floats(rows, rng, 0.3f), old_logp = random_floats(rows, rng, 0.3f);
  auto ent = random_floats(rows, rng), value = random_floats(rows, rng);
  auto adv = random_floats(rows, rng), ret = random_floats(rows, rng);
  auto old_v = random_floats(rows, rng);
  ppo_term_constants c{0.2f, 0.5f, 0.01f, 1.0f / rows, true};
  std::vector<float> dl(rows), de(rows), dv(rows), terms(rows * 5);
  ppo_terms(logp.data(), ent.data(), value.data(), old_logp.data(), adv.data(),
            ret.data(), old_v.data(), rows, c, dl.data(), de.data(), dv.data(),
            terms.data());
  size_t clipped_rows = 0;
  for (size_t r = 0; r < rows; ++r) {
    double ratio = std::exp(static_cast<double>(logp[r]) - old_logp[r]);
    double a = adv[r];
    double u = -a * ratio, k = -a * std::clamp(ratio, 0.8, 1.2);
    CHECK(close(terms[r * 5], std::max(u, k)));
    CHECK(close(dl[r], u >= k ? -a * ratio / rows : 0.0, 1e-4));
    clipped_rows += u < k;
    double e1 = value[r] - static_cast<double>(ret[r]);
    double delta = value[r] - static_cast<double>(old_v[r]);
    double e2 = old_v[r] + std::clamp(delta, -0.2, 0.2) - ret[r];
    CHECK(close(terms[r * 5 + 1], std::max(e1 * e1, e2 * e2), 1e-4));
    double want_dv = e1 * e1 >= e2 * e2 ? 0.5 * e1 / rows
                                        : (std::abs(delta) < 0.2 ? 0.5 * e2 / rows : 0.0);
    CHECK(close(dv[r], want_dv, 1e-4));
    CHECK(close(de[r], -0.01 / rows));
  }
  CHECK(clipped_rows > 0);
  if (!have_gpu()) {
    TROUPE_SKIP("CUDA twin of ppo_terms not checked (no GPU); the CPU twin was checked");
  }
  auto d_logp = to_device(logp), d_ent = to_device(ent), d_value = to_device(value),
       d_old = to_device(old_logp), d_adv = to_device(adv), d_ret = to_device(ret),
       d_oldv = to_device(old_v);
  device_array<float> gdl, gde, gdv, gterms;
  REQUIRE(gdl.reserve(rows));
  REQUIRE(gde.reserve(rows));
  REQUIRE(gdv.reserve(rows));
  REQUIRE(gterms.reserve(rows * 5));
  REQUIRE(cuda_ppo_terms_async(
    d_logp.data(), d_ent.data(), d_value.data(), d_old.data(), d_adv.data(), d_ret.data(),
    d_oldv.data(), rows, c, gdl.data(), gde.data(), gdv.data(), gterms.data(), nullptr));
  require_close(to_host(gdl, rows), dl, 1e-5);
  require_close(to_host(gdv, rows), dv, 1e-5);
  require_close(to_host(gterms, rows * 5), terms, 1e-5);
}

TEST_CASE("observation normalization and batch norm forward and backward match float64") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const size_t rows = 29, cols = 7;
  auto x = random_floats(rows * cols, rng, 3.0f), mean = random_floats(cols, rng);
  std::vector<float> var(cols);
  for (auto& v : var)
    v = 0.2f + std::abs(random_floats(1, rng)[0]);
  std::vector<float> inv_std(cols);
  inverse_std(var.data(), cols, 1e-5, inv_std.data());
  for (size_t j = 0; j < cols; ++j)
    CHECK(close(inv_std[j], 1.0 / std::sqrt(var[j] + 1e-5)));
  std::vector<float> out(rows * cols);
  normalize_clip(x.data(), mean.data(), inv_std.data(), rows, cols, 2.5f, out.data());
  for (size_t i = 0; i < rows * cols; ++i)
    CHECK(close(
      out[i], std::clamp((x[i] - static_cast<double>(mean[i % cols])) * inv_std[i % cols],
                         -2.5, 2.5)));
  auto gamma = random_floats(cols, rng), beta = random_floats(cols, rng);
  auto dy = random_floats(rows * cols, rng);
  std::vector<float> zhat(rows * cols), y(rows * cols), dz(rows * cols);
  batch_norm_forward(x.data(), mean.data(), inv_std.data(), gamma.data(), beta.data(),
                     rows, cols, zhat.data(), y.data());
  std::vector<float> sum_dy(cols, 0.0f), sum_dy_zhat(cols, 0.0f);
  for (size_t i = 0; i < rows * cols; ++i) {
    sum_dy[i % cols] += dy[i];
    sum_dy_zhat[i % cols] += dy[i] * zhat[i];
  }
  for (bool batch_stats : {true, false}) {
    batch_norm_backward(dy.data(), zhat.data(), gamma.data(), inv_std.data(),
                        sum_dy.data(), sum_dy_zhat.data(), rows, cols, batch_stats,
                        dz.data());
    for (size_t i = 0; i < rows * cols; ++i) {
      size_t j = i % cols;
      double n = (x[i] - static_cast<double>(mean[j])) * inv_std[j];
      CHECK(close(zhat[i], n));
      CHECK(close(y[i], gamma[j] * n + beta[j]));
      double s = static_cast<double>(gamma[j]) * inv_std[j];
      double want = batch_stats
                      ? s * (dy[i] - sum_dy[j] / rows - n * sum_dy_zhat[j] / rows)
                      : s * dy[i];
      CHECK(close(dz[i], want, 1e-4));
    }
    if (!have_gpu())
      continue;
    auto dx = to_device(x), dmean = to_device(mean), dinv = to_device(inv_std),
         dgamma = to_device(gamma), dbeta = to_device(beta), ddy = to_device(dy),
         dsum = to_device(sum_dy), dsumz = to_device(sum_dy_zhat);
    device_array<float> dout, dzhat, dyy, ddz;
    REQUIRE(dout.reserve(rows * cols));
    REQUIRE(dzhat.reserve(rows * cols));
    REQUIRE(dyy.reserve(rows * cols));
    REQUIRE(ddz.reserve(rows * cols));
    REQUIRE(cuda_normalize_clip_async(dx.data(), dmean.data(), dinv.data(), rows, cols,
                                      2.5f, dout.data(), nullptr));
    REQUIRE(cuda_batch_norm_forward_async(dx.data(), dmean.data(), dinv.data(),
                                          dgamma.data(), dbeta.data(), rows, cols,
                                          dzhat.data(), dyy.data(), nullptr));
    REQUIRE(cuda_batch_norm_backward_async(ddy.data(), dzhat.data(), dgamma.data(),
                                           dinv.data(), dsum.data(), dsumz.data(), rows,
                                           cols, batch_stats, ddz.data(), nullptr));
    require_close(to_host(dout, rows * cols), out, 1e-6);
    require_close(to_host(dyy, rows * cols), y, 1e-5);
    require_close(to_host(ddz, rows * cols), dz, 1e-5);
  }
  if (!have_gpu())
    TROUPE_SKIP(
      "CUDA twins of normalize_clip and batch norm not checked (no GPU); the CPU "
      "twins were checked against float64");
}

TEST_CASE("local batch norm's running statistics follow PyTorch's momentum update") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const size_t rows = 50, cols = 6;
  auto z = random_floats(rows * cols, rng, 2.0f);
  auto m = compute_moments(z.data(), rows, cols);
  std::vector<double> raw{static_cast<double>(m.count)};
  raw.insert(raw.end(), m.mean.begin(), m.mean.end());
  raw.insert(raw.end(), m.m2.begin(), m.m2.end());
  auto running_mean = random_floats(cols, rng), running_var = random_floats(cols, rng);
  for (auto& v : running_var)
    v = std::abs(v) + 0.1f;
  auto rm0 = running_mean, rv0 = running_var;
  running_stats_update(raw.data(), cols, 0.1, running_mean.data(), running_var.data());
  for (size_t j = 0; j < cols; ++j) {
    double mean = 0, ss = 0;
    for (size_t r = 0; r < rows; ++r)
      mean += z[r * cols + j];
    mean /= rows;
    for (size_t r = 0; r < rows; ++r)
      ss += (z[r * cols + j] - mean) * (z[r * cols + j] - mean);
    CHECK(close(running_mean[j], 0.9 * rm0[j] + 0.1 * mean));
    CHECK(close(running_var[j], 0.9 * rv0[j] + 0.1 * ss / (rows - 1)));
  }
  if (!have_gpu()) {
    TROUPE_SKIP(
      "CUDA twin of running_stats_update not checked (no GPU); the CPU twin was "
      "checked");
  }
  auto d_raw = to_device(raw);
  auto d_rm = to_device(rm0), d_rv = to_device(rv0);
  REQUIRE(cuda_running_stats_update_async(d_raw.data(), cols, 0.1, d_rm.data(),
                                          d_rv.data(), nullptr));
  require_close(to_host(d_rm, cols), running_mean, 1e-6);
  require_close(to_host(d_rv, cols), running_var, 1e-6);
}

TEST_CASE("the CUDA Adam step matches the CPU twin") {
  if (!have_gpu()) {
    TROUPE_SKIP("CUDA Adam parity (no GPU)");
  }
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const size_t n = 5000;
  auto p = random_floats(n, rng), g = random_floats(n, rng);
  std::vector<float> m(n, 0.1f), v(n, 0.2f);
  auto dp = to_device(p), dg = to_device(g), dm = to_device(m), dv = to_device(v);
  adam_hyper hyper;
  hyper.lr = 1e-3;
  hyper.step = 7;
  adam_step(p.data(), g.data(), m.data(), v.data(), n, hyper);
  REQUIRE(
    cuda_adam_step_async(dp.data(), dg.data(), dm.data(), dv.data(), n, hyper, nullptr));
  require_close(to_host(dp, n), p, 1e-6);
  require_close(to_host(dm, n), m, 1e-6);
  require_close(to_host(dv, n), v, 1e-6);
}

TEST_CASE("the CUDA context's GEMMs and column sums match row-major float64 products") {
  if (!have_gpu()) {
    TROUPE_SKIP("cuBLAS GEMM parity (no GPU)");
  }
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const size_t rows = 67, in = 13, out = 9;
  auto x = random_floats(rows * in, rng), w = random_floats(out * in, rng);
  auto dz = random_floats(rows * out, rng);
  auto ctx = cuda_context::create(0, false);
  REQUIRE(ctx);
  auto& c = **ctx;
  auto dx = to_device(x), dw = to_device(w), ddz = to_device(dz);
  device_array<float> z, dW, dX, sums;
  REQUIRE(z.reserve(rows * out));
  REQUIRE(dW.reserve(out * in));
  REQUIRE(dX.reserve(rows * in));
  REQUIRE(sums.reserve(out));
  REQUIRE(c.gemm_x_wt(dx.data(), dw.data(), rows, in, out, z.data()));
  REQUIRE(c.gemm_dzt_x(ddz.data(), dx.data(), rows, in, out, dW.data()));
  REQUIRE(c.gemm_dz_w(ddz.data(), dw.data(), rows, in, out, dX.data()));
  REQUIRE(c.column_sums(ddz.data(), rows, out, sums.data()));
  REQUIRE(c.synchronize());
  auto hz = to_host(z, rows * out), hW = to_host(dW, out * in),
       hX = to_host(dX, rows * in), hs = to_host(sums, out);
  for (size_t r = 0; r < rows; ++r)
    for (size_t o = 0; o < out; ++o) {
      double acc = 0;
      for (size_t i = 0; i < in; ++i)
        acc += static_cast<double>(x[r * in + i]) * w[o * in + i];
      CHECK(close(hz[r * out + o], acc, 1e-5));
    }
  for (size_t o = 0; o < out; ++o) {
    double s = 0;
    for (size_t r = 0; r < rows; ++r)
      s += dz[r * out + o];
    CHECK(close(hs[o], s, 1e-5));
    for (size_t i = 0; i < in; ++i) {
      double acc = 0;
      for (size_t r = 0; r < rows; ++r)
        acc += static_cast<double>(dz[r * out + o]) * x[r * in + i];
      CHECK(close(hW[o * in + i], acc, 1e-5));
    }
  }
  for (size_t r = 0; r < rows; ++r)
    for (size_t i = 0; i < in; ++i) {
      double acc = 0;
      for (size_t o = 0; o < out; ++o)
        acc += static_cast<double>(dz[r * out + o]) * w[o * in + i];
      CHECK(close(hX[r * in + i], acc, 1e-5));
    }
}
