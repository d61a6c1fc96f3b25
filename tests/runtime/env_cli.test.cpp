// Black-box tests of `troupe env list` and `troupe env replay` through the
// built binary.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <memory>

#include <mujoco/mujoco.h>

#include "envs/mujoco/mujoco_env.hpp"
#include "envs/mujoco/tasks.hpp"
#include "tests/cli_support.hpp"

using troupe::test::fresh_seed;
using troupe::test::lines_of;
using troupe::test::run_troupe;
using troupe::test::temp_folder;

namespace {

// The field `key` of the JSON object on `line`.
nlohmann::json json_field(const std::string& line, const std::string& key) {
  const auto parsed = nlohmann::json::parse(line);
  REQUIRE_MESSAGE(parsed.contains(key), key, " missing in ", line);
  return parsed.at(key);
}

std::vector<double> json_array(const std::string& line, const std::string& key) {
  return json_field(line, key).get<std::vector<double>>();
}

double json_number(const std::string& line, const std::string& key) {
  return json_field(line, key).get<double>();
}

bool json_flag(const std::string& line, const std::string& key) {
  return json_field(line, key).get<bool>();
}

std::string state_arg(const std::vector<double>& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i)
    out += fmt::format("{}{:.17g}", i ? "," : "", s[i]);
  return out;
}

} // namespace

TEST_CASE("env list prints every id with its spaces and time limit") {
  temp_folder dir("env-cli");
  auto r = run_troupe("env list", dir);
  CHECK(r.status == 0);
  for (const auto& entry :
       std::vector<std::pair<std::string, int>>{{"CartPole-v1", 500},
                                                {"Pendulum-v1", 200},
                                                {"MountainCar-v0", 200},
                                                {"MountainCarContinuous-v0", 999},
                                                {"Acrobot-v1", 500}}) {
    // Named copies: clang 14 lets no lambda (CAPTURE's) refer to a structured binding.
    const std::string& id = entry.first;
    const int limit = entry.second;
    CAPTURE(id);
    auto at = r.out.find(id + "\n");
    REQUIRE(at != std::string::npos);
    auto block = r.out.substr(at, r.out.find("steps", at) - at);
    CHECK(block.find(fmt::format("time limit   {} ", limit)) != std::string::npos);
    CHECK(block.find("observation  Box(") != std::string::npos);
  }
  CHECK(r.out.find("Discrete(2)") != std::string::npos);
  CHECK(r.out.find("Box(-2.0, 2.0, (1,), float32)") != std::string::npos);
}

TEST_CASE("env replay prints CartPole steps that match the float64 equations") {
  temp_folder dir("env-cli");
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> small(-0.05, 0.05);
  std::vector<double> s = {small(gen), small(gen), small(gen), small(gen)};
  std::vector<int> actions;
  std::string text;
  for (int t = 0; t < 8; ++t) {
    actions.push_back(static_cast<int>(gen() % 2));
    text += fmt::format("{}\n", actions.back());
  }
  auto path = dir.write("actions", text);
  auto r = run_troupe(
    fmt::format("env replay --env CartPole-v1 --state={} --actions '{}' --json",
                state_arg(s), path),
    dir);
  REQUIRE(r.status == 0);
  auto lines = lines_of(r.out);
  REQUIRE(lines.size() == actions.size());
  const double pi = 3.14159265358979323846;
  for (size_t t = 0; t < actions.size(); ++t) {
    CAPTURE(t);
    // Euler step of the cart-pole equations in float64.
    double f = actions[t] == 1 ? 10.0 : -10.0, m = 1.1, ml = 0.05;
    double tmp = (f + ml * s[3] * s[3] * std::sin(s[2])) / m;
    double alpha = (9.8 * std::sin(s[2]) - std::cos(s[2]) * tmp) /
                   (0.5 * (4.0 / 3.0 - 0.1 * std::cos(s[2]) * std::cos(s[2]) / m));
    double acc = tmp - ml * alpha * std::cos(s[2]) / m;
    s = {s[0] + 0.02 * s[1], s[1] + 0.02 * acc, s[2] + 0.02 * s[3], s[3] + 0.02 * alpha};
    auto state = json_array(lines[t], "state");
    auto obs = json_array(lines[t], "obs");
    REQUIRE(state.size() == 4);
    REQUIRE(obs.size() == 4);
    for (int j = 0; j < 4; ++j) {
      CHECK(std::fabs(state[j] - s[j]) <= 1e-12 * std::fabs(s[j]) + 1e-15);
      CHECK(obs[j] == static_cast<double>(static_cast<float>(state[j])));
    }
    CHECK(json_number(lines[t], "reward") == 1.0);
    CHECK(json_flag(lines[t], "terminated") ==
          (std::fabs(s[0]) > 2.4 || std::fabs(s[2]) > 12 * 2 * pi / 360));
    CHECK_FALSE(json_flag(lines[t], "truncated"));
  }
}

TEST_CASE("env replay stops at termination and at the time limit set by --elapsed") {
  temp_folder dir("env-cli");
  auto path = dir.write("actions", "1\n1\n1\n1\n1\n");
  auto term = run_troupe(
    fmt::format("env replay --env CartPole-v1 --state=2.39,1.0,0,0 --actions '{}' --json",
                path),
    dir);
  CHECK(term.status == 0);
  auto lines = lines_of(term.out);
  REQUIRE(lines.size() == 1);
  CHECK(json_flag(lines[0], "terminated"));

  auto trunc = run_troupe(fmt::format("env replay --env Pendulum-v1 --state=0.5,-0.25 "
                                      "--elapsed 197 --actions '{}' --json",
                                      path),
                          dir);
  CHECK(trunc.status == 0);
  lines = lines_of(trunc.out);
  REQUIRE(lines.size() == 3);
  CHECK_FALSE(json_flag(lines[1], "truncated"));
  CHECK(json_flag(lines[2], "truncated"));
  CHECK_FALSE(json_flag(lines[2], "terminated"));
}

TEST_CASE("env replay reads Box actions as comma-separated numbers") {
  temp_folder dir("env-cli");
  auto path = dir.write("actions", "0.5\n-1.25\n\n2\n");
  auto r = run_troupe(
    fmt::format("env replay --env Pendulum-v1 --state=1.0,0.5 --actions '{}' --json",
                path),
    dir);
  CHECK(r.status == 0);
  auto lines = lines_of(r.out);
  REQUIRE(lines.size() == 3);
  // First step by hand: reward -(1 + 0.1 * 0.25 + 0.001 * 0.25).
  CHECK(std::fabs(json_number(lines[0], "reward") + (1.0 + 0.025 + 0.00025)) <= 1e-9);
  double thdot = 0.5 + (15.0 * std::sin(1.0) + 1.5) * 0.05;
  CHECK(std::fabs(json_array(lines[0], "state")[1] - thdot) <= 1e-12);
}

TEST_CASE("env replay rejects bad input with exit status 2 and a message naming it") {
  temp_folder dir("env-cli");
  auto ok_actions = dir.write("ok", "1\n");
  SUBCASE("an unknown id lists the valid ids") {
    auto r = run_troupe(
      fmt::format("env replay --env CartPole-v0 --state=0,0,0,0 --actions '{}'",
                  ok_actions),
      dir);
    CHECK(r.status == 2);
    for (auto id : {"CartPole-v1", "Pendulum-v1", "MountainCar-v0",
                    "MountainCarContinuous-v0", "Acrobot-v1"})
      CHECK(r.err.find(id) != std::string::npos);
  }
  SUBCASE("a state of the wrong length") {
    auto r = run_troupe(
      fmt::format("env replay --env Acrobot-v1 --state=0,0,0 --actions '{}'", ok_actions),
      dir);
    CHECK(r.status == 2);
    CHECK(r.err.find("4 state values") != std::string::npos);
    CHECK(r.out.empty());
  }
  SUBCASE("a state value that is not a number") {
    auto r = run_troupe(
      fmt::format("env replay --env Pendulum-v1 --state=0,x --actions '{}'", ok_actions),
      dir);
    CHECK(r.status == 2);
    CHECK(r.err.find("'x'") != std::string::npos);
  }
  SUBCASE("a Discrete action outside the space names the file and line") {
    auto bad = dir.write("bad", "1\n0\n3\n");
    auto r = run_troupe(
      fmt::format("env replay --env MountainCar-v0 --state=-0.5,0 --actions '{}'", bad),
      dir);
    CHECK(r.status == 2);
    CHECK(r.err.find(bad + ":3:") != std::string::npos);
    CHECK(r.err.find("Discrete(3)") != std::string::npos);
    CHECK(r.out.empty());
  }
  SUBCASE("a Box action outside the bounds") {
    auto bad = dir.write("bad", "0.5\n1.5\n");
    auto r = run_troupe(
      fmt::format(
        "env replay --env MountainCarContinuous-v0 --state=-0.5,0 --actions '{}'", bad),
      dir);
    CHECK(r.status == 2);
    CHECK(r.err.find(bad + ":2:") != std::string::npos);
  }
  SUBCASE("an unreadable actions file") {
    auto r = run_troupe(
      "env replay --env CartPole-v1 --state=0,0,0,0 --actions /nonexistent/a", dir);
    CHECK(r.status == 2);
    CHECK(r.err.find("/nonexistent/a") != std::string::npos);
  }
  SUBCASE("a missing option and an unknown option") {
    CHECK(run_troupe("env replay --env CartPole-v1 --state=0,0,0,0", dir).status == 2);
    auto r = run_troupe(
      fmt::format("env replay --env CartPole-v1 --state=0,0,0,0 --actions '{}' --stat 1",
                  ok_actions),
      dir);
    CHECK(r.status == 2);
    CHECK(r.err.find("--stat") != std::string::npos);
  }
}

TEST_CASE("env replay of a MuJoCo task from --qpos and --qvel matches MuJoCo stepped "
          "directly") {
  temp_folder dir("env-cli");
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> noise(-0.1, 0.1), act(-1.0, 1.0);
  auto model = troupe::envs::mujoco::builtin_model("half_cheetah.xml");
  REQUIRE(model.ok());
  const mjModel& m = **model;
  REQUIRE(m.nq == 9);
  REQUIRE(m.nv == 9);
  REQUIRE(m.nu == 6);
  std::vector<double> qpos(m.nq), qvel(m.nv);
  for (int i = 0; i < m.nq; ++i)
    qpos[i] = m.qpos0[i] + noise(gen);
  for (double& v : qvel)
    v = 10 * noise(gen);
  std::vector<std::vector<float>> actions(6, std::vector<float>(6));
  std::string text;
  for (auto& a : actions) {
    for (float& x : a)
      x = static_cast<float>(act(gen));
    text += fmt::format("{:.9g}\n", fmt::join(a, ","));
  }
  auto path = dir.write("actions", text);

  struct data_deleter {
    void operator()(mjData* d) const { mj_deleteData(d); }
  };
  // The reference: MuJoCo itself, as Gymnasium's set_state and do_simulation
  // drive it, with the warm start set to `warm` after set_state's mj_forward
  // (which leaves its own solution there); the replay is given `warm` with
  // --qacc-warmstart when `give` is true, and left to its default otherwise.
  auto check_replay = [&](const std::vector<double>& warm, bool give) {
    std::unique_ptr<mjData, data_deleter> d(mj_makeData(&m));
    mj_resetData(&m, d.get());
    for (int i = 0; i < m.nq; ++i)
      d->qpos[i] = qpos[i];
    for (int i = 0; i < m.nv; ++i)
      d->qvel[i] = qvel[i];
    mj_forward(&m, d.get());
    std::string warm_option;
    std::copy(warm.begin(), warm.end(), d->qacc_warmstart);
    if (give)
      warm_option = fmt::format(" --qacc-warmstart={}", state_arg(warm));
    auto r =
      run_troupe(fmt::format("env replay --env HalfCheetah-v4 --qpos={} --qvel={}{} "
                             "--actions '{}' --json",
                             state_arg(qpos), state_arg(qvel), warm_option, path),
                 dir);
    REQUIRE_MESSAGE(r.status == 0, r.err);
    auto lines = lines_of(r.out);
    REQUIRE(lines.size() == actions.size());
    for (size_t t = 0; t < actions.size(); ++t) {
      CAPTURE(t);
      const double x_before = d->qpos[0];
      for (int i = 0; i < m.nu; ++i)
        d->ctrl[i] = actions[t][i];
      for (int k = 0; k < 5; ++k)
        mj_step(&m, d.get());
      mj_rnePostConstraint(&m, d.get());
      float squares = 0;
      for (float x : actions[t])
        squares += x * x;
      const double reward = (d->qpos[0] - x_before) / (5 * m.opt.timestep) -
                            static_cast<double>(0.1f * squares);
      CHECK(json_number(lines[t], "reward") == doctest::Approx(reward).epsilon(1e-12));
      auto obs = json_array(lines[t], "obs");
      REQUIRE(obs.size() == 17);
      for (int i = 1; i < m.nq; ++i)
        CHECK(obs[i - 1] == static_cast<double>(static_cast<float>(d->qpos[i])));
      for (int i = 0; i < m.nv; ++i)
        CHECK(obs[8 + i] == static_cast<double>(static_cast<float>(d->qvel[i])));
      auto state = json_array(lines[t], "state");
      REQUIRE(state.size() == 27);
      for (int i = 0; i < m.nq; ++i)
        CHECK(state[i] == d->qpos[i]);
      for (int i = 0; i < m.nv; ++i)
        CHECK(state[18 + i] == d->qacc_warmstart[i]);
      CHECK_FALSE(json_flag(lines[t], "terminated"));
    }
  };
  SUBCASE("without --qacc-warmstart the warm start is zeros") {
    check_replay(std::vector<double>(m.nv, 0.0), false);
  }
  SUBCASE("with --qacc-warmstart, the one given") {
    std::vector<double> warm(m.nv);
    for (double& w : warm)
      w = 100 * noise(gen);
    check_replay(warm, true);
  }
}

TEST_CASE("env replay rejects bad MuJoCo parts with exit status 2, naming the option") {
  temp_folder dir("env-cli");
  auto actions = dir.write("ok", "0,0,0,0,0,0\n");
  const std::string q9 = "0,0,0,0,0,0,0,0,0";
  SUBCASE("a qpos of the wrong length names the joints") {
    auto r =
      run_troupe(fmt::format("env replay --env HalfCheetah-v4 --qpos=0,0 --qvel={} "
                             "--actions '{}'",
                             q9, actions),
                 dir);
    CHECK(r.status == 2);
    CHECK(r.err.find("--qpos: HalfCheetah-v4 has 9 values") != std::string::npos);
    CHECK(r.err.find("qpos.rootx") != std::string::npos);
    CHECK(r.out.empty());
  }
  SUBCASE("--qpos without --qvel, and with --state") {
    auto r =
      run_troupe(fmt::format("env replay --env HalfCheetah-v4 --qpos={} --actions '{}'",
                             q9, actions),
                 dir);
    CHECK(r.status == 2);
    CHECK(r.err.find("--qpos and --qvel go together") != std::string::npos);
    r = run_troupe(fmt::format("env replay --env HalfCheetah-v4 --qpos={} --qvel={} "
                               "--state=0 --actions '{}'",
                               q9, q9, actions),
                   dir);
    CHECK(r.status == 2);
    CHECK(r.err.find("not both") != std::string::npos);
  }
  SUBCASE("a qvel value that is not a number, and --qpos on a classic task") {
    auto r = run_troupe(fmt::format("env replay --env HalfCheetah-v4 --qpos={} "
                                    "--qvel=0,0,0,0,nan,0,0,0,0 --actions '{}'",
                                    q9, actions),
                        dir);
    CHECK(r.status == 2);
    CHECK(r.err.find("--qvel: value 5 'nan' is not a finite number") !=
          std::string::npos);
    auto cart = dir.write("cart", "1\n");
    r = run_troupe(
      fmt::format("env replay --env CartPole-v1 --qpos=0 --qvel=0 --actions '{}'", cart),
      dir);
    CHECK(r.status == 2);
    CHECK(r.err.find("CartPole-v1 is not a MuJoCo task") != std::string::npos);
  }
  SUBCASE("a task whose state holds more than qpos, qvel and the warm start") {
    auto zero = dir.write("zero", "0,0\n");
    auto r = run_troupe(fmt::format("env replay --env Reacher-v4 --qpos=0,0,0,0 "
                                    "--qvel=0,0,0,0 --actions '{}'",
                                    zero),
                        dir);
    CHECK(r.status == 2);
    CHECK(r.err.find("Reacher-v4's state also holds fingertip_minus_target.x") !=
          std::string::npos);
    CHECK(r.err.find("--state") != std::string::npos);
  }
}

TEST_CASE("bench envs --json prints one row per environment, size and thread count") {
  temp_folder dir("env-cli");
  auto r = run_troupe("bench envs --json --env MountainCar-v0 --seconds 0.001", dir);
  REQUIRE(r.status == 0);
  const auto rows = nlohmann::ordered_json::parse(r.out, nullptr, false);
  INFO(r.out);
  REQUIRE(rows.is_array());
  // The single environment first, then the vector env at each size and
  // thread count; every row with the same keys in the same order.
  REQUIRE(rows.size() >= 5);
  CHECK(rows[0].at("api") == "env");
  CHECK(rows[0].at("num_envs") == 1);
  std::vector<int> sizes_on_one_thread;
  for (const auto& row : rows) {
    CAPTURE(row.dump());
    std::vector<std::string> keys;
    for (auto& [key, value] : row.items())
      keys.push_back(key);
    CHECK(keys == std::vector<std::string>{"env", "api", "num_envs", "threads",
                                           "threads_used", "steps_per_s"});
    CHECK(row.at("env") == "MountainCar-v0"); // --env selects one
    CHECK(row.at("steps_per_s").get<double>() > 0);
    if (row.at("api") == "vector" && row.at("threads") == 1)
      sizes_on_one_thread.push_back(row.at("num_envs").get<int>());
  }
  CHECK(sizes_on_one_thread == std::vector<int>{1, 16, 256, 4096});
  CHECK(r.out.find("CartPole-v1") == std::string::npos); // --env selects one
  auto bad = run_troupe("bench envs --env Nope-v0", dir);
  CHECK(bad.status == 2);
  CHECK(bad.err.find("CartPole-v1") != std::string::npos);
}

TEST_CASE("bench envs --json gives a MuJoCo task's rows their floor and ratio, and "
          "the resident memory of its environments") {
  temp_folder dir("env-cli");
  const std::string id = "InvertedPendulum-v4";
  auto r = run_troupe(
    fmt::format("bench envs --json --env {} --seconds 0.001 --rounds 2 --memory-envs 3",
                id),
    dir);
  REQUIRE_MESSAGE(r.status == 0, r.err);
  const auto rows = nlohmann::ordered_json::parse(r.out, nullptr, false);
  INFO(r.out);
  REQUIRE(rows.is_array());
  int memory_rows = 0, speed_rows = 0;
  for (const auto& row : rows) {
    CAPTURE(row.dump());
    CHECK(row.at("env") == id);
    std::vector<std::string> keys;
    for (auto& item : row.items())
      keys.push_back(item.key());
    if (row.at("api") == "memory") {
      ++memory_rows;
      CHECK(keys == std::vector<std::string>{"env", "api", "num_envs", "rss_growth_bytes",
                                             "rss_growth_bytes_per_env"});
      CHECK(row.at("num_envs") == 3);
      // Each environment's mjData buffer is zeroed when it is made, so it is
      // resident: at least 3 of them (MuJoCo's own size, not bench's figure).
      auto physics = troupe::envs::mujoco::physics_of(id).value();
      mjData* d = mj_makeData(physics.model.get());
      REQUIRE(d != nullptr);
      const double buffer_bytes = d->nbuffer;
      mj_deleteData(d);
      const double growth = row.at("rss_growth_bytes").get<double>();
      CHECK(growth >= 0.9 * 3 * buffer_bytes);
      CHECK(row.at("rss_growth_bytes_per_env").get<double>() ==
            doctest::Approx(growth / 3).epsilon(1e-6));
      continue;
    }
    ++speed_rows;
    CHECK(keys == std::vector<std::string>{
                    "env", "api", "num_envs", "threads", "threads_used", "steps_per_s",
                    "steps_per_s_per_core", "floor_steps_per_s", "ratio_to_floor",
                    "floor_no_reset_steps_per_s"});
    const double steps = row.at("steps_per_s").get<double>();
    const double floor = row.at("floor_steps_per_s").get<double>();
    const double used = row.at("threads_used").get<double>();
    CHECK(steps > 0);
    CHECK(floor > 0);
    CHECK(row.at("floor_no_reset_steps_per_s").get<double>() > 0);
    // The printed figures are rounded: whole steps, the ratio to 3 places.
    const double ratio = steps / floor;
    CHECK(std::fabs(row.at("ratio_to_floor").get<double>() - ratio) <=
          0.0005 + ratio * (0.5 / steps + 0.5 / floor) + 1e-9);
    CHECK(std::fabs(row.at("steps_per_s_per_core").get<double>() - steps / used) <=
          0.5 + 0.5 / used + 1e-9);
    CHECK(used >= 1);
    CHECK(used <= row.at("threads").get<double>());
  }
  CHECK(memory_rows == 1);
  // One environment, then vectors of 1, 16, 64 and 256 on one thread and on
  // all cores (when there is more than one).
  CHECK((speed_rows == 5 || speed_rows == 9));
  auto bad = run_troupe("bench envs --env InvertedPendulum-v4 --memory-envs -1", dir);
  CHECK(bad.status == 2);
  CHECK(bad.err.find("--memory-envs") != std::string::npos);
  bad = run_troupe("bench envs --env InvertedPendulum-v4 --rounds 0", dir);
  CHECK(bad.status == 2);
  CHECK(bad.err.find("--rounds") != std::string::npos);
}
