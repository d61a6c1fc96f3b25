// Black-box tests of `troupe train`: learning on CartPole, the run folder,
// resume after SIGKILL, and a runner that throws being restarted.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <algorithm>

#include <fmt/format.h>

#include "learners/safetensors.hpp"
#include "tests/cli_support.hpp"

extern char** environ;

using troupe::test::fresh_seed;
using troupe::test::lines_of;
using troupe::test::run_troupe;
using troupe::test::temp_folder;

namespace fs = std::filesystem;

namespace {

using row = std::map<std::string, std::string>;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> out;
  std::string cell;
  std::istringstream in(line);
  while (std::getline(in, cell, sep))
    out.push_back(cell);
  return out;
}

// Every row of metrics.csv as column -> cell.
std::vector<row> read_metrics(const fs::path& run_dir) {
  auto lines = lines_of(read_file(run_dir / "metrics.csv"));
  REQUIRE(!lines.empty());
  auto header = split(lines[0], ',');
  std::vector<row> out;
  for (size_t i = 1; i < lines.size(); ++i) {
    auto cells = split(lines[i], ',');
    REQUIRE(cells.size() == header.size());
    row r;
    for (size_t k = 0; k < cells.size(); ++k)
      r[header[k]] = cells[k];
    out.push_back(r);
  }
  return out;
}

// The only run folder under `output`.
fs::path only_run(const fs::path& output) {
  std::vector<fs::path> runs;
  for (auto& e : fs::directory_iterator(output))
    runs.push_back(e.path());
  REQUIRE(runs.size() == 1);
  return runs[0];
}

std::map<std::string, std::string> read_counters(const fs::path& ckpt) {
  std::map<std::string, std::string> out;
  for (auto& line : lines_of(read_file(ckpt / "counters.txt"))) {
    auto sp = line.find(' ');
    out[line.substr(0, sp)] = sp == std::string::npos ? "" : line.substr(sp + 1);
  }
  return out;
}

std::string config_path() {
  return std::string(TROUPE_SOURCE_DIR) + "/config/cartpole_ppo.toml";
}

// Starts `troupe train` on CartPole with a budget far beyond the test's
// patience and returns its pid once its first complete checkpoint exists
// (polled; the child is not waited for a fixed time).
pid_t start_until_first_checkpoint(const std::string& out, uint64_t seed) {
  std::vector<std::string> argv_s = {TROUPE_BINARY,
                                     "train",
                                     config_path(),
                                     "--set",
                                     fmt::format("run.output_dir=\"{}\"", out),
                                     "--set",
                                     "run.checkpoint_every_updates=5",
                                     "--set",
                                     "algo.total_env_steps=50000000",
                                     "--set",
                                     fmt::format("run.seed={}", seed)};
  std::vector<char*> argv;
  for (auto& a : argv_s)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, TROUPE_BINARY, &actions, nullptr, argv.data(), environ) == 0);
  posix_spawn_file_actions_destroy(&actions);
  bool found = false, exited = false;
  // Bounded: the first checkpoint comes after 5 updates, seconds even on a
  // loaded machine; a run that never writes one fails here instead of hanging.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!found && !exited) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      FAIL("troupe train wrote no complete checkpoint under " << out << " within 120 s");
    }
    int st = 0;
    exited = waitpid(pid, &st, WNOHANG) == pid;
    std::error_code ec;
    if (fs::exists(out, ec))
      for (auto& run : fs::directory_iterator(out, ec))
        for (auto& e : fs::directory_iterator(run.path() / "checkpoints", ec))
          if (e.path().extension() != ".tmp")
            found = true;
    if (!found)
      std::this_thread::yield();
  }
  REQUIRE(!exited);
  return pid;
}

} // namespace

TEST_CASE("training CartPole with PPO and a fixed seed lifts the 100-episode mean return "
          "above 200") {
  temp_folder dir("train-learn");
  auto r = run_troupe(fmt::format("train '{}' --set run.output_dir='\"out\"' "
                                  "--set algo.total_env_steps=100000 --set run.seed=3",
                                  config_path()),
                      dir);
  INFO(r.err);
  REQUIRE(r.status == 0);
  auto run = only_run(dir.path / "out");
  // The run folder holds what ARCHITECTURE.md promises.
  CHECK(fs::exists(run / "config.toml"));
  CHECK(fs::exists(run / "metrics.jsonl"));
  CHECK(read_file(run / "config.toml").find("id = \"CartPole-v1\"") != std::string::npos);
  auto rows = read_metrics(run);
  REQUIRE(rows.size() >= 2);
  const char* first_columns[] = {"wall_time_s",
                                 "env_steps",
                                 "updates",
                                 "episodes",
                                 "return_mean_100",
                                 "return_last",
                                 "episode_length_mean",
                                 "sps",
                                 "policy_lag_mean",
                                 "policy_lag_max",
                                 "stats_version",
                                 "stats_lag",
                                 "loss_policy",
                                 "loss_value",
                                 "entropy",
                                 "learning_rate"};
  auto header = split(lines_of(read_file(run / "metrics.csv"))[0], ',');
  for (size_t i = 0; i < std::size(first_columns); ++i)
    CHECK(header.at(i) == first_columns[i]);
  // Same rows in the JSON lines.
  CHECK(lines_of(read_file(run / "metrics.jsonl")).size() == rows.size());
  const auto& last = rows.back();
  CHECK(std::stoull(last.at("env_steps")) >= 100000);
  const double first_return = std::stod(rows.front().at("return_mean_100"));
  const double final_return = std::stod(last.at("return_mean_100"));
  CAPTURE(first_return);
  CAPTURE(final_return);
  CHECK(first_return < 100);
  CHECK(final_return > 200);
  // Sync PPO with one learner acts with the newest weights.
  CHECK(std::stod(last.at("policy_lag_max")) == 0);
  // A checkpoint at the end, complete.
  auto ckpt =
    run / "checkpoints" / fmt::format("{:010d}", std::stoull(last.at("updates")));
  CHECK(fs::exists(ckpt / "policy.safetensors"));
  CHECK(fs::exists(ckpt / "optimizer.safetensors"));
  CHECK(fs::exists(ckpt / "stats.bin"));
  CHECK(read_counters(ckpt).at("env_steps") == last.at("env_steps"));
}

TEST_CASE("a run killed with SIGKILL after its first checkpoint resumes at the "
          "checkpointed counters") {
  temp_folder dir("train-kill");
  const uint64_t seed = fresh_seed() % 1000;
  CAPTURE(seed);
  const auto out = (dir.path / "out").string();
  const pid_t pid = start_until_first_checkpoint(out, seed);
  kill(pid, SIGKILL);
  int st = 0;
  waitpid(pid, &st, 0);
  REQUIRE(WIFSIGNALED(st));
  auto run = only_run(out);
  // The newest complete checkpoint (another may have been written meanwhile).
  std::string newest;
  for (auto& e : fs::directory_iterator(run / "checkpoints"))
    if (e.path().extension() != ".tmp")
      newest = std::max(newest, e.path().filename().string());
  auto counters = read_counters(run / "checkpoints" / newest);
  const uint64_t updates = std::stoull(counters.at("updates"));
  const uint64_t steps = std::stoull(counters.at("env_steps"));
  CAPTURE(updates);
  CHECK(updates == std::stoull(newest));
  CHECK(steps == updates * 512);

  // Resume for ten more batches of 4 x 128 steps.
  auto r = run_troupe(fmt::format("train --resume '{}' --set algo.total_env_steps={}",
                                  run.string(), steps + 10 * 512),
                      dir);
  INFO(r.err);
  REQUIRE(r.status == 0);
  auto rows = read_metrics(run);
  REQUIRE(!rows.empty());
  CHECK(std::stoull(rows.back().at("updates")) == updates + 10);
  CHECK(std::stoull(rows.back().at("env_steps")) == steps + 10 * 512);
  // Rows stay in order: the killed run's rows after the checkpoint are gone.
  for (size_t i = 1; i < rows.size(); ++i)
    CHECK(std::stoull(rows[i].at("updates")) > std::stoull(rows[i - 1].at("updates")));
  auto final_counters =
    read_counters(run / "checkpoints" / fmt::format("{:010d}", updates + 10));
  CHECK(std::stoull(final_counters.at("env_steps")) == steps + 10 * 512);
  CHECK(std::stoull(final_counters.at("episodes")) >=
        std::stoull(counters.at("episodes")));
}

TEST_CASE("an environment runner that throws is restarted and the run goes on") {
  temp_folder dir("train-restart");
  auto r = run_troupe(fmt::format("train '{}' --set run.output_dir='\"out\"' "
                                  "--set algo.total_env_steps=20480 "
                                  "--set env.fail_after_calls=300",
                                  config_path()),
                      dir);
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.err.find("runner 'learner0.runner0' failed") != std::string::npos);
  CHECK(r.err.find("restart 1 of 3") != std::string::npos);
  auto rows = read_metrics(only_run(dir.path / "out"));
  REQUIRE(!rows.empty());
  CHECK(rows.back().at("runner_restarts") == "1");
  CHECK(std::stoull(rows.back().at("env_steps")) == 20480);
}

TEST_CASE("a config error stops train before anything starts, naming the key") {
  temp_folder dir("train-bad");
  auto r = run_troupe(fmt::format("train '{}' --set run.output_dir='\"out\"' "
                                  "--set algo.name='\"dqn\"'",
                                  config_path()),
                      dir);
  CHECK(r.status == 2);
  CHECK(r.err.find("algo.name") != std::string::npos);
  CHECK(!fs::exists(dir.path / "out"));
}

TEST_CASE("SIGTERM stops a run cleanly with a final row and a final checkpoint") {
  temp_folder dir("train-term");
  const uint64_t seed = fresh_seed() % 1000;
  CAPTURE(seed);
  const auto out = (dir.path / "out").string();
  const pid_t pid = start_until_first_checkpoint(out, seed);
  kill(pid, SIGTERM);
  int st = 0;
  // Bounded: a run that ignores SIGTERM fails here instead of hanging, and is
  // killed rather than left training a budget of 50M steps.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (waitpid(pid, &st, WNOHANG) != pid) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      FAIL("troupe train did not exit within 120 s of SIGTERM");
    }
    std::this_thread::yield();
  }
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
  auto run = only_run(out);
  auto rows = read_metrics(run);
  REQUIRE(!rows.empty());
  const auto updates = std::stoull(rows.back().at("updates"));
  auto ckpt = run / "checkpoints" / fmt::format("{:010d}", updates);
  REQUIRE(fs::exists(ckpt / "counters.txt"));
  CHECK(read_counters(ckpt).at("env_steps") == rows.back().at("env_steps"));
  CHECK(std::stoull(rows.back().at("env_steps")) < 50000000);
}

TEST_CASE("with observation normalization every view subscribes to a declared stream "
          "and the statistics advance") {
  temp_folder dir("train-obsnorm");
  auto r = run_troupe(fmt::format("train '{}' --set run.output_dir='\"out\"' "
                                  "--set algo.total_env_steps=20480 "
                                  "--set model.obs_norm=true",
                                  config_path()),
                      dir);
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.err.find("cannot subscribe") == std::string::npos);
  auto rows = read_metrics(only_run(dir.path / "out"));
  REQUIRE(!rows.empty());
  // One observation delta per runner batch: 20480 steps of 4 envs x 128 steps.
  CHECK(std::stoull(rows.back().at("stats_version")) > 0);
}

TEST_CASE("a checkpoint due as the run ends fails nothing and leaves no partial folder "
          "(checkpoint every update)") {
  // The last periodic checkpoint is asked for as the supervisor ends; it used
  // to fail asking the ended supervisor for the runners' states and leave its
  // .tmp folder behind (every run of this config did).
  temp_folder dir("train-ckpt-every-update");
  auto r = run_troupe(fmt::format("train '{}' --set run.output_dir='\"out\"' "
                                  "--set algo.total_env_steps=10240 "
                                  "--set run.checkpoint_every_updates=1 "
                                  "--set run.keep_checkpoints=2",
                                  config_path()),
                      dir);
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.err.find("checkpoint failed") == std::string::npos);
  CHECK(r.err.find("no runner or learner states") == std::string::npos);
  auto run = only_run(dir.path / "out");
  std::vector<std::string> entries;
  for (auto& e : fs::directory_iterator(run / "checkpoints"))
    entries.push_back(e.path().filename().string());
  std::sort(entries.begin(), entries.end());
  REQUIRE(entries.size() == 2);
  // Checkpoints due after the supervisor ended are left to the final one.
  CHECK(entries.front() < entries.back());
  CHECK(entries.back() == fmt::format("{:010d}", 20)); // 10240 / 512
  // The final checkpoint carries every runner's state.
  CHECK(fs::file_size(run / "checkpoints" / entries.back() / "runners.safetensors") > 1000);
}

TEST_CASE("a run folder killed before its first complete checkpoint starts over on "
          "--resume, and only the newest keep_checkpoints checkpoints are kept") {
  temp_folder dir("train-startover");
  auto first = run_troupe(fmt::format("train '{}' --set run.output_dir='\"out\"' "
                                      "--set algo.total_env_steps=10240 "
                                      "--set run.checkpoint_every_updates=3 "
                                      "--set run.keep_checkpoints=2 "
                                      "--set run.log_every_updates=1",
                                      config_path()),
                          dir);
  INFO(first.err);
  REQUIRE(first.status == 0);
  auto run = only_run(dir.path / "out");
  std::vector<std::string> kept;
  for (auto& e : fs::directory_iterator(run / "checkpoints"))
    kept.push_back(e.path().filename().string());
  std::sort(kept.begin(), kept.end());
  REQUIRE(kept.size() == 2);
  CHECK(kept.back() == fmt::format("{:010d}", 20)); // the final one: 10240 / 512
  // As if killed early: no complete checkpoint, one being written, a torn row.
  fs::remove_all(run / "checkpoints");
  fs::create_directories(run / "checkpoints" / "0000000001.tmp");
  {
    std::ofstream csv(run / "metrics.csv", std::ios::app);
    csv << "0.5,51";
  }
  auto again = run_troupe(
    fmt::format("train --resume '{}' --set algo.total_env_steps=5120", run.string()),
    dir);
  INFO(again.err);
  REQUIRE(again.status == 0);
  CHECK(again.err.find("no complete checkpoint; starting the run over") !=
        std::string::npos);
  auto rows = read_metrics(run);
  REQUIRE(!rows.empty());
  // Only the new run's rows: they start again from the first update.
  CHECK(std::stoull(rows.front().at("updates")) <= 10);
  CHECK(std::stoull(rows.back().at("env_steps")) == 5120);
  for (size_t i = 1; i < rows.size(); ++i)
    CHECK(std::stoull(rows[i].at("updates")) > std::stoull(rows[i - 1].at("updates")));
  CHECK(fs::exists(run / "checkpoints" / fmt::format("{:010d}", 10) / "counters.txt"));
}

TEST_CASE("a finished run extended with --resume learns exactly what one uninterrupted "
          "run learns (sync PPO, one learner: runner and learner states are restored)") {
  temp_folder dir("train-exact");
  const uint64_t seed = fresh_seed() % 100000;
  CAPTURE(seed);
  // A constant learning rate: annealing follows the budget, which the resume extends.
  const std::string common = fmt::format(
    "--set run.seed={} --set algo.anneal_lr=false --set run.checkpoint_every_updates=0 "
    "--set run.log_every_updates=1",
    seed);
  auto whole = run_troupe(fmt::format("train '{}' --set run.output_dir='\"whole\"' "
                                      "--set algo.total_env_steps=10240 {}",
                                      config_path(), common),
                          dir);
  INFO(whole.err);
  REQUIRE(whole.status == 0);
  auto half = run_troupe(fmt::format("train '{}' --set run.output_dir='\"parts\"' "
                                     "--set algo.total_env_steps=5120 {}",
                                     config_path(), common),
                         dir);
  INFO(half.err);
  REQUIRE(half.status == 0);
  auto parts = only_run(dir.path / "parts");
  auto rest = run_troupe(
    fmt::format("train --resume '{}' --set algo.total_env_steps=10240", parts.string()),
    dir);
  INFO(rest.err);
  REQUIRE(rest.status == 0);
  const auto final_ckpt = fmt::format("{:010d}", 20);
  auto a = troupe::learners::read_safetensors(
    (only_run(dir.path / "whole") / "checkpoints" / final_ckpt / "optimizer.safetensors")
      .string());
  auto b = troupe::learners::read_safetensors(
    (parts / "checkpoints" / final_ckpt / "optimizer.safetensors").string());
  REQUIRE(a);
  REQUIRE(b);
  for (const char* name : {"params", "adam_m", "adam_v"}) {
    CAPTURE(name);
    REQUIRE(a->find(name));
    REQUIRE(b->find(name));
    auto x = a->find(name)->to_f32();
    auto y = b->find(name)->to_f32();
    REQUIRE(x.size() == y.size());
    size_t differ = 0;
    for (size_t i = 0; i < x.size(); ++i)
      differ += x[i] != y[i];
    CHECK(differ == 0);
  }
  // The same episodes ended: episodes under way went on across the resume.
  auto rows_whole = read_metrics(only_run(dir.path / "whole"));
  auto rows_parts = read_metrics(parts);
  CHECK(rows_parts.back().at("episodes") == rows_whole.back().at("episodes"));
  CHECK(rows_parts.back().at("return_mean_100") ==
        rows_whole.back().at("return_mean_100"));
}

TEST_CASE(
  "a damaged or mismatched checkpoint stops --resume with exit status 2 naming the "
  "file, and leaves the run folder as it was") {
  temp_folder dir("train-damaged");
  auto first = run_troupe(fmt::format("train '{}' --set run.output_dir='\"out\"' "
                                      "--set algo.total_env_steps=5120",
                                      config_path()),
                          dir);
  INFO(first.err);
  REQUIRE(first.status == 0);
  auto run = only_run(dir.path / "out");
  const auto ckpt = run / "checkpoints" / fmt::format("{:010d}", 10);
  REQUIRE(fs::exists(ckpt / "runners.safetensors"));
  const std::string metrics_before = read_file(run / "metrics.csv");
  // Another model than the checkpoint's.
  auto other = run_troupe(fmt::format("train --resume '{}' --set model.hidden=[32] "
                                      "--set algo.total_env_steps=10240",
                                      run.string()),
                          dir);
  CHECK(other.status == 2);
  CHECK(other.err.find("optimizer.safetensors") != std::string::npos);
  CHECK(other.err.find("parameters") != std::string::npos);
  // Damaged files, one at a time.
  for (const char* name : {"runners.safetensors", "stats.bin", "optimizer.safetensors"}) {
    CAPTURE(name);
    const std::string saved = read_file(ckpt / name);
    {
      std::ofstream cut(ckpt / name, std::ios::binary | std::ios::trunc);
      cut << saved.substr(0, saved.size() / 3);
    }
    auto r = run_troupe(
      fmt::format("train --resume '{}' --set algo.total_env_steps=10240", run.string()),
      dir);
    CHECK(r.status == 2);
    CHECK(r.err.find(name) != std::string::npos);
    // The checkpoint before it (the first, written at start-up) is named.
    CHECK(r.err.find("to resume from the checkpoint before it") != std::string::npos);
    std::ofstream(ckpt / name, std::ios::binary | std::ios::trunc) << saved;
  }
  CHECK(read_file(run / "metrics.csv") == metrics_before);
  CHECK(!fs::exists(run / "checkpoints" / fmt::format("{:010d}", 20)));
}
