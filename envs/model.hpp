// Adapters that turn an environment model, a small struct with the dynamics
// of one environment (envs/cartpole.hpp is the template to copy), into the
// `env` and `vector_env` interfaces (what a model provides:
// docs/environments.md, "Adding an environment").
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "envs/env.hpp"
#include "envs/registry.hpp"
#include "envs/vector_env.hpp"
#include "base/rng.hpp"

namespace troupe::envs {

/// The environments' generator (base/rng.hpp).
using base::rng;

/// What a model's step returns.
struct model_step {
  double reward = 0;       ///< reward of the transition
  bool terminated = false; ///< the MDP reached a terminal state
};

/// Whether Model has `void resume(int elapsed_steps)`.
template <class Model, class = void>
struct has_resume : std::false_type {};

template <class Model>
struct has_resume<Model, std::void_t<decltype(std::declval<Model&>().resume(0))>>
  : std::true_type {};

/// Environments per thread below which a vector of Model uses no extra
/// thread: Model::min_envs_per_thread where it declares one (a model whose
/// step costs far more than a thread hand-off), else vector_env's.
template <class Model, class = void>
struct min_envs_per_thread_of
  : std::integral_constant<size_t, vector_env::min_envs_per_thread> {};

template <class Model>
struct min_envs_per_thread_of<Model, std::void_t<decltype(Model::min_envs_per_thread)>>
  : std::integral_constant<size_t, Model::min_envs_per_thread> {};

/// Whether Model has reward_term_names() and reward_terms(double*).
template <class Model, class = void>
struct has_reward_terms : std::false_type {};

template <class Model>
struct has_reward_terms<
  Model, std::void_t<decltype(Model::reward_term_names()),
                     decltype(std::declval<const Model&>().reward_terms(nullptr))>>
  : std::true_type {};

/// Whether Model has counter_names() and add_counters(uint64_t*).
template <class Model, class = void>
struct has_counters : std::false_type {};

template <class Model>
struct has_counters<
  Model, std::void_t<decltype(Model::counter_names()),
                     decltype(std::declval<const Model&>().add_counters(nullptr))>>
  : std::true_type {};

/// Whether Model has failed() and take_failure().
template <class Model, class = void>
struct has_failure : std::false_type {};

template <class Model>
struct has_failure<Model, std::void_t<decltype(std::declval<const Model&>().failed()),
                                      decltype(std::declval<Model&>().take_failure())>>
  : std::true_type {};

/// Model::make_spec() with the model's reward term and counter names.
template <class Model>
env_spec make_model_spec() {
  env_spec spec = Model::make_spec();
  if constexpr (has_reward_terms<Model>::value)
    spec.reward_terms = Model::reward_term_names();
  if constexpr (has_counters<Model>::value)
    spec.counters = Model::counter_names();
  return spec;
}

/// The spec of a model, built once.
template <class Model>
const env_spec& model_spec() {
  static const env_spec spec = make_model_spec<Model>();
  return spec;
}

/// One environment of a model behind the `env` interface.
template <class Model>
class model_env final : public env {
public:
  const env_spec& spec() const noexcept override { return model_spec<Model>(); }

  void reset(uint64_t seed, float* obs) override {
    rng_.seed_with(seed);
    reset(obs);
  }

  void reset(float* obs) override {
    model_.reset(rng_);
    elapsed_ = 0;
    ready_ = true;
    model_.observe(obs);
  }

  result<step_result> step(const float* action, float* obs) override {
    if (!ready_)
      return make_error(errc::invalid_argument,
                        "{}: step() before reset() or set_state()", spec().id);
    if (auto ok = spec().action_space.check_action(action, clip_box_actions()); !ok)
      return make_error(ok.err().code, "{}: {}", spec().id, ok.err().message);
    if (auto failed = take_failure(); !failed) // a failed reset
      return failed.err();
    auto out = model_.step(action);
    if (auto failed = take_failure(); !failed)
      return failed.err();
    ++elapsed_;
    model_.observe(obs);
    return step_result{out.reward, out.terminated, elapsed_ >= spec().max_episode_steps};
  }

  std::vector<double> state() const override {
    std::vector<double> out(spec().state_dim());
    model_.get_state(out.data());
    return out;
  }

  status set_state(const std::vector<double>& values, float* obs) override {
    const auto& s = spec();
    if (values.size() != s.state_dim())
      return make_error(errc::dimension_mismatch,
                        "{}: the state has {} values ({}), got {}", s.id, s.state_dim(),
                        fmt::join(s.state_names, ", "), values.size());
    for (size_t i = 0; i < values.size(); ++i)
      if (!std::isfinite(values[i]))
        return make_error(errc::non_finite, "{}: state value {} ({}) is {}", s.id, i,
                          s.state_names[i], values[i]);
    model_.set_state(values.data());
    ready_ = true;
    if (auto failed = take_failure(); !failed)
      return failed;
    if (obs)
      model_.observe(obs);
    return {};
  }

  int elapsed_steps() const noexcept override { return elapsed_; }
  void set_elapsed_steps(int steps) noexcept override { elapsed_ = steps; }

  std::array<uint64_t, 4> rng_state() const noexcept override { return rng_.state(); }

  status set_rng_state(const std::array<uint64_t, 4>& words) override {
    if (!rng_.set_state(words))
      return make_error(errc::invalid_argument,
                        "{}: generator state must not be all zero (xoshiro256++ cannot "
                        "leave it), got 0, 0, 0, 0",
                        spec().id);
    return {};
  }

private:
  // The model's failure as an error naming the environment, after which it
  // needs a reset; nothing for a model that cannot fail.
  status take_failure() {
    if constexpr (has_failure<Model>::value)
      if (model_.failed()) {
        ready_ = false;
        return make_error(errc::invalid_argument, "{}: {}; reset the environment",
                          spec().id, model_.take_failure());
      }
    return {};
  }

  Model model_{};
  rng rng_;
  int elapsed_ = 0;
  bool ready_ = false;
};

/// N environments of a model stepped in one loop per thread.
template <class Model>
class model_vector_env final : public vector_env {
public:
  model_vector_env(size_t num_envs, size_t threads)
    : vector_env(model_spec<Model>(), num_envs, threads,
                 min_envs_per_thread_of<Model>::value),
      models_(num_envs), rngs_(num_envs), elapsed_(num_envs, 0),
      max_steps_(model_spec<Model>().max_episode_steps),
      terms_(model_spec<Model>().reward_terms.size()) {}

  std::vector<double> state(size_t i) const override {
    std::vector<double> out(spec().state_dim());
    models_[i].get_state(out.data());
    return out;
  }

  int elapsed_steps(size_t i) const override { return elapsed_[i]; }

  std::array<uint64_t, 4> rng_state(size_t i) const override { return rngs_[i].state(); }

  void counters(uint64_t* out) const override {
    vector_env::counters(out);
    if constexpr (has_counters<Model>::value)
      for (const auto& m : models_)
        m.add_counters(out);
  }

protected:
  status restore_env(size_t i, const std::array<uint64_t, 4>& words, const double* state,
                     int elapsed_steps) override {
    TROUPE_CHECK(rngs_[i].set_state(words), "{}: environment {}: all-zero generator",
                 spec().id, i);
    models_[i].set_state(state);
    if constexpr (has_failure<Model>::value)
      if (models_[i].failed())
        return make_error(errc::invalid_argument, "{}: environment {}: {}", spec().id, i,
                          models_[i].take_failure());
    if constexpr (has_resume<Model>::value)
      models_[i].resume(elapsed_steps);
    elapsed_[i] = elapsed_steps;
    models_[i].observe(&observations_[i * obs_dim()]);
    return {};
  }

  void reset_range(size_t begin, size_t end, uint64_t seed) override {
    const size_t od = obs_dim();
    for (size_t i = begin; i < end; ++i) {
      rngs_[i].seed_with(seed + i);
      models_[i].reset(rngs_[i]);
      elapsed_[i] = 0;
      models_[i].observe(&observations_[i * od]);
    }
  }

  status step_range(size_t begin, size_t end, const float* actions) override {
    const size_t od = obs_dim();
    const size_t ad = action_dim();
    status first_failure;
    for (size_t i = begin; i < end; ++i) {
      auto& m = models_[i];
      if (terminated_[i] | truncated_[i]) {
        m.reset(rngs_[i]);
        elapsed_[i] = 0;
        rewards_[i] = 0.0f;
        terminated_[i] = 0;
        truncated_[i] = 0;
        autoreset_[i] = 1;
        if constexpr (has_reward_terms<Model>::value)
          std::fill_n(&reward_terms_[i * terms_], terms_, 0.0);
      } else {
        auto out = m.step(actions + i * ad);
        rewards_[i] = static_cast<float>(out.reward);
        terminated_[i] = out.terminated;
        truncated_[i] = ++elapsed_[i] >= max_steps_;
        autoreset_[i] = 0;
        if constexpr (has_reward_terms<Model>::value)
          m.reward_terms(&reward_terms_[i * terms_]);
      }
      if constexpr (has_failure<Model>::value)
        if (m.failed()) {
          // This step's or the last reset's: the episode ends here, and the
          // next step resets the environment.
          auto message = m.take_failure();
          terminated_[i] = 1;
          if (first_failure)
            first_failure = make_error(errc::invalid_argument, "{}: environment {}: {}",
                                       spec().id, i, message);
        }
      m.observe(&observations_[i * od]);
    }
    return first_failure;
  }

private:
  std::vector<Model> models_;
  std::vector<rng> rngs_;
  std::vector<int> elapsed_;
  int max_steps_;
  size_t terms_; // reward terms per environment
};

/// The registration of a model: its spec and both adapters (see
/// register_env in envs/registry.hpp).
template <class Model>
registration model_registration() {
  return {model_spec<Model>(),
          [] { return std::unique_ptr<env>(new model_env<Model>()); },
          [](size_t n, size_t threads) {
            return std::unique_ptr<vector_env>(new model_vector_env<Model>(n, threads));
          }};
}

} // namespace troupe::envs
