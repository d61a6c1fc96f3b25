// register_environment: an embedder's troupe::environment behind the envs
// registry, as a callback environment (envs/callback_env.hpp): each instance
// the registry makes calls the embedder's factory once and steps what it
// returns. The adapter checks actions, observations and rewards and applies
// the time limit; embedded environments save no internal state, so a resumed
// run starts fresh episodes (docs/environments.md, "Resume").
// register_environment_spaces registers the spaces alone, for a game that
// steps itself (the game-driven form): the registry makes no instance of it.
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <troupe/troupe.hpp>

#include "envs/callback_env.hpp"
#include "envs/registry.hpp"
#include "runtime/embed/guard.hpp"

namespace troupe {

namespace {

// The time limit of an environment registered without one (runtime/remote_run.cpp's).
constexpr int no_time_limit = 1 << 30;

// The description as an env_spec; the error names `call`, the id, the field
// and the values.
result<envs::env_spec> to_spec(const char* call, const env_description& d) {
  auto bad = [&](const std::string& why) {
    return make_error(errc::invalid_argument, "{}('{}'): {}", call, d.id, why);
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
  // 0 is "no time limit" (the game ends its episodes); the registry wants a
  // limit, so it gets one no episode reaches, as remote environments do.
  spec.max_episode_steps = d.max_episode_steps > 0 ? d.max_episode_steps : no_time_limit;
  spec.early_truncation = true; // a game may end an episode on its own
  if (d.num_actions > 0) {
    // The registry's bound (envs::check_spec), checked here before the
    // count is narrowed to the space's int64_t.
    constexpr size_t max_actions = size_t{1} << 24;
    if (d.num_actions > max_actions)
      return bad(fmt::format("num_actions must be in [1, {}] for a Discrete action (0 "
                             "for a Box), got {}",
                             max_actions, d.num_actions));
    if (!d.action_low.empty() || !d.action_high.empty())
      return bad("a Discrete action (num_actions > 0) takes no action bounds");
    spec.action_space = envs::space::discrete(static_cast<int64_t>(d.num_actions));
  } else {
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
    auto spec = to_spec("register_environment", description);
    if (!spec)
      return spec.err();
    const std::string id = description.id;
    auto make_callbacks = [factory = std::move(factory), id]() -> envs::env_callbacks {
      std::shared_ptr<environment> game;
      std::string failure;
      try {
        game = factory();
        if (!game)
          failure = "the factory returned no environment";
      } catch (const std::exception& e) {
        failure = std::string("the factory threw: ") + e.what();
      } catch (...) {
        failure = "the factory threw";
      }
      envs::env_callbacks cb;
      if (!game) {
        // The failure surfaces at the first reset and every step (env::reset
        // cannot return it), naming the id.
        auto fail = [id, failure]() {
          return error{errc::unavailable,
                       fmt::format("environment '{}': {}", id, failure)};
        };
        cb.reset = [fail](uint64_t, float*) -> status { return fail(); };
        cb.step = [fail](const float*, float*) -> result<envs::step_result> {
          return fail();
        };
        return cb;
      }
      cb.reset = [game, id](uint64_t seed, float* obs) -> status {
        return embed::guarded_status("environment::reset", [&]() -> status {
          game->reset(seed, obs);
          return ok_status();
        });
      };
      cb.step = [game](const float* action, float* obs) -> result<envs::step_result> {
        return embed::guarded<envs::step_result>(
          "environment::step", [&]() -> result<envs::step_result> {
            envs::step_result r;
            if (auto s = game->step(action, obs, r.reward, r.terminated, r.truncated);
                !s.ok())
              return s.err();
            return r;
          });
      };
      return cb;
    };
    return envs::register_env(
      envs::callback_registration(std::move(*spec), std::move(make_callbacks)));
  });
}

status register_environment_spaces(const env_description& description) {
  return embed::guarded_status("register_environment_spaces", [&]() -> status {
    auto spec = to_spec("register_environment_spaces", description);
    if (!spec)
      return spec.err();
    envs::registration r;
    r.spec = std::move(*spec);
    r.spaces_only = true;
    return envs::register_env(std::move(r));
  });
}

status unregister_environment(const std::string& id) {
  return embed::guarded_status("unregister_environment",
                               [&]() -> status { return envs::unregister_env(id); });
}

std::vector<std::string> environment_ids() {
  try {
    return envs::registered_ids();
  } catch (...) {
    return {};
  }
}

} // namespace troupe
