#include "envs/registry.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <exception>
#include <limits>

#include <fmt/format.h>

#include "envs/acrobot.hpp"
#include "envs/cartpole.hpp"
#include "envs/cartpole_vector.hpp"
#include "envs/instance_vector_env.hpp"
#include "envs/model.hpp"
#include "envs/mountain_car.hpp"
#include "envs/mountain_car_continuous.hpp"
#include "envs/mujoco/tasks.hpp"
#include "envs/pendulum.hpp"
#include "base/mutex.hpp"

namespace troupe::envs {

// -- specs --------------------------------------------------------------------

namespace {

constexpr float f32_max = std::numeric_limits<float>::max();

} // namespace

env_spec cartpole::make_spec() {
  const float high[] = {static_cast<float>(x_threshold * 2), f32_max,
                        static_cast<float>(theta_threshold * 2), f32_max};
  return {"CartPole-v1",
          space::box({-high[0], -high[1], -high[2], -high[3]},
                     {high[0], high[1], high[2], high[3]}),
          space::discrete(2),
          500,
          {"x", "x_dot", "theta", "theta_dot"}};
}

env_spec pendulum::make_spec() {
  return {"Pendulum-v1",
          space::box({-1.0f, -1.0f, -static_cast<float>(max_speed)},
                     {1.0f, 1.0f, static_cast<float>(max_speed)}),
          space::box(1, -max_torque, max_torque),
          200,
          {"th", "thdot"}};
}

env_spec mountain_car::make_spec() {
  return {"MountainCar-v0",
          space::box({static_cast<float>(min_position), static_cast<float>(-max_speed)},
                     {static_cast<float>(max_position), static_cast<float>(max_speed)}),
          space::discrete(3),
          200,
          {"position", "velocity"}};
}

env_spec mountain_car_continuous::make_spec() {
  return {"MountainCarContinuous-v0",
          space::box({static_cast<float>(min_position), static_cast<float>(-max_speed)},
                     {static_cast<float>(max_position), static_cast<float>(max_speed)}),
          space::box(1, -1.0f, 1.0f),
          999,
          {"position", "velocity"}};
}

env_spec acrobot::make_spec() {
  const float v1 = static_cast<float>(max_vel_1), v2 = static_cast<float>(max_vel_2);
  return {
    "Acrobot-v1",
    space::box({-1.0f, -1.0f, -1.0f, -1.0f, -v1, -v2}, {1.0f, 1.0f, 1.0f, 1.0f, v1, v2}),
    space::discrete(3),
    500,
    {"theta1", "theta2", "dtheta1", "dtheta2"}};
}

// -- checks -------------------------------------------------------------------

namespace {

// A Box's bounds: equal lengths, no NaN, low <= high, finite when `finite`.
status check_box(const std::string& id, const char* field, const space& s, bool finite) {
  if (s.low.size() != s.high.size())
    return make_error(errc::invalid_argument,
                      "environment '{}': {} must have as many low bounds as high bounds, "
                      "got {} and {}",
                      id, field, s.low.size(), s.high.size());
  if (s.low.empty())
    return make_error(errc::invalid_argument,
                      "environment '{}': {} must have at least one element, got 0", id,
                      field);
  for (size_t j = 0; j < s.low.size(); ++j) {
    const float lo = s.low[j], hi = s.high[j];
    if (std::isnan(lo) || std::isnan(hi) || lo > hi)
      return make_error(
        errc::invalid_argument,
        "environment '{}': {} element {}: bounds must be numbers with low "
        "<= high, got low = {}, high = {}",
        id, field, j, lo, hi);
    if (finite && !(std::isfinite(lo) && std::isfinite(hi)))
      return make_error(errc::invalid_argument,
                        "environment '{}': {} element {}: bounds must be finite (random "
                        "actions and their log-probabilities need them), got low = {}, "
                        "high = {}",
                        id, field, j, lo, hi);
  }
  return {};
}

} // namespace

status check_spec(const env_spec& spec) {
  const std::string& id = spec.id;
  if (id.empty())
    return make_error(errc::invalid_argument, "an environment id must not be empty");
  for (char c : id)
    if (std::isspace(static_cast<unsigned char>(c)) ||
        std::iscntrl(static_cast<unsigned char>(c)))
      return make_error(
        errc::invalid_argument,
        "environment id '{}' must not contain spaces or control characters", id);
  if (spec.observation_space.kind != space_kind::box)
    return make_error(errc::invalid_argument,
                      "environment '{}': observation_space must be a Box, got {}", id,
                      spec.observation_space.describe());
  if (auto ok = check_box(id, "observation_space", spec.observation_space, false); !ok)
    return ok;
  const space& a = spec.action_space;
  if (a.kind == space_kind::discrete) {
    if (a.n < 1 || a.n > (int64_t{1} << 24))
      return make_error(errc::invalid_argument,
                        "environment '{}': action_space Discrete(n) needs n in [1, 2^24] "
                        "(actions travel as float32), got n = {}",
                        id, a.n);
  } else if (auto ok = check_box(id, "action_space", a, true); !ok) {
    return ok;
  }
  if (spec.max_episode_steps < 1)
    return make_error(
      errc::invalid_argument,
      "environment '{}': max_episode_steps (the time limit) must be >= 1, "
      "got {}",
      id, spec.max_episode_steps);
  return {};
}

// -- the table ------------------------------------------------------------------

namespace {

// CartPole's batch has its own kernel (envs/cartpole_vector.hpp).
registration cartpole_registration() {
  auto r = model_registration<cartpole>();
  r.make_vector = [](size_t n, size_t threads) {
    return make_cartpole_vector(n, threads);
  };
  return r;
}

struct table {
  base::shared_mutex mutex;
  // In registration order.
  std::vector<std::shared_ptr<const registration>> entries TROUPE_GUARDED_BY(mutex);
  size_t builtins TROUPE_GUARDED_BY(mutex) = 0; // the first entries
};

// Checks and appends `r`.
status add_locked(table& t, registration r) TROUPE_REQUIRES(t.mutex) {
  if (auto ok = check_spec(r.spec); !ok)
    return make_error(ok.err().code, "cannot register environment '{}': {}", r.spec.id,
                      ok.err().message);
  if (r.spaces_only && (r.make || r.make_vector))
    return make_error(
      errc::invalid_argument,
      "cannot register environment '{}': a spaces-only registration takes "
      "no factory (make and make_vector must be empty)",
      r.spec.id);
  if (!r.spaces_only && !r.make)
    return make_error(
      errc::invalid_argument,
      "cannot register environment '{}': it has no factory (make is empty)", r.spec.id);
  for (auto& known : t.entries)
    if (known->spec.id == r.spec.id)
      return make_error(errc::invalid_argument,
                        "cannot register environment '{}': the id is already registered",
                        r.spec.id);
  t.entries.push_back(std::make_shared<const registration>(std::move(r)));
  return {};
}

table& the_table() {
  // Built on first use with the built-ins, through the same checks as every
  // registration; never destroyed, so that lookups during static destruction
  // stay valid.
  static table* t = [] {
    auto* made = new table;
    // No other thread sees the table yet; locked so that the analysis sees
    // every entry written under its lock.
    base::writer_lock lock(made->mutex);
    std::vector<registration> builtins = {
      cartpole_registration(), model_registration<pendulum>(),
      model_registration<mountain_car>(), model_registration<mountain_car_continuous>(),
      model_registration<acrobot>()};
    for (auto& r : mujoco::task_registrations())
      builtins.push_back(std::move(r));
    for (auto& r : builtins) {
      auto ok = add_locked(*made, std::move(r));
      TROUPE_CHECK(ok.ok(), "a built-in environment does not register: {}",
                   ok ? std::string{} : ok.err().message);
    }
    made->builtins = made->entries.size();
    return made;
  }();
  return *t;
}

std::vector<std::string> ids_locked(const table& t) TROUPE_REQUIRES_SHARED(t.mutex) {
  std::vector<std::string> ids;
  for (auto& r : t.entries)
    ids.push_back(r->spec.id);
  return ids;
}

result<std::shared_ptr<const registration>> find_registration(const std::string& id) {
  table& t = the_table();
  base::reader_lock lock(t.mutex);
  for (auto& r : t.entries)
    if (r->spec.id == id)
      return r;
  return make_error(errc::not_found, "unknown environment id '{}' (valid ids: {})", id,
                    fmt::join(ids_locked(t), ", "));
}

// The refusal to make an instance of a spaces-only registration.
error no_instances(const std::string& id) {
  return error{
    errc::invalid_argument,
    fmt::format("environment '{}' was registered with its spaces only: troupe "
                "cannot make an instance to step (register it with callbacks "
                "or a factory for that; a game-driven session, whose game steps "
                "itself, needs only the spaces)",
                id)};
}

} // namespace

status register_env(registration r) {
  table& t = the_table();
  base::writer_lock lock(t.mutex);
  return add_locked(t, std::move(r));
}

status unregister_env(const std::string& id) {
  table& t = the_table();
  base::writer_lock lock(t.mutex);
  auto it = std::find_if(t.entries.begin(), t.entries.end(),
                         [&](auto& r) { return r->spec.id == id; });
  if (it == t.entries.end())
    return make_error(errc::not_found,
                      "cannot unregister environment '{}': no such id is registered "
                      "(registered ids: {})",
                      id, fmt::join(ids_locked(t), ", "));
  if (static_cast<size_t>(it - t.entries.begin()) < t.builtins)
    return make_error(errc::invalid_argument,
                      "cannot unregister environment '{}': it is built in", id);
  t.entries.erase(it);
  return {};
}

std::vector<registration> registry() {
  table& t = the_table();
  base::reader_lock lock(t.mutex);
  std::vector<registration> out;
  for (auto& r : t.entries)
    out.push_back(*r);
  return out;
}

std::vector<std::string> registered_ids() {
  table& t = the_table();
  base::reader_lock lock(t.mutex);
  return ids_locked(t);
}

result<std::shared_ptr<const env_spec>> find_spec(const std::string& id) {
  auto r = find_registration(id);
  if (!r)
    return r.err();
  // Shares the entry's ownership: the spec lives as long as the pointer.
  return std::shared_ptr<const env_spec>(*r, &(*r)->spec);
}

result<bool> is_spaces_only(const std::string& id) {
  auto r = find_registration(id);
  if (!r)
    return r.err();
  return (*r)->spaces_only;
}

result<std::unique_ptr<env>> make_env(const std::string& id) {
  auto r = find_registration(id);
  if (!r)
    return r.err();
  if ((*r)->spaces_only)
    return no_instances(id);
  std::unique_ptr<env> e;
  try {
    e = (*r)->make();
  } catch (const std::exception& x) {
    return make_error(errc::invalid_argument, "{}: the environment factory failed: {}",
                      id, x.what());
  }
  if (auto ok = check_made_env((*r)->spec, e.get()); !ok)
    return ok.err();
  return e;
}

result<std::unique_ptr<vector_env>> make_vector_env(const std::string& id,
                                                    size_t num_envs, size_t threads) {
  auto r = find_registration(id);
  if (!r)
    return r.err();
  if (num_envs == 0 || threads == 0)
    return make_error(errc::invalid_argument,
                      "{}: a vector env needs num_envs >= 1 and threads >= 1, got "
                      "num_envs = {}, threads = {}",
                      id, num_envs, threads);
  const registration& reg = **r;
  if (reg.spaces_only)
    return no_instances(id);
  if (!reg.make_vector)
    return make_instance_vector_env(reg.spec, reg.make, num_envs, threads);
  std::unique_ptr<vector_env> v;
  try {
    v = reg.make_vector(num_envs, threads);
  } catch (const std::exception& x) {
    return make_error(errc::invalid_argument,
                      "{}: the vector environment factory failed: {}", id, x.what());
  }
  if (!v)
    return make_error(errc::invalid_argument,
                      "{}: the vector environment factory made no environments", id);
  if (v->spec().id != id || v->num_envs() != num_envs)
    return make_error(
      errc::invalid_argument,
      "{}: the vector environment factory made {} environment(s) of id '{}', "
      "{} of id '{}' were asked for",
      id, v->num_envs(), v->spec().id, num_envs, id);
  return v;
}

} // namespace troupe::envs
