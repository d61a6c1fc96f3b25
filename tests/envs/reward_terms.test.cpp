// The reward terms and trouble counters a vector env exposes: each MuJoCo
// task's terms add up to its reward and match the v4 definitions computed
// here from the actions and states; the counters count each instance's
// MuJoCo warnings; classic-control environments have neither.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "envs/mujoco/half_cheetah.hpp"
#include "envs/mujoco/hopper.hpp"
#include "envs/mujoco/walker2d.hpp"
#include "envs/registry.hpp"
#include "tests/seed.hpp"

using namespace troupe;
using namespace troupe::envs;
using troupe::test::fresh_seed;

namespace {

// Per task: v4's info keys of its reward terms (v5's for Hopper and
// Walker2d, whose v4 info has none), the control cost's weight, and the
// forward term's dt when the forward term is rootx's velocity (0: not checked).
struct terms_case {
  const char* id;
  std::vector<std::string> names;
  double ctrl_weight;
  double forward_dt;
};

std::vector<terms_case> terms_cases() {
  return {
    {"HalfCheetah-v4", {"reward_run", "reward_ctrl"}, 0.1, mujoco::half_cheetah().dt()},
    {"Hopper-v4",
     {"reward_forward", "reward_ctrl", "reward_survive"},
     1e-3,
     mujoco::hopper().dt()},
    {"Walker2d-v4",
     {"reward_forward", "reward_ctrl", "reward_survive"},
     1e-3,
     mujoco::walker2d().dt()},
    {"Swimmer-v4", {"reward_fwd", "reward_ctrl"}, 1e-4, 0.0},
    {"Reacher-v4", {"reward_dist", "reward_ctrl"}, 1.0, 0.0},
    {"Ant-v4", {"reward_forward", "reward_ctrl", "reward_survive"}, 0.5, 0.0},
    {"Humanoid-v4", {"reward_linvel", "reward_quadctrl", "reward_alive"}, 0.1, 0.0},
  };
}

} // namespace

TEST_CASE("each MuJoCo task's reward terms add up to its reward and follow v4's "
          "definitions at every step of a vector env") {
  for (const auto& c : terms_cases()) {
    const uint64_t seed = fresh_seed();
    CAPTURE(c.id);
    CAPTURE(seed);
    const size_t n = 3;
    auto vec = make_vector_env(c.id, n).value();
    const auto& spec = vec->spec();
    REQUIRE(spec.reward_terms == c.names);
    const size_t k = c.names.size(), ad = vec->action_dim();
    vec->reset(seed);
    for (size_t j = 0; j < n * k; ++j)
      CHECK(vec->reward_terms()[j] == 0.0);
    std::mt19937_64 gen(seed);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    std::vector<float> actions(n * ad);
    size_t transitions = 0;
    for (int t = 0; t < 150; ++t) {
      for (size_t j = 0; j < actions.size(); ++j)
        actions[j] = unit(gen) * spec.action_space.high[j % ad];
      std::vector<double> x_before(n);
      for (size_t i = 0; i < n; ++i)
        x_before[i] = vec->state(i)[0];
      REQUIRE(vec->step(actions.data()));
      for (size_t i = 0; i < n; ++i) {
        CAPTURE(t);
        CAPTURE(i);
        const double* terms = vec->reward_terms() + i * k;
        if (vec->autoreset()[i]) {
          for (size_t j = 0; j < k; ++j)
            CHECK(terms[j] == 0.0);
          continue;
        }
        ++transitions;
        double sum = 0, squares = 0;
        for (size_t j = 0; j < k; ++j)
          sum += terms[j];
        for (size_t j = 0; j < ad; ++j)
          squares += double(actions[i * ad + j]) * actions[i * ad + j];
        const double reward = vec->rewards()[i];
        CHECK(std::fabs(reward - sum) <= 1e-6 * (1.0 + std::fabs(sum)));
        // The control cost, computed in float64 here (the task does it in
        // float32, as v4 under NumPy 2).
        const double ctrl = -c.ctrl_weight * squares;
        CHECK(std::fabs(terms[1] - ctrl) <= 1e-6 * (1e-6 + std::fabs(ctrl)));
        if (c.forward_dt > 0) {
          const double velocity = (vec->state(i)[0] - x_before[i]) / c.forward_dt;
          CHECK(terms[0] == doctest::Approx(velocity).epsilon(1e-12));
          if (k == 3)
            CHECK(terms[2] == 1.0);
        }
      }
    }
    CHECK(transitions > 0);
  }
}

TEST_CASE("a MuJoCo vector env counts the instability warnings of the instance that "
          "met them, and MuJoCo resets it") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  const size_t n = 3;
  auto vec = make_vector_env("HalfCheetah-v4", n).value();
  const std::vector<std::string> names = {
    "mujoco_instability_warnings", "mujoco_other_warnings", "mujoco_non_finite_states"};
  REQUIRE(vec->spec().counters == names);
  std::vector<uint64_t> counts(3, 7);
  vec->reset(seed);
  vec->counters(counts.data());
  CHECK(counts == std::vector<uint64_t>{0, 0, 0});
  // Environment 1's rootx velocity beyond MuJoCo's 1e10 bound.
  auto state = vec->save_state();
  const size_t sd = vec->spec().state_dim();
  state.state[1 * sd + 9] = 1e11;
  REQUIRE(vec->restore_state(state));
  std::vector<float> zeros(n * vec->action_dim(), 0.0f);
  const auto before = mujoco::trouble();
  REQUIRE(vec->step(zeros.data()));
  const auto after = mujoco::trouble();
  vec->counters(counts.data());
  CHECK(counts[0] >= 1);
  CHECK(counts[0] == after.instability_warnings - before.instability_warnings);
  CHECK(counts[1] == after.other_warnings - before.other_warnings);
  CHECK(counts[2] == 0);
  // MuJoCo reset environment 1 to qpos0 with zero velocity; the others moved on.
  const auto reset_state = vec->state(1);
  for (size_t j = 0; j < 18; ++j)
    CHECK(std::isfinite(reset_state[j]));
  CHECK(std::fabs(reset_state[9]) < 1e3);
  // Calm steps after it add nothing.
  const auto first = counts;
  for (int t = 0; t < 5; ++t)
    REQUIRE(vec->step(zeros.data()));
  vec->counters(counts.data());
  CHECK(counts == first);
}

TEST_CASE("classic control and the inverted pendulums have no reward terms, and only "
          "MuJoCo tasks have counters") {
  for (const char* id :
       {"CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCar-v0",
        "MountainCarContinuous-v0", "InvertedPendulum-v4", "InvertedDoublePendulum-v4"}) {
    CAPTURE(id);
    auto spec = find_spec(id).value();
    CHECK(spec->reward_terms.empty());
    const bool mujoco = std::string(id).find("Inverted") == 0;
    CHECK(spec->counters.size() == (mujoco ? 3u : 0u));
  }
}
