// mujoco::reset_data against mj_resetData itself: two simulations of every
// registered MuJoCo task, one reset each way, stepped through random
// episodes with the same controls, compared bit for bit (the whole mjData,
// its stack included; and through the env interface, every observation,
// reward, flag and state).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <mujoco/mjxmacro.h>

#include "envs/mujoco/tasks.hpp"
#include "envs/registry.hpp"
#include "tests/seed.hpp"

using namespace troupe;
using namespace troupe::envs;
using troupe::test::fresh_seed;

namespace {

struct data_deleter {
  void operator()(mjData* d) const noexcept { mj_deleteData(d); }
};
using data_ptr = std::unique_ptr<mjData, data_deleter>;

// The first field of mjData where `a` and `b` differ in their bytes ("" when
// none): the header's fields, every array of the buffer at its full size,
// the buffer's bytes between arrays, then (with_stack) the whole stack.
std::string first_difference(const mjModel* m, const mjData& a, const mjData& b,
                             bool with_stack) {
#define X(type, name)                                                                    \
  if (std::memcmp(&a.name, &b.name, sizeof(type)) != 0)                                  \
    return #name;
  MJDATA_SCALAR
#undef X
#define X(type, name, n, c)                                                              \
  if (std::memcmp(a.name, b.name, sizeof(type) * (n) * (c)) != 0)                        \
    return #name;
  MJDATA_VECTOR
#undef X
  {
    MJDATA_POINTERS_PREAMBLE(m)
#define X(type, name, nr, nc)                                                            \
  if (std::memcmp(a.name, b.name,                                                        \
                  sizeof(type) * static_cast<size_t>(m->nr) *                            \
                    static_cast<size_t>(nc)) != 0)                                       \
    return #name;
    MJDATA_POINTERS
#undef X
  }
  if (std::memcmp(a.buffer, b.buffer, static_cast<size_t>(a.nbuffer)) != 0)
    return "buffer (between arrays)";
  if (with_stack &&
      std::memcmp(a.stack, b.stack, sizeof(mjtNum) * static_cast<size_t>(a.nstack)) != 0)
    return "stack";
  return "";
}

// Sets the process-wide reset choice for one scope, restoring the default.
struct full_resets_scope {
  explicit full_resets_scope(bool on) { mujoco::reset_with_mj_resetData(on); }
  ~full_resets_scope() { mujoco::reset_with_mj_resetData(false); }
  full_resets_scope(const full_resets_scope&) = delete;
  full_resets_scope& operator=(const full_resets_scope&) = delete;
};

} // namespace

TEST_CASE("reset_data leaves every byte of mjData and its stack as mj_resetData "
          "does, through random episodes of every MuJoCo task") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  int most_constraints = 0, most_contacts = 0;
  for (const auto& r : mujoco::task_registrations()) {
    const std::string id = r.spec.id;
    CAPTURE(id);
    auto physics = mujoco::physics_of(id);
    REQUIRE(physics.ok());
    const mjModel& m = *physics->model;
    data_ptr full(mj_makeData(&m)), cheap(mj_makeData(&m));
    REQUIRE(full);
    REQUIRE(cheap);
    // mj_makeData leaves the stack as malloc gave it: the same bytes in both,
    // so that what each simulation leaves there can be compared.
    for (mjData* d : {full.get(), cheap.get()})
      std::memset(d->stack, 0, sizeof(mjtNum) * static_cast<size_t>(d->nstack));
    std::uniform_real_distribution<double> unit(-1.0, 1.0);
    std::uniform_int_distribution<int> length(1, 60);
    for (int episode = 0; episode < 60; ++episode) {
      CAPTURE(episode);
      mj_resetData(&m, full.get());
      mujoco::reset_data(m, *cheap);
      REQUIRE(first_difference(&m, *full, *cheap, true) == "");
      // Start states from near qpos0 to far from it, so that episodes
      // differ in their numbers of contacts and constraint rows.
      const double spread = episode % 2 ? 0.5 : 0.02;
      for (int i = 0; i < m.nq; ++i)
        full->qpos[i] = cheap->qpos[i] = m.qpos0[i] + spread * unit(gen);
      for (int i = 0; i < m.nv; ++i)
        full->qvel[i] = cheap->qvel[i] = 10 * spread * unit(gen);
      mj_forward(&m, full.get());
      mj_forward(&m, cheap.get());
      REQUIRE(first_difference(&m, *full, *cheap, true) == "");
      const int steps = length(gen);
      for (int t = 0; t < steps; ++t) {
        // Controls up to 1.5 times the control range: MuJoCo clamps them.
        for (int i = 0; i < m.nu; ++i) {
          const double lo = m.actuator_ctrlrange[2 * i],
                       hi = m.actuator_ctrlrange[2 * i + 1];
          full->ctrl[i] = cheap->ctrl[i] = 0.5 * (lo + hi) + 0.75 * (hi - lo) * unit(gen);
        }
        for (int k = 0; k < physics->frame_skip; ++k) {
          mj_step(&m, full.get());
          mj_step(&m, cheap.get());
        }
        mj_rnePostConstraint(&m, full.get());
        mj_rnePostConstraint(&m, cheap.get());
      }
      // Identical data after the reset and its mj_forward imply identical
      // steps (MuJoCo is deterministic); compared again at the episode's end.
      REQUIRE(first_difference(&m, *full, *cheap, true) == "");
      most_constraints = std::max(most_constraints, full->maxuse_efc);
      most_contacts = std::max(most_contacts, full->maxuse_con);
    }
  }
  // The contact and constraint rows, which reset_data clears only up to the
  // high-water marks, were in use.
  CHECK(most_constraints > 0);
  CHECK(most_contacts > 0);
}

TEST_CASE("every MuJoCo task gives the same observations, rewards, flags and "
          "states bit for bit whether it resets with mj_resetData or reset_data") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  full_resets_scope restore_default(false);
  for (const auto& r : mujoco::task_registrations()) {
    const std::string id = r.spec.id;
    CAPTURE(id);
    auto full = make_env(id).value(), cheap = make_env(id).value();
    const auto& spec = full->spec();
    const size_t od = spec.observation_space.size(), ad = spec.action_space.size();
    std::vector<float> obs_full(od), obs_cheap(od);
    auto actions = random_actions(spec.action_space, 64, gen);
    std::uniform_int_distribution<int> left(1, 40);
    // Every reset of `full` runs with mj_resetData, every one of `cheap` with
    // reset_data; a step resets nothing.
    auto reset_both = [&](bool first) {
      const int elapsed = spec.max_episode_steps - left(gen);
      mujoco::reset_with_mj_resetData(true);
      first ? full->reset(seed, obs_full.data()) : full->reset(obs_full.data());
      mujoco::reset_with_mj_resetData(false);
      first ? cheap->reset(seed, obs_cheap.data()) : cheap->reset(obs_cheap.data());
      // Episodes end by the time limit within 40 steps, if not before.
      full->set_elapsed_steps(elapsed);
      cheap->set_elapsed_steps(elapsed);
    };
    auto same_bits = [](const auto& a, const auto& b) {
      return a.size() == b.size() &&
             std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
    };
    reset_both(true);
    int episodes = 0, steps = 0;
    while (episodes < 30) {
      REQUIRE(same_bits(obs_full, obs_cheap));
      REQUIRE(same_bits(full->state(), cheap->state()));
      const float* action = actions.data() + (static_cast<size_t>(steps) % 64) * ad;
      auto a = full->step(action, obs_full.data());
      auto b = cheap->step(action, obs_cheap.data());
      ++steps;
      REQUIRE(a.ok());
      REQUIRE(b.ok());
      CHECK(std::memcmp(&a->reward, &b->reward, sizeof(double)) == 0);
      CHECK(a->terminated == b->terminated);
      CHECK(a->truncated == b->truncated);
      if (a->terminated || a->truncated) {
        REQUIRE(same_bits(obs_full, obs_cheap));
        reset_both(false);
        ++episodes;
      }
    }
    CHECK(steps > episodes);
  }
}
