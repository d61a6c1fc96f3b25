#include "envs/cartpole_vector.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "envs/cartpole.hpp"
#include "envs/fast_math.hpp"
#include "base/rng.hpp"

namespace troupe::envs {

namespace {

struct polynomial_sincos {
  static double sin(double x) noexcept { return fast::sin_small(x); }
  static double cos(double x) noexcept { return fast::cos_small(x); }
};

struct libm_sincos {
  static double sin(double x) noexcept { return std::sin(x); }
  static double cos(double x) noexcept { return std::cos(x); }
};

// One step of every environment in [b, e): cartpole::euler_update without
// branches, in free functions with restrict parameters so that GCC vectorizes
// the loops.
template <class SinCos>
void cartpole_dynamics(size_t b, size_t e, const float* __restrict actions,
                       double* __restrict x_p, double* __restrict x_dot_p,
                       double* __restrict theta_p, double* __restrict theta_dot_p,
                       float* __restrict obs_p) noexcept {
  for (size_t i = b; i < e; ++i) {
    double x = x_p[i], x_dot = x_dot_p[i], theta = theta_p[i], theta_dot = theta_dot_p[i];
    double force = actions[i] == 1.0f ? cartpole::force_mag : -cartpole::force_mag;
    cartpole::euler_update(force, SinCos::sin(theta), SinCos::cos(theta), x, x_dot, theta,
                           theta_dot);
    x_p[i] = x;
    x_dot_p[i] = x_dot;
    theta_p[i] = theta;
    theta_dot_p[i] = theta_dot;
    obs_p[4 * i + 0] = static_cast<float>(x);
    obs_p[4 * i + 1] = static_cast<float>(x_dot);
    obs_p[4 * i + 2] = static_cast<float>(theta);
    obs_p[4 * i + 3] = static_cast<float>(theta_dot);
  }
}

// Time limit, termination and reward flags after cartpole_dynamics. A second
// loop: mixing byte and double lanes in one loop keeps it from vectorizing.
void cartpole_flags(size_t b, size_t e, const double* __restrict x_p,
                    const double* __restrict theta_p, int* __restrict elapsed_p,
                    int max_steps, float* __restrict reward_p, uint8_t* __restrict term_p,
                    uint8_t* __restrict trunc_p, uint8_t* __restrict reset_p) noexcept {
  for (size_t i = b; i < e; ++i) {
    const double x = x_p[i], theta = theta_p[i];
    int elapsed = elapsed_p[i] + 1;
    elapsed_p[i] = elapsed;
    term_p[i] = (x < -cartpole::x_threshold) | (x > cartpole::x_threshold) |
                (theta < -cartpole::theta_threshold) |
                (theta > cartpole::theta_threshold);
    trunc_p[i] = elapsed >= max_steps;
    reward_p[i] = 1.0f;
    reset_p[i] = 0;
  }
}

class cartpole_vector final : public vector_env {
public:
  cartpole_vector(size_t num_envs, size_t threads)
    : vector_env(model_spec<cartpole>(), num_envs, threads), x_(num_envs),
      x_dot_(num_envs), theta_(num_envs), theta_dot_(num_envs), elapsed_(num_envs, 0),
      rngs_(num_envs) {}

  std::vector<double> state(size_t i) const override {
    return {x_[i], x_dot_[i], theta_[i], theta_dot_[i]};
  }

  int elapsed_steps(size_t i) const override { return elapsed_[i]; }

  std::array<uint64_t, 4> rng_state(size_t i) const override { return rngs_[i].state(); }

protected:
  status restore_env(size_t i, const std::array<uint64_t, 4>& words, const double* state,
                     int elapsed_steps) override {
    TROUPE_CHECK(rngs_[i].set_state(words),
                 "CartPole-v1: environment {}: all-zero generator", i);
    cartpole m;
    m.set_state(state);
    x_[i] = m.x;
    x_dot_[i] = m.x_dot;
    theta_[i] = m.theta;
    theta_dot_[i] = m.theta_dot;
    elapsed_[i] = elapsed_steps;
    m.observe(&observations_[i * 4]);
    return {};
  }

  void reset_range(size_t begin, size_t end, uint64_t seed) override {
    for (size_t i = begin; i < end; ++i) {
      rngs_[i].seed_with(seed + i);
      reset_one(i);
    }
  }

  status step_range(size_t begin, size_t end, const float* actions) override {
    constexpr size_t block = 256;
    size_t finished[block];
    for (size_t b = begin; b < end; b += block) {
      const size_t e = std::min(end, b + block);
      // Environments that finished on the previous step are reset below
      // instead of stepped; find them before the flags are overwritten.
      uint8_t any_finished = 0;
      for (size_t i = b; i < e; ++i)
        any_finished |= terminated_[i] | truncated_[i];
      size_t n_finished = 0;
      if (any_finished)
        for (size_t i = b; i < e; ++i)
          if (terminated_[i] | truncated_[i])
            finished[n_finished++] = i;

      double max_angle = 0;
      for (size_t i = b; i < e; ++i)
        max_angle = std::max(max_angle, std::fabs(theta_[i]));
      if (max_angle <= fast::max_small_angle)
        dynamics<polynomial_sincos>(b, e, actions);
      else
        dynamics<libm_sincos>(b, e, actions);

      for (size_t k = 0; k < n_finished; ++k) {
        size_t i = finished[k];
        reset_one(i);
        rewards_[i] = 0.0f;
        terminated_[i] = 0;
        truncated_[i] = 0;
        autoreset_[i] = 1;
      }
    }
    return {};
  }

private:
  void reset_one(size_t i) noexcept {
    cartpole m;
    m.reset(rngs_[i]);
    x_[i] = m.x;
    x_dot_[i] = m.x_dot;
    theta_[i] = m.theta;
    theta_dot_[i] = m.theta_dot;
    elapsed_[i] = 0;
    m.observe(&observations_[i * 4]);
  }

  template <class SinCos>
  void dynamics(size_t b, size_t e, const float* actions) noexcept {
    cartpole_dynamics<SinCos>(b, e, actions, x_.data(), x_dot_.data(), theta_.data(),
                              theta_dot_.data(), observations_.data());
    cartpole_flags(b, e, x_.data(), theta_.data(), elapsed_.data(),
                   model_spec<cartpole>().max_episode_steps, rewards_.data(),
                   terminated_.data(), truncated_.data(), autoreset_.data());
  }

  std::vector<double> x_, x_dot_, theta_, theta_dot_;
  std::vector<int> elapsed_;
  std::vector<rng> rngs_;
};

} // namespace

std::unique_ptr<vector_env> make_cartpole_vector(size_t num_envs, size_t threads) {
  return std::make_unique<cartpole_vector>(num_envs, threads);
}

} // namespace troupe::envs
