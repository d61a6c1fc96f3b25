#include "envs/instance_vector_env.hpp"

#include <exception>

#include <fmt/format.h>

namespace troupe::envs {

namespace {

class instance_vector_env final : public vector_env {
public:
  instance_vector_env(const env_spec& spec, std::vector<std::unique_ptr<env>> envs,
                      size_t threads)
    : vector_env(spec, envs.size(), threads), envs_(std::move(envs)) {
    // vector_env::step checked the actions against its own clipping setting
    // already; the instances clip what it let through.
    for (auto& e : envs_)
      e->set_clip_box_actions(true);
  }

  bool can_save_state() const noexcept override { return envs_[0]->can_save_state(); }

  std::vector<double> state(size_t i) const override { return envs_[i]->state(); }

  int elapsed_steps(size_t i) const override { return envs_[i]->elapsed_steps(); }

  std::array<uint64_t, 4> rng_state(size_t i) const override {
    return envs_[i]->rng_state();
  }

protected:
  status restore_env(size_t i, const std::array<uint64_t, 4>& words, const double* state,
                     int elapsed_steps) override {
    env& e = *envs_[i];
    if (auto ok = e.set_rng_state(words); !ok)
      return ok;
    std::vector<double> values(state, state + spec().state_dim());
    if (auto ok = e.set_state(values, &observations_[i * obs_dim()]); !ok)
      return ok;
    e.set_elapsed_steps(elapsed_steps);
    return {};
  }

  void reset_range(size_t begin, size_t end, uint64_t seed) override {
    for (size_t i = begin; i < end; ++i)
      envs_[i]->reset(seed + i, &observations_[i * obs_dim()]);
  }

  status step_range(size_t begin, size_t end, const float* actions) override {
    const size_t od = obs_dim(), ad = action_dim();
    for (size_t i = begin; i < end; ++i) {
      float* obs = &observations_[i * od];
      if (terminated_[i] | truncated_[i]) {
        envs_[i]->reset(obs);
        rewards_[i] = 0.0f;
        terminated_[i] = 0;
        truncated_[i] = 0;
        autoreset_[i] = 1;
        continue;
      }
      auto out = envs_[i]->step(actions + i * ad, obs);
      if (!out)
        return make_error(out.err().code, "environment {}: {}", i, out.err().message);
      rewards_[i] = static_cast<float>(out->reward);
      terminated_[i] = out->terminated;
      truncated_[i] = out->truncated;
      autoreset_[i] = 0;
    }
    return {};
  }

private:
  std::vector<std::unique_ptr<env>> envs_;
};

} // namespace

status check_made_env(const env_spec& spec, const env* made) {
  if (!made)
    return make_error(errc::invalid_argument,
                      "{}: the environment factory made no environment", spec.id);
  const env_spec& got = made->spec();
  if (got.id != spec.id ||
      got.observation_space.size() != spec.observation_space.size() ||
      got.action_space.size() != spec.action_space.size() ||
      got.state_dim() != spec.state_dim())
    return make_error(
      errc::invalid_argument,
      "{}: the environment factory made an environment of id '{}' with {} "
      "observation, {} action and {} state value(s); the registration says "
      "id '{}' with {}, {} and {}",
      spec.id, got.id, got.observation_space.size(), got.action_space.size(),
      got.state_dim(), spec.id, spec.observation_space.size(), spec.action_space.size(),
      spec.state_dim());
  return {};
}

result<std::unique_ptr<vector_env>>
make_instance_vector_env(const env_spec& spec,
                         const std::function<std::unique_ptr<env>()>& make,
                         size_t num_envs, size_t threads) {
  std::vector<std::unique_ptr<env>> envs;
  envs.reserve(num_envs);
  for (size_t i = 0; i < num_envs; ++i) {
    std::unique_ptr<env> e;
    try {
      e = make();
    } catch (const std::exception& x) {
      return make_error(errc::invalid_argument,
                        "{}: environment {} of {}: the environment factory failed: {}",
                        spec.id, i, num_envs, x.what());
    }
    if (auto ok = check_made_env(spec, e.get()); !ok)
      return make_error(ok.err().code, "environment {} of {}: {}", i, num_envs,
                        ok.err().message);
    envs.push_back(std::move(e));
  }
  return std::unique_ptr<vector_env>(
    new instance_vector_env(spec, std::move(envs), threads));
}

} // namespace troupe::envs
