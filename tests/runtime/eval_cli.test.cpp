#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "envs/registry.hpp"
#include "learners/checkpoint.hpp"
#include "tests/cli_support.hpp"

using namespace troupe::learners;
using troupe::test::fresh_seed;
using troupe::test::run_troupe;
using troupe::test::temp_folder;
namespace fs = std::filesystem;

namespace {

// -- policies with known behaviour -------------------------------------------

// A model of `spec` with every parameter zero except those `set` writes.
template <class Set>
actor_critic hand_set_policy(const model_spec& spec, Set&& set) {
  actor_critic model(spec, 1);
  std::map<std::string, tensor_ref> named;
  for (auto& t : model.tensors()) {
    std::fill(t.data, t.data + t.size(), 0.0f);
    named.emplace(t.name, t);
  }
  set(named);
  return model;
}

model_spec cartpole_spec(bool obs_norm) {
  model_spec spec;
  spec.obs_dim = 4;
  spec.action = action_kind::discrete;
  spec.n = 2;
  spec.hidden = {8};
  spec.obs_norm = obs_norm;
  return spec;
}

// Pushes right (action 1) exactly when theta + theta_dot > 0: the hidden unit
// is tanh(theta + theta_dot), whose sign float32 rounding keeps, and the
// logits are (-h, h); on a tie (h = 0) argmax takes action 0.
actor_critic lean_policy(bool obs_norm = false) {
  return hand_set_policy(cartpole_spec(obs_norm), [](auto& t) {
    t.at("actor.0.weight").data[2] = 1.0f;  // row 0, column theta
    t.at("actor.0.weight").data[3] = 1.0f;  // row 0, column theta_dot
    t.at("actor.2.weight").data[0] = -1.0f; // logit 0 = -h
    t.at("actor.2.weight").data[8] = 1.0f;  // logit 1 = +h
  });
}

// Logits (0, 0): uniform when sampled, action 0 when deterministic.
actor_critic uniform_policy() {
  return hand_set_policy(cartpole_spec(false), [](auto&) {});
}

// A Pendulum policy whose Gaussian mean is `torque` whatever it observes.
actor_critic constant_torque_policy(float torque) {
  model_spec spec;
  spec.obs_dim = 3;
  spec.action = action_kind::box;
  spec.act_dim = 1;
  spec.hidden = {4};
  return hand_set_policy(spec, [&](auto& t) {
    t.at("actor_mean.2.bias").data[0] = torque;
    t.at("actor_logstd").data[0] = 0.5f;
  });
}

std::string save(const temp_folder& dir, const std::string& name,
                 const actor_critic& model,
                 const std::map<std::string, std::string>& extra,
                 const stats_snapshot* stats = nullptr) {
  auto path = dir.path / name;
  fs::create_directories(path.parent_path());
  auto saved = save_checkpoint(path.string(), model, stats, extra);
  REQUIRE_MESSAGE(saved, saved.err().message);
  return path.string();
}

// -- float64 references --------------------------------------------------------

struct reference {
  std::vector<double> returns, lengths;

  double mean(const std::vector<double>& xs) const {
    double s = 0;
    for (double x : xs)
      s += x;
    return s / static_cast<double>(xs.size());
  }
  double std_dev(const std::vector<double>& xs) const {
    double m = mean(xs), s = 0;
    for (double x : xs)
      s += (x - m) * (x - m);
    return std::sqrt(s / static_cast<double>(xs.size()));
  }
};

// Episodes of `id` reset with seeds seed..seed+n-1, acting with `act(obs)`.
template <class Act>
reference play(const std::string& id, uint64_t seed, int n, Act&& act) {
  auto env = troupe::envs::make_env(id);
  REQUIRE(env);
  reference ref;
  for (int i = 0; i < n; ++i) {
    auto obs = (*env)->reset(seed + static_cast<uint64_t>(i));
    double total = 0, length = 0;
    while (true) {
      auto step = (*env)->step(act(obs));
      REQUIRE(step);
      total += step->reward;
      length += 1;
      obs = step->obs;
      if (step->terminated || step->truncated)
        break;
    }
    ref.returns.push_back(total);
    ref.lengths.push_back(length);
  }
  return ref;
}

std::vector<float> lean_action(const std::vector<float>& obs) {
  // The sum of two floats is exact in float64, so its sign is the sign the
  // policy's float32 sum has.
  double lean = static_cast<double>(obs[2]) + static_cast<double>(obs[3]);
  return {lean > 0 ? 1.0f : 0.0f};
}

// -- reading the output ----------------------------------------------------------

nlohmann::json json_field(const std::string& text, const std::string& key) {
  const auto parsed = nlohmann::json::parse(text);
  REQUIRE_MESSAGE(parsed.contains(key), key, " missing in ", text);
  return parsed.at(key);
}

double json_number(const std::string& text, const std::string& key) {
  return json_field(text, key).get<double>();
}

void check_matches(const std::string& json, const reference& ref) {
  CAPTURE(json);
  CHECK(json_number(json, "episodes") == static_cast<double>(ref.returns.size()));
  auto close = [](double got, double want) {
    return std::abs(got - want) <= 1e-9 * std::max(1.0, std::abs(want));
  };
  CHECK(close(json_number(json, "return_mean"), ref.mean(ref.returns)));
  CHECK(close(json_number(json, "return_std"), ref.std_dev(ref.returns)));
  CHECK(close(json_number(json, "return_min"),
              *std::min_element(ref.returns.begin(), ref.returns.end())));
  CHECK(close(json_number(json, "return_max"),
              *std::max_element(ref.returns.begin(), ref.returns.end())));
  CHECK(close(json_number(json, "length_mean"), ref.mean(ref.lengths)));
}

} // namespace

TEST_CASE("deterministic eval of a lean-following CartPole policy matches an episode "
          "loop written here") {
  const auto seed = fresh_seed() % 1000000;
  const int episodes = 3 + static_cast<int>(fresh_seed() % 10);
  CAPTURE(seed);
  CAPTURE(episodes);
  temp_folder dir("eval");
  auto path = save(dir, "lean.safetensors", lean_policy(), {{"env_id", "CartPole-v1"}});
  auto ref = play("CartPole-v1", seed, episodes, lean_action);
  auto r = run_troupe(
    fmt::format("eval '{}' --episodes {} --seed {} --json", path, episodes, seed), dir);
  REQUIRE_MESSAGE(r.status == 0, r.err);
  check_matches(r.out, ref);
  CHECK(json_field(r.out, "env_id") == "CartPole-v1");

  auto table = run_troupe(
    fmt::format("eval '{}' --episodes {} --seed {}", path, episodes, seed), dir);
  REQUIRE_MESSAGE(table.status == 0, table.err);
  CHECK(table.out.find(fmt::format("mean {:.3f}", ref.mean(ref.returns))) !=
        std::string::npos);
  CHECK(table.out.find("deterministic") != std::string::npos);
}

TEST_CASE("eval normalizes observations with the checkpoint's statistics as the model's "
          "formula says") {
  const auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> offset(-0.05, 0.05), log_var(-8, 0);
  stats_snapshot stats;
  stats.stream = "obs";
  stats.version = 7;
  stats.count = 1000;
  for (int i = 0; i < 4; ++i) {
    stats.mean.push_back(offset(gen));
    stats.var.push_back(std::exp(log_var(gen)));
  }
  const auto spec = cartpole_spec(true);
  auto act = [&](const std::vector<float>& obs) {
    double sum = 0;
    for (int i = 2; i < 4; ++i) {
      double z = (obs[i] - stats.mean[i]) / std::sqrt(stats.var[i] + spec.obs_norm_eps);
      sum += std::clamp(z, -spec.obs_norm_clip, spec.obs_norm_clip);
    }
    return std::vector<float>{sum > 0 ? 1.0f : 0.0f};
  };
  temp_folder dir("eval");
  auto path = save(dir, "normed.safetensors", lean_policy(true),
                   {{"env_id", "CartPole-v1"}}, &stats);
  const uint64_t first = seed % 100000;
  auto ref = play("CartPole-v1", first, 8, act);
  auto r =
    run_troupe(fmt::format("eval '{}' --episodes 8 --seed {} --json", path, first), dir);
  REQUIRE_MESSAGE(r.status == 0, r.err);
  check_matches(r.out, ref);
}

TEST_CASE("a continuous policy acts with its mean clipped to the action space") {
  const auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  auto uniform = [&](double lo, double hi) {
    return static_cast<float>(std::uniform_real_distribution<double>(lo, hi)(gen));
  };
  const float inside = uniform(-1.9, 1.9);
  const float outside = (gen() % 2 ? 1.0f : -1.0f) * uniform(2.5, 9);
  temp_folder dir("eval");
  for (float torque : {inside, outside}) {
    CAPTURE(torque);
    auto path = save(dir, "pendulum.safetensors", constant_torque_policy(torque),
                     {{"env_id", "Pendulum-v1"}});
    const float applied = std::clamp(torque, -2.0f, 2.0f);
    const uint64_t first = gen() % 100000;
    auto ref =
      play("Pendulum-v1", first, 4, [&](auto&) { return std::vector<float>{applied}; });
    auto r = run_troupe(
      fmt::format("eval '{}' --episodes 4 --seed {} --json", path, first), dir);
    REQUIRE_MESSAGE(r.status == 0, r.err);
    check_matches(r.out, ref);
    CHECK(json_number(r.out, "length_mean") == 200);
  }
}

TEST_CASE(
  "--stochastic samples actions: a uniform CartPole policy scores as random play") {
  const auto seed = fresh_seed() % 1000000;
  CAPTURE(seed);
  temp_folder dir("eval");
  auto path =
    save(dir, "uniform.safetensors", uniform_policy(), {{"env_id", "CartPole-v1"}});

  // Deterministic: equal logits pick action 0 every step.
  auto left =
    play("CartPole-v1", seed, 20, [](auto&) { return std::vector<float>{0.0f}; });
  auto det =
    run_troupe(fmt::format("eval '{}' --episodes 20 --seed {} --json", path, seed), dir);
  REQUIRE_MESSAGE(det.status == 0, det.err);
  check_matches(det.out, left);

  // Stochastic: the mean return of uniformly random actions, from a long
  // reference run with its own generator, within 5 standard errors.
  std::mt19937_64 gen(seed);
  auto random_play = play("CartPole-v1", seed + 1000000, 4000, [&](auto&) {
    return std::vector<float>{static_cast<float>(gen() % 2)};
  });
  const int episodes = 400;
  auto r = run_troupe(fmt::format("eval '{}' --episodes {} --seed {} --stochastic --json",
                                  path, episodes, seed),
                      dir);
  REQUIRE_MESSAGE(r.status == 0, r.err);
  const double ref_mean = random_play.mean(random_play.returns);
  const double sd = random_play.std_dev(random_play.returns);
  const double stderr_diff = sd * std::sqrt(1.0 / episodes + 1.0 / 4000);
  CAPTURE(ref_mean);
  CAPTURE(sd);
  CAPTURE(r.out);
  CHECK(std::abs(json_number(r.out, "return_mean") - ref_mean) < 5 * stderr_diff);
  CHECK(std::abs(json_number(r.out, "return_std") - sd) < 0.25 * sd);
  CHECK(json_field(r.out, "stochastic") == true);
}

TEST_CASE("a run folder evaluates its newest complete checkpoint and a checkpoint folder "
          "its policy") {
  const auto seed = fresh_seed() % 1000000;
  CAPTURE(seed);
  temp_folder dir("eval");
  const std::map<std::string, std::string> meta = {{"env_id", "CartPole-v1"}};
  save(dir, "run/checkpoints/0000000010/policy.safetensors", uniform_policy(), meta);
  save(dir, "run/checkpoints/0000000020/policy.safetensors", lean_policy(), meta);
  save(dir, "run/checkpoints/000000009/policy.safetensors", uniform_policy(), meta);
  // Being written or incomplete: never chosen.
  fs::create_directories(dir.path / "run/checkpoints/0000000030.tmp");
  dir.write("run/checkpoints/0000000030.tmp/policy.safetensors", "half a file");
  fs::create_directories(dir.path / "run/checkpoints/0000000040");

  auto lean = play("CartPole-v1", seed, 5, lean_action);
  auto newest =
    run_troupe(fmt::format("eval run --episodes 5 --seed {} --json", seed), dir);
  REQUIRE_MESSAGE(newest.status == 0, newest.err);
  check_matches(newest.out, lean);
  CHECK(newest.out.find("0000000020") != std::string::npos);
  // The folder without a policy file is reported, and the one before it taken
  // (the lookup troupe train --resume uses).
  CHECK(newest.err.find("0000000040: not usable") != std::string::npos);
  CHECK(newest.err.find("falling back to") != std::string::npos);

  auto left =
    play("CartPole-v1", seed, 5, [](auto&) { return std::vector<float>{0.0f}; });
  auto older = run_troupe(fmt::format("eval run/checkpoints/0000000010 --episodes 5 "
                                      "--seed {} --json",
                                      seed),
                          dir);
  REQUIRE_MESSAGE(older.status == 0, older.err);
  check_matches(older.out, left);

  fs::create_directories(dir.path / "empty-run/checkpoints");
  auto none = run_troupe("eval empty-run", dir);
  CHECK(none.status == 2);
  CHECK(none.err.find("no complete checkpoint") != std::string::npos);
}

TEST_CASE("--env overrides the checkpoint's env_id, and a mismatch names both spaces") {
  const auto seed = fresh_seed() % 1000000;
  CAPTURE(seed);
  temp_folder dir("eval");
  // A CartPole-shaped policy that claims Acrobot (6 observations, 3 actions).
  auto path = save(dir, "p.safetensors", lean_policy(), {{"env_id", "Acrobot-v1"}});
  auto mismatch = run_troupe(fmt::format("eval '{}' --episodes 2", path), dir);
  CHECK(mismatch.status == 2);
  CAPTURE(mismatch.err);
  CHECK(mismatch.err.find("Acrobot-v1") != std::string::npos);
  CHECK(mismatch.err.find("obs_dim 4") != std::string::npos);
  CHECK(mismatch.err.find("Discrete(3)") != std::string::npos);
  CHECK(mismatch.out.empty());

  auto lean = play("CartPole-v1", seed, 3, lean_action);
  auto fixed =
    run_troupe(fmt::format("eval '{}' --env CartPole-v1 --episodes 3 --seed {} "
                           "--json",
                           path, seed),
               dir);
  REQUIRE_MESSAGE(fixed.status == 0, fixed.err);
  check_matches(fixed.out, lean);

  // A continuous policy on a discrete environment.
  auto pendulum = save(dir, "pend.safetensors", constant_torque_policy(1.0f), {});
  auto wrong = run_troupe(fmt::format("eval '{}' --env CartPole-v1", pendulum), dir);
  CHECK(wrong.status == 2);
  CHECK(wrong.err.find("Gaussian head") != std::string::npos);
  CHECK(wrong.err.find("CartPole-v1") != std::string::npos);
}

TEST_CASE("eval rejects bad input with exit status 2 and a message naming it") {
  temp_folder dir("eval");
  auto no_env = save(dir, "p.safetensors", lean_policy(), {});
  struct bad_case {
    std::string args, mentions;
  };
  const std::vector<bad_case> cases = {
    {fmt::format("eval '{}'", no_env), "--env"},
    {fmt::format("eval '{}' --env CartPol-v1", no_env), "CartPole-v1"},
    {fmt::format("eval '{}' --env CartPole-v1 --episodes 0", no_env), "episodes"},
    {fmt::format("eval '{}' --env CartPole-v1 --episodes lots", no_env), "episodes"},
    {fmt::format("eval '{}' --env CartPole-v1 --greedy", no_env), "--stochastic"},
    {"eval no-such-file.safetensors", "no-such-file.safetensors"},
    {fmt::format("eval '{}'", dir.write("junk.safetensors", "not a safetensors file")),
     "junk.safetensors"},
    {"eval", "CHECKPOINT"},
  };
  for (auto& c : cases) {
    CAPTURE(c.args);
    auto r = run_troupe(c.args, dir);
    CAPTURE(r.err);
    CHECK(r.status == 2);
    CHECK(r.err.find(c.mentions) != std::string::npos);
    CHECK(r.out.empty());
  }
}

TEST_CASE("eval and plot read the run folder that troupe train writes") {
  temp_folder dir("eval");
  auto trained = run_troupe(
    fmt::format("train '{}/config/cartpole_ppo.toml' --set run.output_dir=runs "
                "--set algo.total_env_steps=6144 --set run.checkpoint_every_updates=4 "
                "--set run.log_every_updates=1 --set run.name=cartpole_ppo "
                "--set algo.mode=sync",
                TROUPE_SOURCE_DIR),
    dir);
  REQUIRE_MESSAGE(trained.status == 0, trained.err);
  std::vector<fs::path> runs;
  for (auto& e : fs::directory_iterator(dir.path / "runs"))
    runs.push_back(e.path());
  REQUIRE(runs.size() == 1);
  const auto run = runs[0].string();

  // The environment comes from the checkpoint's env_id metadata.
  auto r = run_troupe(fmt::format("eval '{}' --episodes 3 --json", run), dir);
  REQUIRE_MESSAGE(r.status == 0, r.err);
  CAPTURE(r.out);
  CHECK(json_field(r.out, "env_id") == "CartPole-v1");
  CHECK(json_number(r.out, "episodes") == 3);
  // CartPole pays 1 per step: returns are lengths, between 1 and the limit.
  CHECK(json_number(r.out, "return_mean") == json_number(r.out, "length_mean"));
  CHECK(json_number(r.out, "return_min") >= 1);
  CHECK(json_number(r.out, "return_max") <= 500);

  auto plotted = run_troupe(fmt::format("plot '{}' --out again.svg", run), dir);
  REQUIRE_MESSAGE(plotted.status == 0, plotted.err);
  std::ifstream in(dir.path / "again.svg");
  std::string svg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(svg.find("cartpole_ppo: ppo (sync) on CartPole-v1") != std::string::npos);
  CHECK(svg.find("<polyline") != std::string::npos);
}
