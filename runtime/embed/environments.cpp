// register_environment: an embedder's troupe::environment behind the envs
// registry's env and vector_env interfaces.
//
// The registry of today (envs/registry.hpp) takes plain function pointers,
// which cannot carry the embedder's factory; each registration therefore
// takes one of a fixed number of trampoline slots (max_registrations) that
// look their factory up by index. When the registry takes std::function
// factories, make_registration() captures the factory instead and the
// trampolines go (a change local to this file).
#include <array>
#include <cmath>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <troupe/troupe.hpp>

#include "envs/registry.hpp"
#include "envs/vector_env.hpp"
#include "kernels/rng.hpp"
#include "runtime/embed/guard.hpp"

namespace troupe {

namespace {

// -- one environment --------------------------------------------------------------

// Checks a finished step of `id`: finite reward and observation.
status check_outcome(const envs::env_spec& spec, const float* obs, double reward) {
  if (!std::isfinite(reward))
    return make_error(errc::non_finite,
                      "environment '{}': step returned reward {} (must "
                      "be finite)",
                      spec.id, reward);
  const size_t dim = spec.observation_space.size();
  for (size_t i = 0; i < dim; ++i)
    if (!std::isfinite(obs[i]))
      return make_error(errc::non_finite,
                        "environment '{}': step returned observation "
                        "value {} = {} (must be finite)",
                        spec.id, i, obs[i]);
  return ok_status();
}

// The float64 "state" of an embedder's environment: only the number of
// episodes it started. The environment's own state is the embedder's and is
// not saved; a resumed run starts fresh episodes (the runner's state file
// needs at least one value per environment).
const std::vector<std::string> embedded_state_names = {"episodes_started"};

// The embedder's environment as an envs::env.
class embedded_env final : public envs::env {
public:
  embedded_env(const envs::env_spec* spec, std::unique_ptr<environment> inner)
    : spec_(spec), inner_(std::move(inner)) {}

  const envs::env_spec& spec() const noexcept override { return *spec_; }

  void reset(uint64_t seed, float* obs) override {
    rng_.seed_with(seed);
    start(obs);
  }

  void reset(float* obs) override { start(obs); }

  result<envs::step_result> step(const float* action, float* obs) override {
    if (!ready_)
      return make_error(errc::invalid_argument, "environment '{}': step before reset",
                        spec_->id);
    envs::step_result out;
    if (auto ok = inner_->step(action, obs, out.reward, out.terminated, out.truncated);
        !ok)
      return make_error(ok.err().code, "environment '{}': step: {}", spec_->id,
                        ok.err().message);
    if (auto ok = check_outcome(*spec_, obs, out.reward); !ok)
      return ok.err();
    ++elapsed_;
    if (spec_->max_episode_steps > 0 && elapsed_ >= spec_->max_episode_steps)
      out.truncated = true;
    return out;
  }

  std::vector<double> state() const override { return {static_cast<double>(episodes_)}; }

  status set_state(const std::vector<double>& values, float* obs) override {
    return make_error(errc::unavailable,
                      "environment '{}' cannot restore a saved state (an embedder's "
                      "environment starts fresh episodes instead)",
                      spec_->id);
  }

  int elapsed_steps() const noexcept override { return elapsed_; }
  void set_elapsed_steps(int steps) noexcept override { elapsed_ = steps; }
  std::array<uint64_t, 4> rng_state() const noexcept override { return rng_.state(); }

  status set_rng_state(const std::array<uint64_t, 4>& words) override {
    if (!rng_.set_state(words))
      return make_error(errc::invalid_argument,
                        "environment '{}': generator state must not be all zero",
                        spec_->id);
    return ok_status();
  }

private:
  void start(float* obs) {
    inner_->reset(rng_.next(), obs);
    elapsed_ = 0;
    ++episodes_;
    ready_ = true;
  }

  const envs::env_spec* spec_;
  std::unique_ptr<environment> inner_;
  kernels::rng rng_;
  int elapsed_ = 0;
  uint64_t episodes_ = 0;
  bool ready_ = false;
};

// -- a batch ----------------------------------------------------------------------

// N embedder's environments with next-step autoreset, as model_vector_env.
// A step that fails ends its episode (terminated, reward 0) and is counted;
// step_range cannot return an error (TODO(registry): envs/callback_env.hpp
// reports it to the runner).
class embedded_vector_env final : public envs::vector_env {
public:
  embedded_vector_env(const envs::env_spec& spec, const environment_factory& factory,
                      size_t n, size_t threads)
    : vector_env(spec, n, threads), rngs_(n), elapsed_(n, 0), episodes_(n, 0) {
    envs_.reserve(n);
    for (size_t i = 0; i < n; ++i)
      envs_.push_back(factory());
  }

  std::vector<double> state(size_t i) const override {
    return {static_cast<double>(episodes_[i])};
  }
  int elapsed_steps(size_t i) const override { return elapsed_[i]; }
  std::array<uint64_t, 4> rng_state(size_t i) const override { return rngs_[i].state(); }

protected:
  void restore_env(size_t i, const std::array<uint64_t, 4>& words, const double* state,
                   int) override {
    // The embedder's state is not saved: a fresh episode from the restored generator.
    episodes_[i] = static_cast<uint64_t>(state[0]);
    TROUPE_CHECK(rngs_[i].set_state(words), "{}: environment {}: all-zero generator",
                 spec().id, i);
    start(i);
  }

  void reset_range(size_t begin, size_t end, uint64_t seed) override {
    for (size_t i = begin; i < end; ++i) {
      rngs_[i].seed_with(seed + i);
      start(i);
    }
  }

  void step_range(size_t begin, size_t end, const float* actions) override {
    const size_t od = obs_dim(), ad = action_dim();
    const int limit = spec().max_episode_steps;
    for (size_t i = begin; i < end; ++i) {
      float* obs = &observations_[i * od];
      if (terminated_[i] | truncated_[i]) {
        start(i);
        rewards_[i] = 0.0f;
        terminated_[i] = 0;
        truncated_[i] = 0;
        autoreset_[i] = 1;
        continue;
      }
      double reward = 0;
      bool terminated = false, truncated = false;
      auto ok = envs_[i]->step(actions + i * ad, obs, reward, terminated, truncated);
      if (ok.ok())
        ok = check_outcome(spec(), obs, reward);
      if (!ok.ok()) {
        reward = 0;
        terminated = true;
        std::fill(obs, obs + od, 0.0f);
      }
      rewards_[i] = static_cast<float>(reward);
      terminated_[i] = terminated;
      truncated_[i] = truncated || (limit > 0 && ++elapsed_[i] >= limit);
      autoreset_[i] = 0;
    }
  }

private:
  void start(size_t i) {
    envs_[i]->reset(rngs_[i].next(), &observations_[i * obs_dim()]);
    elapsed_[i] = 0;
    ++episodes_[i];
  }

  std::vector<std::unique_ptr<environment>> envs_;
  std::vector<kernels::rng> rngs_;
  std::vector<int> elapsed_;
  std::vector<uint64_t> episodes_;
};

// -- the trampolines --------------------------------------------------------------

constexpr size_t max_registrations = 32;

struct slot {
  envs::env_spec spec;
  environment_factory factory;
};

std::mutex slots_mutex;
std::array<std::unique_ptr<slot>, max_registrations> slots;

template <size_t I>
std::unique_ptr<envs::env> make_one() {
  auto& s = *slots[I];
  return std::make_unique<embedded_env>(&s.spec, s.factory());
}

template <size_t I>
std::unique_ptr<envs::vector_env> make_batch(size_t n, size_t threads) {
  auto& s = *slots[I];
  return std::make_unique<embedded_vector_env>(s.spec, s.factory, n, threads);
}

template <size_t... I>
constexpr auto make_table(std::index_sequence<I...>) {
  using one_fn = std::unique_ptr<envs::env> (*)();
  using batch_fn = std::unique_ptr<envs::vector_env> (*)(size_t, size_t);
  return std::pair{std::array<one_fn, sizeof...(I)>{&make_one<I>...},
                   std::array<batch_fn, sizeof...(I)>{&make_batch<I>...}};
}

const auto trampolines = make_table(std::make_index_sequence<max_registrations>{});

// The description as an env_spec; the error names the id, the field and the values.
result<envs::env_spec> to_spec(const env_description& d) {
  auto bad = [&](const std::string& why) {
    return make_error(errc::invalid_argument, "register_environment('{}'): {}", d.id,
                      why);
  };
  if (d.id.empty())
    return bad("the id is empty");
  if (d.obs_low.empty() || d.obs_low.size() != d.obs_high.size())
    return bad(
      fmt::format("obs_low and obs_high must have the same non-zero size, got {} "
                  "and {}",
                  d.obs_low.size(), d.obs_high.size()));
  for (size_t i = 0; i < d.obs_low.size(); ++i)
    if (std::isnan(d.obs_low[i]) || std::isnan(d.obs_high[i]) ||
        d.obs_low[i] > d.obs_high[i])
      return bad(fmt::format("obs bounds {}: low {} must be <= high {}", i, d.obs_low[i],
                             d.obs_high[i]));
  if (d.max_episode_steps < 0)
    return bad(
      fmt::format("max_episode_steps must be >= 0, got {}", d.max_episode_steps));
  envs::env_spec spec;
  spec.id = d.id;
  spec.observation_space = envs::space::box(d.obs_low, d.obs_high);
  spec.max_episode_steps = d.max_episode_steps;
  spec.state_names = embedded_state_names;
  if (d.num_actions > 0) {
    if (!d.action_low.empty() || !d.action_high.empty())
      return bad("a Discrete action (num_actions > 0) takes no action bounds");
    spec.action_space = envs::space::discrete(d.num_actions);
  } else {
    if (d.num_actions < 0)
      return bad(fmt::format("num_actions must be >= 0, got {}", d.num_actions));
    if (d.action_low.empty() || d.action_low.size() != d.action_high.size())
      return bad(fmt::format("a Box action needs action_low and action_high of the same "
                             "non-zero size, got {} and {}",
                             d.action_low.size(), d.action_high.size()));
    for (size_t i = 0; i < d.action_low.size(); ++i)
      if (!std::isfinite(d.action_low[i]) || !std::isfinite(d.action_high[i]) ||
          d.action_low[i] > d.action_high[i])
        return bad(fmt::format("action bounds {}: low {} must be <= high {}, both finite",
                               i, d.action_low[i], d.action_high[i]));
    spec.action_space = envs::space::box(d.action_low, d.action_high);
  }
  return spec;
}

} // namespace

status register_environment(const env_description& description,
                            environment_factory factory) {
  return embed::guarded_status("register_environment", [&]() -> status {
    if (!factory)
      return make_error(errc::invalid_argument,
                        "register_environment('{}'): the factory is empty",
                        description.id);
    auto spec = to_spec(description);
    if (!spec)
      return spec.err();
    std::lock_guard<std::mutex> lock(slots_mutex);
    if (auto found = envs::find_spec(description.id); found)
      return make_error(errc::invalid_argument,
                        "register_environment('{}'): the id is already registered",
                        description.id);
    size_t free = max_registrations;
    for (size_t i = 0; i < max_registrations; ++i)
      if (!slots[i]) {
        free = i;
        break;
      }
    if (free == max_registrations)
      return make_error(errc::unavailable,
                        "register_environment('{}'): at most {} environments can be "
                        "registered",
                        description.id, max_registrations);
    slots[free] = std::make_unique<slot>(slot{std::move(*spec), std::move(factory)});
    auto added = envs::add_registration(
      {&slots[free]->spec, trampolines.first[free], trampolines.second[free]});
    if (!added) {
      slots[free].reset();
      return added;
    }
    return ok_status();
  });
}

status unregister_environment(const std::string& id) {
  // TODO(integrator): the registry of today cannot remove an entry; wire this
  // to the open registry (helper "registry") after the merge.
  return make_error(errc::unavailable,
                    "unregister_environment('{}'): not wired yet (the environment "
                    "registry cannot remove entries in this build)",
                    id);
}

std::vector<std::string> environment_ids() {
  try {
    return envs::registered_ids();
  } catch (...) {
    return {};
  }
}

} // namespace troupe
