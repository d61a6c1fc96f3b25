#include "envs/registry.hpp"

#include <limits>

#include <fmt/format.h>

#include "envs/acrobot.hpp"
#include "envs/cartpole.hpp"
#include "envs/cartpole_vector.hpp"
#include "envs/mountain_car.hpp"
#include "envs/mountain_car_continuous.hpp"
#include "envs/pendulum.hpp"

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
  return {"Acrobot-v1",
          space::box({-1.0f, -1.0f, -1.0f, -1.0f, -v1, -v2}, {1.0f, 1.0f, 1.0f, 1.0f, v1, v2}),
          space::discrete(3),
          500,
          {"theta1", "theta2", "dtheta1", "dtheta2"}};
}

// -- the table ------------------------------------------------------------------

namespace {

template <class Model>
registration entry() {
  return model_registration<Model>();
}

// CartPole's batch has its own kernel (envs/cartpole_vector.hpp).
registration cartpole_entry() {
  auto r = entry<cartpole>();
  r.make_vector = [](size_t n, size_t threads) { return make_cartpole_vector(n, threads); };
  return r;
}

} // namespace

namespace {

std::vector<registration>& table() {
  // clang-format off
  static std::vector<registration> entries = {
    cartpole_entry(),
    entry<pendulum>(),
    entry<mountain_car>(),
    entry<mountain_car_continuous>(),
    entry<acrobot>(),
  };
  // clang-format on
  return entries;
}

} // namespace

const std::vector<registration>& registry() {
  return table();
}

status add_registration(registration r) {
  for (auto& known : table())
    if (known.spec->id == r.spec->id)
      return make_error(errc::invalid_argument,
                        "environment id '{}' is already registered", r.spec->id);
  table().push_back(r);
  return {};
}

std::vector<std::string> registered_ids() {
  std::vector<std::string> ids;
  for (auto& r : registry())
    ids.push_back(r.spec->id);
  return ids;
}

namespace {

result<const registration*> find_registration(const std::string& id) {
  for (auto& r : registry())
    if (r.spec->id == id)
      return &r;
  return make_error(errc::not_found, "unknown environment id '{}' (valid ids: {})", id,
                    fmt::join(registered_ids(), ", "));
}

} // namespace

result<const env_spec*> find_spec(const std::string& id) {
  auto r = find_registration(id);
  if (!r)
    return r.err();
  return (*r)->spec;
}

result<std::unique_ptr<env>> make_env(const std::string& id) {
  auto r = find_registration(id);
  if (!r)
    return r.err();
  return (*r)->make();
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
  return (*r)->make_vector(num_envs, threads);
}

} // namespace troupe::envs
