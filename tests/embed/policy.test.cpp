// troupe::policy (deployment): loads a policy file, a checkpoint folder or a
// run folder and acts as the float64 reference of the documented module and
// as the internal model does; bad input returns errors naming the call.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include <fmt/format.h>

#include <troupe/troupe.hpp>

#include "base/rng.hpp"
#include "learners/checkpoint.hpp"
#include "learners/rollout.hpp"
#include "tests/learners/policy_reference.hpp"
#include "tests/temp_folder.hpp"

namespace fs = std::filesystem;
using troupe::test::fresh_seed;
using troupe::test::temp_folder;

namespace {

// A random observation around the statistics' scale (clipping included).
std::vector<float> random_obs(int64_t dim, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> obs(static_cast<size_t>(dim));
  for (auto& x : obs)
    x = normal(rng);
  return obs;
}

// A run folder with checkpoints/<updates>/policy.safetensors and its manifest.
fs::path write_run_checkpoint(const fs::path& run, int updates,
                              const troupe::learners::actor_critic& model,
                              const troupe::learners::stats_snapshot* stats) {
  auto folder = run / "checkpoints" / fmt::format("{:010d}", updates);
  fs::create_directories(folder);
  auto saved = troupe::learners::save_checkpoint((folder / "policy.safetensors").string(),
                                                 model, stats);
  REQUIRE_MESSAGE(saved.ok(), saved.err().message);
  auto manifest =
    troupe::learners::write_checkpoint_manifest(folder.string(), {"policy.safetensors"});
  REQUIRE_MESSAGE(manifest.ok(), manifest.err().message);
  return folder;
}

} // namespace

TEST_CASE("a loaded policy acts as the float64 reference and the internal model") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  temp_folder dir("embed-policy");
  for (int trial = 0; trial < 12; ++trial) {
    auto a = troupe::test::random_arch(rng);
    CAPTURE(trial);
    CAPTURE(a.discrete);
    CAPTURE(a.obs_norm);
    CAPTURE(a.batch_norm);
    auto model = troupe::test::random_model(a, rng);
    auto stats = troupe::test::random_stats(a.obs_dim, rng);
    const auto* stats_ptr = a.obs_norm ? &stats : nullptr;
    // The three forms of path, each holding the same policy.
    auto file = dir.path / fmt::format("p{}.safetensors", trial);
    REQUIRE(troupe::learners::save_checkpoint(file.string(), model, stats_ptr).ok());
    auto run = dir.path / fmt::format("run{}", trial);
    auto folder = write_run_checkpoint(run, 7, model, stats_ptr);
    auto st = troupe::learners::make_checkpoint(model, stats_ptr);
    REQUIRE(st.ok());
    auto internal = troupe::learners::load_checkpoint(file.string());
    REQUIRE(internal.ok());
    const auto* internal_stats = a.obs_norm ? &internal->obs_stats : nullptr;

    for (const auto& path : {file, folder, run}) {
      CAPTURE(path.string());
      auto p = troupe::policy::load(path.string());
      REQUIRE_MESSAGE(p.ok(), (p ? std::string() : p.err().message));
      CHECK(p->obs_dim() == static_cast<size_t>(a.obs_dim));
      CHECK(p->discrete() == a.discrete);
      CHECK(p->action_dim() == (a.discrete ? 1u : static_cast<size_t>(a.action_dim)));
      CHECK(p->num_actions() == (a.discrete ? static_cast<size_t>(a.action_dim) : 0u));
      CHECK(fs::path(p->source()).filename() ==
            (path == file ? file.filename() : "policy.safetensors"));
      for (int k = 0; k < 5; ++k) {
        auto obs = random_obs(a.obs_dim, rng);
        std::vector<double> obs64(obs.begin(), obs.end());
        auto want = troupe::test::reference_forward(a, *st, obs64);
        std::vector<float> action(p->action_dim());
        auto acted = p->act(obs.data(), obs.size(), action.data());
        REQUIRE_MESSAGE(acted.ok(), acted.err().message);
        // The internal path: evaluate, then the runners' action selection.
        troupe::learners::policy_output out;
        REQUIRE(internal->model.evaluate(obs.data(), 1, internal_stats, out).ok());
        if (a.discrete) {
          float internal_action = -1;
          troupe::learners::most_likely_categorical(
            out.logits.data(), 1, static_cast<size_t>(a.action_dim), &internal_action);
          CHECK(action[0] == internal_action);
          // The reference's argmax, unless two logits are within float32 noise.
          std::vector<double> sorted = want.logits;
          std::sort(sorted.rbegin(), sorted.rend());
          if (sorted[0] - sorted[1] > 1e-3 * (1 + std::fabs(sorted[0]))) {
            auto best = std::max_element(want.logits.begin(), want.logits.end()) -
                        want.logits.begin();
            CHECK(action[0] == static_cast<float>(best));
          }
        } else {
          for (size_t j = 0; j < action.size(); ++j) {
            CAPTURE(j);
            CHECK(action[j] == out.mean[j]);
            CHECK(troupe::test::close_to(action[j], want.mean[j]));
          }
        }
        // Stochastic: the runners' draw from the same generator seed.
        const uint64_t draw_seed = rng();
        std::vector<float> drawn(p->action_dim()), again(p->action_dim()),
          internal_drawn(p->action_dim());
        REQUIRE(p->act(obs.data(), obs.size(), drawn.data(), false, draw_seed).ok());
        REQUIRE(p->act(obs.data(), obs.size(), again.data(), false, draw_seed).ok());
        troupe::base::rng gen(draw_seed);
        if (a.discrete)
          troupe::learners::sample_categorical(out.logits.data(), 1,
                                               static_cast<size_t>(a.action_dim), gen,
                                               internal_drawn.data(), nullptr);
        else
          troupe::learners::sample_gaussian(out.mean.data(), out.log_std.data(), 1,
                                            static_cast<size_t>(a.action_dim), gen,
                                            internal_drawn.data(), nullptr);
        CHECK(drawn == again);
        CHECK(drawn == internal_drawn);
        if (a.discrete) {
          CHECK(drawn[0] >= 0);
          CHECK(drawn[0] < static_cast<float>(a.action_dim));
          CHECK(drawn[0] == std::floor(drawn[0]));
        }
      }
    }
  }
}

TEST_CASE("policy::load takes the newest good checkpoint of a run folder") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  temp_folder dir("embed-policy-run");
  troupe::test::reference_arch a;
  a.obs_dim = 3;
  a.action_dim = 2;
  a.discrete = false;
  auto older = troupe::test::random_model(a, rng);
  auto newer = troupe::test::random_model(a, rng);
  auto run = dir.path / "run";
  auto old_folder = write_run_checkpoint(run, 10, older, nullptr);
  auto new_folder = write_run_checkpoint(run, 20, newer, nullptr);
  auto obs = random_obs(a.obs_dim, rng);

  auto mean_of = [&](const troupe::learners::actor_critic& m) {
    troupe::learners::policy_output out;
    REQUIRE(m.evaluate(obs.data(), 1, nullptr, out).ok());
    return std::vector<float>(out.mean.begin(), out.mean.begin() + 2);
  };
  auto act = [&](const troupe::policy& p) {
    std::vector<float> action(2);
    REQUIRE(p.act(obs.data(), obs.size(), action.data()).ok());
    return action;
  };
  {
    auto p = troupe::policy::load(run.string());
    REQUIRE(p.ok());
    CHECK(fs::path(p->source()).parent_path() == new_folder);
    CHECK(act(*p) == mean_of(newer));
  }
  // A flipped byte in the newest policy file: its manifest rejects it.
  {
    auto path = new_folder / "policy.safetensors";
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(path) - 3));
    f.put('\x7f');
  }
  auto p = troupe::policy::load(run.string());
  REQUIRE_MESSAGE(p.ok(), (p ? std::string() : p.err().message));
  CHECK(fs::path(p->source()).parent_path() == old_folder);
  CHECK(act(*p) == mean_of(older));
}

TEST_CASE("policy::load and act return errors naming the call, the rule and the values") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  temp_folder dir("embed-policy-errors");

  auto missing = troupe::policy::load((dir.path / "nothing").string());
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.err().code == troupe::errc::not_found);
  CHECK(missing.err().message.find((dir.path / "nothing").string()) != std::string::npos);

  auto empty = troupe::policy::load(dir.path.string());
  REQUIRE_FALSE(empty.ok());
  CHECK(empty.err().code == troupe::errc::not_found);
  CHECK(empty.err().message.find("checkpoints/") != std::string::npos);

  auto garbage = dir.path / "garbage.safetensors";
  std::ofstream(garbage) << "not a safetensors file";
  auto bad = troupe::policy::load(garbage.string());
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.err().message.find(garbage.string()) != std::string::npos);

  troupe::test::reference_arch a;
  a.obs_dim = 2 + static_cast<int64_t>(rng() % 6);
  auto model = troupe::test::random_model(a, rng);
  auto file = dir.path / "policy.safetensors";
  REQUIRE(troupe::learners::save_checkpoint(file.string(), model, nullptr).ok());
  auto p = troupe::policy::load(file.string());
  REQUIRE(p.ok());
  auto obs = random_obs(a.obs_dim, rng);
  float action = -7;

  auto longer = obs;
  longer.push_back(0.5f);
  auto wrong = p->act(longer.data(), longer.size(), &action);
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.err().code == troupe::errc::dimension_mismatch);
  CHECK(wrong.err().message.find("policy::act") != std::string::npos);
  CHECK(wrong.err().message.find(fmt::format("has {} values", longer.size())) !=
        std::string::npos);
  CHECK(wrong.err().message.find(fmt::format("obs_dim = {}", a.obs_dim)) !=
        std::string::npos);
  CHECK(action == -7);

  const size_t at = rng() % obs.size();
  for (float bad_value : {std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::infinity()}) {
    auto nan_obs = obs;
    nan_obs[at] = bad_value;
    auto non_finite = p->act(nan_obs.data(), nan_obs.size(), &action);
    REQUIRE_FALSE(non_finite.ok());
    CHECK(non_finite.err().code == troupe::errc::non_finite);
    CHECK(non_finite.err().message.find(fmt::format("value {} is {}", at, bad_value)) !=
          std::string::npos);
    CHECK(action == -7);
  }

  auto null_obs = p->act(nullptr, obs.size(), &action);
  CHECK(null_obs.err().code == troupe::errc::invalid_argument);
  CHECK(null_obs.err().message.find("obs is null") != std::string::npos);

  // The policy keeps working after every error.
  REQUIRE(p->act(obs.data(), obs.size(), &action).ok());
  CHECK(action >= 0);
  CHECK(action < a.action_dim);
}
