// The float passes of learners/mlp.hpp in both of their copies (portable, and
// AVX-512 where the CPU has it) against the float64 reference path.
#include "learners/mlp.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include <doctest/doctest.h>

#include "tests/seed.hpp"

using namespace troupe::learners;

namespace {

struct pass_outputs {
  std::vector<double> out;  ///< forward output
  std::vector<double> grad; ///< gradient of sum(out * d_out)
};

template <class T>
pass_outputs run_passes(const model_spec& spec, const model_layout& layout,
                        const std::vector<double>& params,
                        const std::vector<double>& buffers,
                        const std::vector<double>& input,
                        const std::vector<double>& d_out, size_t rows) {
  std::vector<T> p(params.begin(), params.end()), b(buffers.begin(), buffers.end());
  std::vector<T> x(input.begin(), input.end()), d(d_out.begin(), d_out.end());
  std::vector<T> grad(p.size(), T{0});
  network_cache<T> cache;
  network_forward(layout.actor, spec, p.data(), b.data(), x.data(), rows,
                  forward_mode::train, cache);
  network_backward(layout.actor, spec, p.data(), cache, d.data(), grad.data());
  return {std::vector<double>(cache.out.begin(), cache.out.end()),
          std::vector<double>(grad.begin(), grad.end())};
}

// Largest |a - b| / (1 + |b|) over two arrays of the same size.
double worst_error(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]) / (1.0 + std::abs(b[i])));
  return worst;
}

} // namespace

TEST_CASE("the portable and AVX-512 float passes both match the float64 reference") {
  const uint64_t seed = troupe::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (auto bn : {batch_norm_mode::none, batch_norm_mode::local, batch_norm_mode::global})
    for (auto act : {activation_kind::tanh, activation_kind::relu}) {
      model_spec spec;
      spec.obs_dim = 7;
      spec.n = 5;
      spec.hidden = {64, 32};
      spec.activation = act;
      spec.batch_norm = bn;
      REQUIRE(spec.validate().ok());
      const auto layout = make_layout(spec);
      const size_t rows = 200 + rng() % 100;
      CAPTURE(to_string(bn));
      CAPTURE(to_string(act));
      std::vector<double> params(layout.param_count), buffers(layout.buffer_count);
      for (auto& v : params)
        v = 0.3 * normal(rng);
      for (auto& v : buffers)
        v = 0.5 + std::abs(normal(rng)); // positive, also where it is a variance
      std::vector<double> input(rows * 7), d_out(rows * 5);
      for (auto& v : input)
        v = normal(rng);
      for (auto& v : d_out)
        v = normal(rng) / static_cast<double>(rows);
      // A relu kink that float rounding moves across changes one row's
      // gradient by about 1/rows; tanh has no kinks.
      const double grad_tol = act == activation_kind::relu ? 2e-2 : 1e-4;
      const auto reference =
        run_passes<double>(spec, layout, params, buffers, input, d_out, rows);

      set_avx512_enabled(false);
      REQUIRE_FALSE(avx512_in_use());
      const auto portable =
        run_passes<float>(spec, layout, params, buffers, input, d_out, rows);
      set_avx512_enabled(true);
      CHECK(worst_error(portable.out, reference.out) < 1e-4);
      CHECK(worst_error(portable.grad, reference.grad) < grad_tol);

      if (avx512_in_use()) {
        const auto wide =
          run_passes<float>(spec, layout, params, buffers, input, d_out, rows);
        CHECK(worst_error(wide.out, reference.out) < 1e-4);
        CHECK(worst_error(wide.grad, reference.grad) < grad_tol);
        CHECK(worst_error(wide.out, portable.out) < 1e-4);
      } else {
        MESSAGE(
          "this CPU or build has no AVX-512 copy: only the portable copy was compared");
      }
    }
}
