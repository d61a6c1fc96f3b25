// Training a game's environment registered by id (envs/callback_env.hpp),
// in this process: a config naming it trains like a built-in one, and a run
// over a game without state callbacks resumes with fresh episodes.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "edge/runner_state_file.hpp"
#include "learners/safetensors.hpp"
#include "runtime/config.hpp"
#include "runtime/train.hpp"
#include "tests/envs/drift_game.hpp"
#include "tests/temp_folder.hpp"

namespace fs = std::filesystem;
using troupe::test::scoped_drift_env;
using troupe::test::temp_folder;

TEST_CASE(
  "a config naming a registered callback env trains, and resuming a run over a game "
  "without state starts fresh episodes and continues the counters") {
  temp_folder dir("train-callback");
  scoped_drift_env game("DriftTrain-v0", false);
  REQUIRE(game.registered());
  const std::string config = std::string(TROUPE_SOURCE_DIR) + "/config/cartpole_ppo.toml";
  auto cfg = troupe::runtime::load_config(
    config,
    {fmt::format("run.output_dir=\"{}\"", (dir.path / "out").string()),
     "algo.total_env_steps=2048", "env.id=\"DriftTrain-v0\"", "run.log_every_updates=1"});
  INFO((cfg ? std::string{} : cfg.err().message));
  REQUIRE(cfg.ok());
  auto first = troupe::runtime::run_training(*cfg);
  INFO((first ? std::string{} : first.err().message));
  REQUIRE(first.ok());
  CHECK(first->env_steps == 2048);
  CHECK(first->updates > 0);
  // Time limit 40: episodes finished, so the mean return is a number.
  CHECK(std::isfinite(first->return_mean_100));

  // The final checkpoint records that the game saved no state.
  const fs::path run = first->run_dir;
  fs::path newest;
  for (auto& e : fs::directory_iterator(run / "checkpoints"))
    if (e.path() > newest)
      newest = e.path();
  REQUIRE(fs::exists(newest / "runners.safetensors"));
  auto raw =
    troupe::learners::read_safetensors((newest / "runners.safetensors").string());
  REQUIRE(raw.ok());
  CHECK(raw->metadata.at("runner.0.env_state") == "none");
  auto runners =
    troupe::edge::load_runner_states((newest / "runners.safetensors").string());
  REQUIRE(runners.ok());
  REQUIRE(runners->size() == 1);
  const uint64_t saved_batches = (*runners)[0].status.batches;
  CHECK(saved_batches == 2048 / (128 * 4));

  // Resumed with a larger budget: it goes on from the saved counters.
  auto again = troupe::runtime::load_config((run / "config.toml").string(),
                                            {"algo.total_env_steps=4096"});
  REQUIRE(again.ok());
  auto second = troupe::runtime::run_training(*again, run.string());
  INFO((second ? std::string{} : second.err().message));
  REQUIRE(second.ok());
  CHECK(second->env_steps == 4096);
  CHECK(second->updates > first->updates);
  fs::path last;
  for (auto& e : fs::directory_iterator(run / "checkpoints"))
    if (e.path() > last)
      last = e.path();
  auto after = troupe::edge::load_runner_states((last / "runners.safetensors").string());
  REQUIRE(after.ok());
  REQUIRE(after->size() == 1);
  CHECK((*after)[0].status.batches == 4096 / (128 * 4));
  CHECK_FALSE((*after)[0].env.with_state);
}
