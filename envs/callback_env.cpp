#include "envs/callback_env.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace troupe::envs {

result<std::unique_ptr<callback_env>> callback_env::make(env_spec spec,
                                                         env_callbacks callbacks) {
  if (auto ok = check_spec(spec); !ok)
    return ok.err();
  auto bad = [&](const std::string& what) {
    return make_error(errc::invalid_argument, "environment '{}': {}", spec.id, what);
  };
  if (!callbacks.reset || !callbacks.step)
    return bad(fmt::format("the reset and step callbacks are required, got {}",
                           !callbacks.reset && !callbacks.step ? "neither"
                           : !callbacks.reset                  ? "no reset"
                                                               : "no step"));
  const bool get = static_cast<bool>(callbacks.get_state);
  const bool set = static_cast<bool>(callbacks.set_state);
  if (get != set)
    return bad(
      fmt::format("get_state and set_state come together or not at all, got only "
                  "{}",
                  get ? "get_state" : "set_state"));
  if (get && spec.state_dim() == 0)
    return bad(
      "state callbacks need spec.state_names (one name per state value), got none");
  if (!get && spec.state_dim() != 0)
    return bad(fmt::format("spec.state_names names {} state value(s) but get_state and "
                           "set_state are missing",
                           spec.state_dim()));
  // A game may end episodes on its own (truncated before the time limit).
  spec.early_truncation = true;
  return std::unique_ptr<callback_env>(
    new callback_env(std::move(spec), std::move(callbacks)));
}

callback_env::callback_env(env_spec spec, env_callbacks callbacks)
  : spec_(std::move(spec)), callbacks_(std::move(callbacks)),
    scratch_(std::max(spec_.observation_space.size(), spec_.action_space.size())) {}

status callback_env::check_observation(const float* obs, const char* call) const {
  for (size_t j = 0; j < spec_.observation_space.size(); ++j)
    if (!std::isfinite(obs[j]))
      return make_error(
        errc::non_finite,
        "environment '{}': {} (episode {}, step {} of the episode, seed {}): "
        "observation[{}] must be finite, got {}",
        spec_.id, call, episode_, elapsed_, episode_seed_, j, obs[j]);
  return {};
}

void callback_env::start_episode(float* obs) {
  episode_seed_ = seeds_.next();
  ++episode_;
  elapsed_ = 0;
  reset_error_.reset();
  ready_ = true;
  auto done = callbacks_.reset(episode_seed_, obs);
  if (done)
    done = check_observation(obs, "reset");
  else
    done = make_error(done.err().code,
                      "environment '{}': reset (episode {}, seed {}) failed: {}",
                      spec_.id, episode_, episode_seed_, done.err().message);
  if (!done) {
    reset_error_ = done.err();
    ready_ = false;
  }
}

void callback_env::reset(uint64_t seed, float* obs) {
  seeds_.seed_with(seed);
  start_episode(obs);
}

void callback_env::reset(float* obs) {
  start_episode(obs);
}

result<step_result> callback_env::step(const float* action, float* obs) {
  if (reset_error_)
    return *reset_error_;
  if (!ready_)
    return make_error(errc::invalid_argument,
                      "environment '{}': step() before reset() or set_state()", spec_.id);
  const space& as = spec_.action_space;
  if (auto ok = as.check_action(action, clip_box_actions()); !ok)
    return make_error(ok.err().code, "environment '{}': {}", spec_.id, ok.err().message);
  if (as.kind == space_kind::box && clip_box_actions()) {
    for (size_t j = 0; j < as.size(); ++j)
      scratch_[j] = std::clamp(action[j], as.low[j], as.high[j]);
    action = scratch_.data();
  }
  auto out = callbacks_.step(action, obs);
  ++steps_;
  ++elapsed_;
  if (!out) {
    ready_ = false; // the game's state is unknown: reset before stepping again
    return make_error(out.err().code,
                      "environment '{}': step {} of episode {} (seed {}) failed: {}",
                      spec_.id, elapsed_, episode_, episode_seed_, out.err().message);
  }
  if (!std::isfinite(out->reward)) {
    ready_ = false;
    return make_error(
      errc::non_finite,
      "environment '{}': step (episode {}, step {} of the episode, seed {}): "
      "the reward must be finite, got {}",
      spec_.id, episode_, elapsed_, episode_seed_, out->reward);
  }
  if (auto ok = check_observation(obs, "step"); !ok) {
    ready_ = false;
    return ok.err();
  }
  out->truncated = out->truncated || elapsed_ >= spec_.max_episode_steps;
  return out;
}

bool callback_env::can_save_state() const noexcept {
  return static_cast<bool>(callbacks_.get_state);
}

std::vector<double> callback_env::state() const {
  std::vector<double> values(spec_.state_dim());
  if (callbacks_.get_state)
    callbacks_.get_state(values.data());
  return values;
}

status callback_env::set_state(const std::vector<double>& values, float* obs) {
  if (!callbacks_.set_state)
    return make_error(
      errc::invalid_argument,
      "environment '{}': set_state: this environment has no state callbacks "
      "(can_save_state() is false)",
      spec_.id);
  if (values.size() != spec_.state_dim())
    return make_error(
      errc::dimension_mismatch, "environment '{}': the state has {} values ({}), got {}",
      spec_.id, spec_.state_dim(), fmt::join(spec_.state_names, ", "), values.size());
  for (size_t i = 0; i < values.size(); ++i)
    if (!std::isfinite(values[i]))
      return make_error(errc::non_finite, "environment '{}': state value {} ({}) is {}",
                        spec_.id, i, spec_.state_names[i], values[i]);
  float* out = obs ? obs : scratch_.data();
  if (auto ok = callbacks_.set_state(values.data(), out); !ok)
    return make_error(ok.err().code, "environment '{}': set_state failed: {}", spec_.id,
                      ok.err().message);
  if (auto ok = check_observation(out, "set_state"); !ok)
    return ok;
  reset_error_.reset();
  ready_ = true;
  return {};
}

status callback_env::set_rng_state(const std::array<uint64_t, 4>& words) {
  if (!seeds_.set_state(words))
    return make_error(errc::invalid_argument,
                      "environment '{}': generator state must not be all zero "
                      "(xoshiro256++ cannot leave it), got 0, 0, 0, 0",
                      spec_.id);
  return {};
}

registration callback_registration(env_spec spec,
                                   std::function<env_callbacks()> make_callbacks) {
  registration r;
  r.spec = spec;
  r.spec.early_truncation = true;
  r.make = [spec = std::move(spec), make_callbacks = std::move(make_callbacks)]() {
    auto made =
      callback_env::make(spec, make_callbacks ? make_callbacks() : env_callbacks{});
    // make_env turns the exception into an error value naming the id.
    if (!made)
      throw std::invalid_argument(made.err().message);
    return std::unique_ptr<env>(std::move(*made));
  };
  return r;
}

} // namespace troupe::envs
