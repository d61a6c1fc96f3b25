// Black-box tests of `troupe train`: learning on CartPole, the run folder,
// resume after SIGKILL, and a runner that throws being restarted.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/metrics.hpp"
#include "edge/runner_state_file.hpp"
#include "learners/checkpoint.hpp"
#include "learners/safetensors.hpp"
#include "runtime/config.hpp"
#include "runtime/train.hpp"
#include "tests/cli_support.hpp"
#include "tests/runtime/failing_env.hpp"
#include "tests/tensorboard_reader.hpp"

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

// metrics.jsonl holds the rows of metrics.csv, parsed as JSON: the same keys
// in the same order, null where the CSV says nan, and the number each CSV
// cell reads back as.
void check_jsonl_matches_csv(const fs::path& run_dir) {
  auto csv = lines_of(read_file(run_dir / "metrics.csv"));
  auto jsonl = lines_of(read_file(run_dir / "metrics.jsonl"));
  REQUIRE(!csv.empty());
  REQUIRE(jsonl.size() == csv.size() - 1);
  const auto header = split(csv[0], ',');
  for (size_t i = 0; i < jsonl.size(); ++i) {
    CAPTURE(i);
    CAPTURE(jsonl[i]);
    const auto parsed = nlohmann::ordered_json::parse(jsonl[i], nullptr, false);
    REQUIRE(parsed.is_object());
    const auto cells = split(csv[i + 1], ',');
    REQUIRE(parsed.size() == header.size());
    REQUIRE(cells.size() == header.size());
    size_t k = 0;
    for (auto& item : parsed.items()) {
      // Not a structured binding: CAPTURE is a lambda, and clang 14 cannot
      // capture structured bindings.
      const std::string key = item.key();
      const auto& value = item.value();
      CAPTURE(key);
      CHECK(key == header[k]);
      if (cells[k] == "nan")
        CHECK(value.is_null());
      else if (value.is_number_unsigned())
        CHECK(value.get<uint64_t>() == std::stoull(cells[k]));
      else
        CHECK(value.get<double>() == std::strtod(cells[k].c_str(), nullptr));
      ++k;
    }
  }
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

/// A `troupe train` run that ended with exit status 0.
struct finished_train {
  troupe::test::run_result result; ///< its exit status, stdout and stderr
  fs::path run;                    ///< its run folder
};

// Trains config/cartpole_ppo.toml into `dir`/`output` with the --set options
// `sets`; fails with its stderr unless it exits 0.
finished_train train_cartpole(const temp_folder& dir, const std::string& sets,
                              const std::string& output = "out") {
  finished_train t;
  t.result = run_troupe(fmt::format("train '{}' --set run.output_dir='\"{}\"' {}",
                                    config_path(), output, sets),
                        dir);
  REQUIRE_MESSAGE(t.result.status == 0, "troupe train exited with status "
                                          << t.result.status << "; its stderr:\n"
                                          << t.result.err);
  t.run = only_run(dir.path / output);
  return t;
}

// A finished run of ten batches (checkpoints 0 and 10) in `dir`/out.
fs::path finished_run(const temp_folder& dir) {
  return train_cartpole(dir, "--set algo.total_env_steps=5120").run;
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
  const auto trained =
    train_cartpole(dir, "--set algo.total_env_steps=100000 --set run.seed=3");
  INFO(trained.result.err);
  const auto& run = trained.run;
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
  check_jsonl_matches_csv(run);
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
  // metrics.jsonl forgot the same rows.
  check_jsonl_matches_csv(run);
  auto final_counters =
    read_counters(run / "checkpoints" / fmt::format("{:010d}", updates + 10));
  CHECK(std::stoull(final_counters.at("env_steps")) == steps + 10 * 512);
  CHECK(std::stoull(final_counters.at("episodes")) >=
        std::stoull(counters.at("episodes")));
}

TEST_CASE("a run folder whose metrics.csv has an older troupe's columns resumes "
          "under today's header with each old value in its named column") {
  temp_folder dir("train-old-columns");
  const auto first =
    train_cartpole(dir, "--set algo.total_env_steps=5120 --set run.log_every_updates=1");
  INFO(first.result.err);
  const auto& run = first.run;
  const auto today = lines_of(read_file(run / "metrics.csv"));
  REQUIRE(today.size() >= 3);
  const auto names = split(today[0], ',');
  REQUIRE(names.size() >= 4);
  // As an older troupe wrote it: the last two columns missing, the others in
  // reverse order, and a column that troupe no longer writes.
  std::vector<size_t> order;
  for (size_t k = names.size() - 2; k-- > 0;)
    order.push_back(k);
  const auto old_rows = read_metrics(run);
  {
    std::ofstream csv(run / "metrics.csv", std::ios::trunc);
    for (size_t k : order)
      csv << names[k] << ',';
    csv << "retired_column\n";
    for (auto& r : old_rows) {
      for (size_t k : order)
        csv << r.at(names[k]) << ',';
      csv << "7\n";
    }
  }
  auto again = run_troupe(
    fmt::format("train --resume '{}' --set algo.total_env_steps=10240", run.string()),
    dir);
  INFO(again.err);
  REQUIRE(again.status == 0);
  const auto lines = lines_of(read_file(run / "metrics.csv"));
  CHECK(lines[0] == today[0]);
  auto rows = read_metrics(run); // every row has the header's cell count
  REQUIRE(rows.size() > old_rows.size());
  for (size_t i = 0; i < old_rows.size(); ++i) {
    CAPTURE(i);
    for (size_t k = 0; k < names.size(); ++k)
      CHECK(rows[i].at(names[k]) ==
            (k + 2 >= names.size() ? std::string("nan") : old_rows[i].at(names[k])));
  }
  CHECK(std::stoull(rows.back().at("env_steps")) == 10240);
  for (size_t i = 1; i < rows.size(); ++i)
    CHECK(std::stoull(rows[i].at("updates")) > std::stoull(rows[i - 1].at("updates")));
}

TEST_CASE("an environment runner that throws is restarted and the run goes on") {
  // In this process, with the test-only environment Failing-v0 (the troupe
  // binary does not know it): its step throws once, in runner 0.
  temp_folder dir("train-restart");
  troupe::test::register_failing_env();
  auto cfg = troupe::runtime::load_config(
    config_path(), {fmt::format("run.output_dir=\"{}\"", (dir.path / "out").string()),
                    "algo.total_env_steps=20480", "env.id=\"Failing-v0\""});
  INFO((cfg ? std::string{} : cfg.err().message));
  REQUIRE(cfg.ok());
  // The supervisor's lines reach the session's log sink.
  std::mutex err_mtx;
  std::string err;
  troupe::runtime::session_options options;
  options.log = [&](troupe::actors::log_level, const std::string& line) {
    std::lock_guard<std::mutex> lock(err_mtx);
    err += line + "\n";
  };
  {
    auto r = troupe::runtime::run_training(*cfg, {}, options);
    std::lock_guard<std::mutex> lock(err_mtx);
    INFO(err);
    INFO((r ? std::string{} : r.err().message));
    REQUIRE(r.ok());
    CHECK(r->env_steps == 20480);
  }
  std::lock_guard<std::mutex> lock(err_mtx);
  INFO(err);
  CHECK(err.find("runner 'learner0.runner0' failed") != std::string::npos);
  CHECK(err.find("Failing-v0 throws on purpose") != std::string::npos);
  CHECK(err.find("restart 1 of 3") != std::string::npos);
  auto rows = read_metrics(only_run(dir.path / "out"));
  REQUIRE(!rows.empty());
  CHECK(rows.back().at("runner_restarts") == "1");
  CHECK(std::stoull(rows.back().at("env_steps")) == 20480);
}

TEST_CASE("the test hook env.fail_after_calls is no user option any more") {
  temp_folder dir("train-nohook");
  auto r = run_troupe(
    fmt::format("train '{}' --set env.fail_after_calls=300", config_path()), dir);
  CHECK(r.status != 0);
  CHECK(r.err.find("env.fail_after_calls") != std::string::npos);
  CHECK(r.err.find("test hook") != std::string::npos);
  auto described = run_troupe("config describe", dir);
  REQUIRE(described.status == 0);
  CHECK(described.out.find("fail_after_calls") == std::string::npos);
  CHECK(described.out.find("obs_norm_eps") != std::string::npos);
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
  const auto r =
    train_cartpole(dir, "--set algo.total_env_steps=20480 --set model.obs_norm=true");
  INFO(r.result.err);
  CHECK(r.result.err.find("cannot subscribe") == std::string::npos);
  auto rows = read_metrics(r.run);
  REQUIRE(!rows.empty());
  // One observation delta per runner batch: 20480 steps of 4 envs x 128 steps.
  CHECK(std::stoull(rows.back().at("stats_version")) > 0);
}

TEST_CASE("a run with a non-default observation epsilon normalizes, checkpoints and "
          "evaluates with that one epsilon") {
  temp_folder dir("train-obs-eps");
  const auto r =
    train_cartpole(dir, "--set algo.total_env_steps=2048 --set model.obs_norm=true "
                        "--set model.obs_norm_eps=0.25");
  INFO(r.result.err);
  const auto& run = r.run;
  // The resolved config holds one epsilon of observation normalization.
  const auto resolved = read_file(run / "config.toml");
  CHECK(resolved.find("obs_norm_eps = 0.25") != std::string::npos);
  CHECK(resolved.find("\nepsilon") == std::string::npos);
  // The checkpoint carries it, and troupe eval normalizes with the checkpoint's.
  const auto rows = read_metrics(run);
  const auto ckpt = run / "checkpoints" /
                    fmt::format("{:010d}", std::stoull(rows.back().at("updates"))) /
                    "policy.safetensors";
  auto policy = troupe::learners::load_checkpoint(ckpt.string());
  REQUIRE(policy.ok());
  CHECK(policy->model.spec().obs_norm);
  CHECK(policy->model.spec().obs_norm_eps == 0.25);
  CHECK(policy->metadata.at("obs_norm_eps") == "0.25");
}

TEST_CASE("a checkpoint due as the run ends fails nothing and leaves no partial folder "
          "(checkpoint every update)") {
  // The last periodic checkpoint is asked for as the supervisor ends; it used
  // to fail asking the ended supervisor for the runners' states and leave its
  // .tmp folder behind (every run of this config did).
  temp_folder dir("train-ckpt-every-update");
  const auto r = train_cartpole(dir, "--set algo.total_env_steps=10240 "
                                     "--set run.checkpoint_every_updates=1 "
                                     "--set run.keep_checkpoints=2");
  INFO(r.result.err);
  CHECK(r.result.err.find("checkpoint failed") == std::string::npos);
  CHECK(r.result.err.find("no runner or learner states") == std::string::npos);
  const auto& run = r.run;
  std::vector<std::string> entries;
  for (auto& e : fs::directory_iterator(run / "checkpoints"))
    entries.push_back(e.path().filename().string());
  std::sort(entries.begin(), entries.end());
  REQUIRE(entries.size() == 2);
  // Checkpoints due after the supervisor ended are left to the final one.
  CHECK(entries.front() < entries.back());
  CHECK(entries.back() == fmt::format("{:010d}", 20)); // 10240 / 512
  // The final checkpoint carries every runner's state.
  CHECK(fs::file_size(run / "checkpoints" / entries.back() / "runners.safetensors") >
        1000);
}

TEST_CASE("a run folder killed before its first complete checkpoint starts over on "
          "--resume, and only the newest keep_checkpoints checkpoints are kept") {
  temp_folder dir("train-startover");
  const auto first = train_cartpole(dir, "--set algo.total_env_steps=10240 "
                                         "--set run.checkpoint_every_updates=3 "
                                         "--set run.keep_checkpoints=2 "
                                         "--set run.log_every_updates=1");
  INFO(first.result.err);
  const auto& run = first.run;
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

// The weights and Adam's moments of two checkpoints are equal bit for bit.
void check_same_optimizer(const fs::path& ckpt_a, const fs::path& ckpt_b) {
  auto a =
    troupe::learners::read_safetensors((ckpt_a / "optimizer.safetensors").string());
  auto b =
    troupe::learners::read_safetensors((ckpt_b / "optimizer.safetensors").string());
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
}

// Runs 10240 steps in one go ("whole") and as 5120 steps extended to 10240 with
// --resume ("parts"), with `extra` overrides on both. Each batch was made with
// the statistics version its metrics row records; when both runs made every
// batch with the same version (always, without observation normalization),
// they must end with the same weights, Adam moments and episodes. Returns the
// parts run.
fs::path check_exact_resume(const temp_folder& dir, const std::string& extra) {
  const uint64_t seed = fresh_seed() % 100000;
  CAPTURE(seed);
  // A constant learning rate: annealing follows the budget, which the resume extends.
  const std::string common = fmt::format(
    "--set run.seed={} --set algo.anneal_lr=false --set run.checkpoint_every_updates=0 "
    "--set run.log_every_updates=1 {}",
    seed, extra);
  const auto whole =
    train_cartpole(dir, "--set algo.total_env_steps=10240 " + common, "whole");
  INFO(whole.result.err);
  const auto half =
    train_cartpole(dir, "--set algo.total_env_steps=5120 " + common, "parts");
  INFO(half.result.err);
  const auto& parts = half.run;
  auto rest = run_troupe(
    fmt::format("train --resume '{}' --set algo.total_env_steps=10240", parts.string()),
    dir);
  INFO(rest.err);
  REQUIRE(rest.status == 0);
  auto rows_whole = read_metrics(whole.run);
  auto rows_parts = read_metrics(parts);
  REQUIRE(rows_parts.size() == rows_whole.size());
  // Which statistics each batch saw depends on when the keeper's publication
  // reached the runner's view, in both runs alike (not on the resume).
  bool same_statistics = true;
  for (size_t i = 0; i < rows_parts.size(); ++i)
    same_statistics &=
      rows_parts[i].at("stats_version") == rows_whole[i].at("stats_version");
  if (!same_statistics) {
    MESSAGE("a batch saw a statistics publication late in one run: weights not compared");
    return parts;
  }
  const auto final_ckpt = fmt::format("{:010d}", 20);
  check_same_optimizer(whole.run / "checkpoints" / final_ckpt,
                       parts / "checkpoints" / final_ckpt);
  // The same episodes ended: episodes under way went on across the resume.
  CHECK(rows_parts.back().at("episodes") == rows_whole.back().at("episodes"));
  CHECK(rows_parts.back().at("return_mean_100") ==
        rows_whole.back().at("return_mean_100"));
  return parts;
}

TEST_CASE("a sync PPO run learns the same numbers with its learner on one thread and on "
          "two (actor and critic apart), and says which it took") {
  temp_folder dir("train-learner-threads");
  const uint64_t seed = fresh_seed() % 100000;
  CAPTURE(seed);
  const std::string common =
    fmt::format("--set run.seed={} --set algo.total_env_steps=10240 --set "
                "run.checkpoint_every_updates=0 --set run.log_every_updates=1",
                seed);
  const auto one = train_cartpole(dir, common + " --set algo.learner_threads=1", "one");
  const auto two = train_cartpole(dir, common + " --set algo.learner_threads=2", "two");
  CHECK(one.result.out.find("learners on cpu") != std::string::npos);
  CHECK(one.result.out.find(", 1 thread each") != std::string::npos);
  CHECK(two.result.out.find(", 2 threads each") != std::string::npos);
  const auto rows_one = read_metrics(one.run);
  const auto rows_two = read_metrics(two.run);
  REQUIRE(rows_one.size() == 20);
  REQUIRE(rows_two.size() == rows_one.size());
  for (size_t i = 0; i < rows_one.size(); ++i) {
    CAPTURE(i);
    for (const char* column : {"env_steps", "episodes", "return_mean_100", "loss_policy",
                               "loss_value", "entropy", "weights_version"}) {
      CAPTURE(column);
      CHECK(rows_two[i].at(column) == rows_one[i].at(column));
    }
  }
  const auto final_ckpt = fmt::format("{:010d}", 20);
  check_same_optimizer(one.run / "checkpoints" / final_ckpt,
                       two.run / "checkpoints" / final_ckpt);
}

TEST_CASE("a finished run extended with --resume learns exactly what one uninterrupted "
          "run learns (sync PPO, one learner: runner and learner states are restored)") {
  temp_folder dir("train-exact");
  check_exact_resume(dir, "");
}

TEST_CASE("with observation normalization a run extended with --resume acts on the "
          "restored statistics from its first step, and learns exactly what one "
          "uninterrupted run learns when both made each batch with the same statistics") {
  temp_folder dir("train-exact-obsnorm");
  // Every merge published at once, so that each batch normally sees the
  // statistics of all batches before it.
  auto parts = check_exact_resume(
    dir, "--set model.obs_norm=true --set stats.publish_every_merges=1 "
         "--set stats.publish_interval_ms=0");
  // The first batch after the resume was made with the restored statistics of
  // the 10 batches before it (nothing merges before it), never with the
  // placeholder (version 0).
  auto rows = read_metrics(parts);
  REQUIRE(rows.size() == 20);
  CHECK(rows[10].at("stats_version") == "10");
}

namespace {

// The observation statistics' count saved in a checkpoint's policy.
double saved_obs_count(const fs::path& ckpt) {
  auto policy =
    troupe::learners::read_safetensors((ckpt / "policy.safetensors").string());
  REQUIRE(policy);
  auto* count = policy->find("obs_rms.count");
  REQUIRE(count);
  return count->to_f64().at(0);
}

} // namespace

namespace {

// Runs config/pendulum_ppo.toml (observations normalized) for 12 updates with
// `extra` overrides, resumes a copy from its first checkpoint taken mid-run,
// and checks that the two runs agree row by row (all but the timing columns)
// and end with the same weights and Adam moments, and that each step's
// observations were merged once.
void check_exact_midrun_resume(const temp_folder& dir, const std::string& extra) {
  const uint64_t seed = fresh_seed() % 100000;
  CAPTURE(seed);
  const uint64_t steps_per_update = 16 * 256, updates = 12;
  const auto whole_out = dir.path / "whole";
  auto whole = run_troupe(
    fmt::format("train '{}/config/pendulum_ppo.toml' --set run.output_dir='\"{}\"' "
                "--set run.seed={} --set algo.total_env_steps={} --set "
                "run.log_every_updates=1 --set run.checkpoint_every_updates=4 --set "
                "stats.publish_every_merges=1 --set stats.publish_interval_ms=0 {}",
                TROUPE_SOURCE_DIR, whole_out.string(), seed, updates * steps_per_update,
                extra),
    dir);
  INFO(whole.err);
  REQUIRE(whole.status == 0);
  const auto run = only_run(whole_out);
  // The run as if killed after its first checkpoint taken mid-run: a copy
  // with every later checkpoint removed, resumed to the same budget.
  const auto copy = dir.path / "resumed" / run.filename();
  fs::create_directories(copy.parent_path());
  fs::copy(run, copy, fs::copy_options::recursive);
  std::vector<std::string> names;
  for (auto& e : fs::directory_iterator(copy / "checkpoints"))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  const auto mid = std::find_if(names.begin(), names.end(), [&](const std::string& n) {
    const auto u = std::stoull(n);
    return u > 0 && u < updates;
  });
  REQUIRE_MESSAGE(mid != names.end(), "no checkpoint between the first and the last");
  CAPTURE(*mid);
  for (auto it = mid + 1; it != names.end(); ++it)
    fs::remove_all(copy / "checkpoints" / *it);
  auto resumed = run_troupe(fmt::format("train --resume '{}'", copy.string()), dir);
  INFO(resumed.err);
  REQUIRE(resumed.status == 0);
  CHECK(resumed.err.find("resuming from " + (copy / "checkpoints" / *mid).string()) !=
        std::string::npos);

  const auto final_ckpt = fmt::format("{:010d}", updates);
  const auto rows_whole = read_metrics(run);
  const auto rows_resumed = read_metrics(copy);
  REQUIRE(rows_whole.size() == updates);
  REQUIRE(rows_resumed.size() == updates);
  // Every step's observations were merged once, in the checkpoint that the
  // resume restored too (before the cut was made consistent, the keeper was
  // saved after the next batch's moments had merged, and the resumed run
  // merged that batch again).
  CHECK(saved_obs_count(copy / "checkpoints" / *mid) ==
        static_cast<double>(std::stoull(*mid) * steps_per_update));
  CHECK(saved_obs_count(run / "checkpoints" / final_ckpt) ==
        static_cast<double>(updates * steps_per_update));
  CHECK(saved_obs_count(copy / "checkpoints" / final_ckpt) ==
        static_cast<double>(updates * steps_per_update));
  // A batch is made with the statistics of batches before it only.
  bool same_statistics = true;
  for (size_t i = 0; i < updates; ++i) {
    CAPTURE(i);
    CHECK(std::stoull(rows_resumed[i].at("stats_version")) <= i);
    CHECK(std::stoull(rows_whole[i].at("stats_version")) <= i);
    same_statistics &=
      rows_resumed[i].at("stats_version") == rows_whole[i].at("stats_version") &&
      rows_resumed[i].at("reward_stats_version") ==
        rows_whole[i].at("reward_stats_version");
  }
  if (!same_statistics) {
    // Which publication a batch saw depends on when it reached the runner's
    // view, in both runs alike.
    MESSAGE("a batch saw a statistics publication late in one run: rows not compared");
    return;
  }
  for (size_t i = 0; i < updates; ++i)
    for (auto& item : rows_whole[i]) {
      // Not a structured binding: INFO is a lambda (clang 14).
      const std::string& column = item.first;
      // Times, and stats_lag: whether the keeper had published the batch's
      // own moments when its learner read the view.
      if (column == "wall_time_s" || column == "sps" || column == "stats_lag")
        continue;
      INFO("row " << i << ", column " << column);
      CHECK(rows_resumed[i].at(column) == item.second);
    }
  check_same_optimizer(run / "checkpoints" / final_ckpt,
                       copy / "checkpoints" / final_ckpt);
}

} // namespace

TEST_CASE(
  "a run resumed from a checkpoint taken while it trained (sync PPO on Pendulum, "
  "observations normalized) learns exactly what the uninterrupted run learns, and "
  "merges each step's observations once") {
  temp_folder dir("train-exact-midrun");
  check_exact_midrun_resume(dir, "");
}

TEST_CASE("with reward normalization a run resumed mid-run learns exactly what the "
          "uninterrupted run learns: the runners' discounted returns and the keeper's "
          "return stream are restored") {
  temp_folder dir("train-exact-midrun-rewnorm");
  check_exact_midrun_resume(dir, "--set model.reward_norm=true");
  // The checkpoints hold both halves of the state.
  const auto run = only_run(dir.path / "whole");
  const auto ckpt = run / "checkpoints" / fmt::format("{:010d}", 12);
  auto runners =
    troupe::edge::load_runner_states((ckpt / "runners.safetensors").string());
  REQUIRE_MESSAGE(runners, (runners ? std::string{} : runners.err().message));
  REQUIRE(!runners->empty());
  for (auto& r : *runners) {
    CHECK(r.discounted_return.size() == r.env.num_envs);
    bool any_nonzero = false;
    for (double d : r.discounted_return)
      any_nonzero |= d != 0.0;
    CHECK(any_nonzero);
  }
  const auto rows = read_metrics(run);
  REQUIRE(rows.size() == 12);
  // Each batch's returns merge once: batch k (from 0) saw at most k merges.
  for (size_t i = 0; i < rows.size(); ++i) {
    CAPTURE(i);
    CHECK(std::stoull(rows[i].at("reward_stats_version")) <= i);
  }
  CHECK(std::stoull(rows.back().at("reward_stats_version")) >= 1);
}

namespace {

// The names of a run's checkpoint folders (complete or not), in order.
std::vector<std::string> checkpoint_names(const fs::path& run) {
  std::vector<std::string> out;
  for (auto& e : fs::directory_iterator(run / "checkpoints"))
    out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// A copy of the run folder `run` as `copy` (each damage tried on its own copy).
fs::path copy_run(const fs::path& run, const fs::path& copy) {
  fs::remove_all(copy);
  fs::copy(run, copy, fs::copy_options::recursive);
  return copy;
}

} // namespace

TEST_CASE(
  "a damaged newest checkpoint is named with what is wrong and --resume falls "
  "back to the one before it, and a mismatched model stops it with exit status 2") {
  temp_folder dir("train-damaged");
  const auto run = finished_run(dir);
  const auto names = checkpoint_names(run);
  REQUIRE(names.size() >= 2);
  const auto newest = names.back(), older = names[names.size() - 2];
  REQUIRE(newest == fmt::format("{:010d}", 10));
  REQUIRE(fs::exists(run / "checkpoints" / older / "manifest.txt"));
  const uint64_t older_updates = std::stoull(older);
  // Another model than the checkpoint's: no older checkpoint fits better.
  auto other = run_troupe(fmt::format("train --resume '{}' --set model.hidden=[32] "
                                      "--set algo.total_env_steps=10240",
                                      run.string()),
                          dir);
  CHECK(other.status == 2);
  CHECK(other.err.find("optimizer.safetensors") != std::string::npos);
  CHECK(other.err.find("parameters") != std::string::npos);
  std::mt19937_64 gen(fresh_seed());
  struct damage {
    const char* file;
    const char* how;
    const char* said; // what the message says is wrong
  };
  const damage damages[] = {{"optimizer.safetensors", "flip", "CRC-32"},
                            {"policy.safetensors", "flip", "CRC-32"},
                            {"runners.safetensors", "cut", "bytes, but"},
                            {"stats.bin", "missing", "missing"},
                            {"counters.txt", "flip", "CRC-32"}};
  for (const auto& d : damages) {
    CAPTURE(d.file);
    CAPTURE(d.how);
    auto copy = copy_run(run, dir.path / "copy");
    const auto target = copy / "checkpoints" / newest / d.file;
    const std::string saved = read_file(target);
    REQUIRE(saved.size() > 16);
    if (std::string(d.how) == "missing") {
      fs::remove(target);
    } else {
      std::string bytes = saved;
      if (std::string(d.how) == "flip") {
        std::uniform_int_distribution<size_t> at(0, bytes.size() - 1);
        std::uniform_int_distribution<int> bit(0, 7);
        bytes[at(gen)] ^= static_cast<char>(1 << bit(gen));
      } else {
        bytes.resize(bytes.size() / 3);
      }
      std::ofstream(target, std::ios::binary | std::ios::trunc) << bytes;
    }
    // Two more batches from the older checkpoint.
    auto r = run_troupe(fmt::format("train --resume '{}' --set algo.total_env_steps={}",
                                    copy.string(), (older_updates + 2) * 512),
                        dir);
    INFO(r.err);
    CHECK(r.status == 0);
    CHECK(r.err.find(d.file) != std::string::npos);
    CHECK(r.err.find(d.said) != std::string::npos);
    CHECK(r.err.find("falling back to " + (copy / "checkpoints" / older).string()) !=
          std::string::npos);
    auto counters =
      read_counters(copy / "checkpoints" / fmt::format("{:010d}", older_updates + 2));
    CHECK(std::stoull(counters.at("updates")) == older_updates + 2);
    CHECK(std::stoull(counters.at("env_steps")) == (older_updates + 2) * 512);
    // No learner produced a non-finite gradient.
    CHECK(read_metrics(copy).back().at("gradients_rejected") == "0");
  }
}

TEST_CASE("--resume with no checkpoint left whole stops with exit status 2 naming each "
          "bad file, and leaves the run folder as it was") {
  temp_folder dir("train-all-damaged");
  const auto run = finished_run(dir);
  const auto names = checkpoint_names(run);
  REQUIRE(names.size() >= 2);
  const auto newest = run / "checkpoints" / names.back();
  {
    const std::string saved = read_file(newest / "optimizer.safetensors");
    std::ofstream(newest / "optimizer.safetensors", std::ios::binary | std::ios::trunc)
      << saved.substr(0, saved.size() / 2);
  }
  // Every older one has lost its statistics file.
  for (size_t i = 0; i + 1 < names.size(); ++i)
    fs::remove(run / "checkpoints" / names[i] / "stats.bin");
  const auto older = run / "checkpoints" / names.front();
  const std::string metrics_before = read_file(run / "metrics.csv");
  auto r = run_troupe(
    fmt::format("train --resume '{}' --set algo.total_env_steps=10240", run.string()),
    dir);
  CHECK(r.status == 2);
  CHECK(r.err.find((newest / "optimizer.safetensors").string()) != std::string::npos);
  CHECK(r.err.find((older / "stats.bin").string() + ": missing") != std::string::npos);
  CHECK(r.err.find(fmt::format("none of its {} checkpoint(s) is usable", names.size())) !=
        std::string::npos);
  CHECK(read_file(run / "metrics.csv") == metrics_before);
  CHECK(!fs::exists(run / "checkpoints" / fmt::format("{:010d}", 20)));
}

namespace {

// Every file of a checkpoint folder, name -> contents.
std::map<std::string, std::string> folder_contents(const fs::path& folder) {
  std::map<std::string, std::string> out;
  for (auto& e : fs::directory_iterator(folder))
    out[e.path().filename().string()] = read_file(e.path());
  return out;
}

// The largest file of a checkpoint folder, in bytes.
uint64_t largest_file(const fs::path& folder) {
  uint64_t out = 0;
  for (auto& e : fs::directory_iterator(folder))
    out = std::max<uint64_t>(out, fs::file_size(e.path()));
  return out;
}

} // namespace

TEST_CASE("a finished run's events file holds metrics.csv's rows as TensorBoard scalars, "
          "and run.tensorboard = false writes none") {
  temp_folder dir("train-tensorboard");
  const auto on = train_cartpole(
    dir, "--set algo.total_env_steps=5120 --set run.log_every_updates=1", "on");
  INFO(on.result.err);
  const auto& run = on.run;
  const auto files = troupe::test::tb_event_files(run);
  REQUIRE(files.size() == 1);
  const auto read = troupe::test::read_tb_events_file(files.front());
  REQUIRE_MESSAGE(read.error.empty(), read.error);
  const auto rows = read_metrics(run);
  REQUIRE(rows.size() >= 2);
  REQUIRE(read.events.size() == rows.size() + 1);
  CHECK(read.events.front().file_version == "brain.Event:2");
  for (size_t i = 0; i < rows.size(); ++i) {
    CAPTURE(i);
    const auto& ev = read.events[i + 1];
    CHECK(ev.step == static_cast<int64_t>(std::stoull(rows[i].at("env_steps"))));
    std::map<std::string, float> scalars(ev.values.begin(), ev.values.end());
    CHECK(scalars.size() == ev.values.size()); // no tag twice
    size_t cells = 0;
    for (const auto& item : rows[i]) {
      // Not a structured binding: CAPTURE is a lambda (clang 14).
      const std::string& column = item.first;
      const std::string& cell = item.second;
      CAPTURE(column);
      if (cell == "nan") {
        CHECK(scalars.count(column) == 0);
        continue;
      }
      ++cells;
      REQUIRE(scalars.count(column) == 1);
      CHECK(scalars.at(column) == static_cast<float>(std::strtod(cell.c_str(), nullptr)));
    }
    CHECK(cells == scalars.size());
  }

  const auto off = train_cartpole(
    dir, "--set algo.total_env_steps=2048 --set run.tensorboard=false", "off");
  INFO(off.result.err);
  const auto& off_run = off.run;
  CHECK(fs::exists(off_run / "metrics.csv"));
  CHECK(troupe::test::tb_event_files(off_run).empty());
}

TEST_CASE("a disk that fills while a checkpoint is written stops the run with the path "
          "and the system's reason, and leaves the previous checkpoint whole") {
  temp_folder dir("train-disk-full");
  auto run = finished_run(dir);
  const auto ckpt = run / "checkpoints" / fmt::format("{:010d}", 10);
  const auto before = folder_contents(ckpt);
  const auto names_before = checkpoint_names(run);
  // RLIMIT_FSIZE (ulimit -f, 512-byte blocks in sh) below the checkpoint's
  // largest file: its write fails with EFBIG ("File too large"), as on a full
  // disk; SIGXFSZ is ignored so that the write returns the error.
  const uint64_t blocks = largest_file(ckpt) / 512 / 2;
  REQUIRE(blocks > 0);
  REQUIRE(fs::file_size(run / "metrics.csv") < blocks * 512);
  auto r = troupe::test::run_command(
    fmt::format("trap '' XFSZ; ulimit -f {}; exec '{}' train --resume '{}' --set "
                "algo.total_env_steps=10240 --set run.checkpoint_every_updates=2",
                blocks, TROUPE_BINARY, run.string()),
    dir);
  INFO(r.err);
  CHECK(r.status == 1);
  CHECK(r.err.find("checkpoint failed") != std::string::npos);
  CHECK(r.err.find(std::strerror(EFBIG)) != std::string::npos);
  // It stops at the first failed checkpoint instead of training on unsaved.
  CHECK(r.err.find("stopping the run") != std::string::npos);
  CHECK(r.err.find("the run stopped: checkpoint failed") != std::string::npos);
  CHECK(r.err.find((run / "checkpoints").string()) != std::string::npos);
  CHECK(folder_contents(ckpt) == before);
  // Nothing half written: no .tmp folder, no new checkpoint.
  CHECK(checkpoint_names(run) == names_before);
}

TEST_CASE("a metrics file that cannot be opened or written stops the run with the path "
          "and the system's reason") {
  temp_folder dir("train-metrics-unwritable");
  auto run = finished_run(dir);
  SUBCASE("metrics.csv is a folder") {
    fs::remove(run / "metrics.csv");
    fs::create_directories(run / "metrics.csv" / "in-the-way");
    auto r = run_troupe(
      fmt::format("train --resume '{}' --set algo.total_env_steps=10240", run.string()),
      dir);
    INFO(r.err);
    CHECK(r.status == 1);
    CHECK(r.err.find((run / "metrics.csv").string() +
                     " for appending: " + std::strerror(EISDIR)) != std::string::npos);
    CHECK(r.err.find("stopping the run") != std::string::npos);
  }
  SUBCASE("the disk fills while a row is written") {
    // metrics.csv padded with copies of its last row to just under the limit
    // (rows up to the checkpoint are kept on resume); checkpoint files fit.
    const uint64_t blocks =
      largest_file(run / "checkpoints" / fmt::format("{:010d}", 10)) / 512 + 4;
    auto lines = lines_of(read_file(run / "metrics.csv"));
    REQUIRE(lines.size() >= 2);
    std::string text;
    for (auto& l : lines)
      text += l + "\n";
    while (text.size() + lines.back().size() + 1 < blocks * 512 - 50)
      text += lines.back() + "\n";
    std::ofstream(run / "metrics.csv", std::ios::binary | std::ios::trunc) << text;
    auto r = troupe::test::run_command(
      fmt::format("trap '' XFSZ; ulimit -f {}; exec '{}' train --resume '{}' --set "
                  "algo.total_env_steps=10240 --set run.log_every_updates=1",
                  blocks, TROUPE_BINARY, run.string()),
      dir);
    INFO(r.err);
    CHECK(r.status == 1);
    CHECK(r.err.find("cannot write " + (run / "metrics.csv").string() + ": " +
                     std::strerror(EFBIG)) != std::string::npos);
    CHECK(r.err.find("stopping the run") != std::string::npos);
    // Its progress is saved: the final checkpoint (its files fit) is past 10.
    CHECK(checkpoint_names(run).back() > fmt::format("{:010d}", 10));
  }
}

TEST_CASE("an output folder that cannot be created stops train with the path and the "
          "system's reason") {
  temp_folder dir("train-unwritable-output");
  dir.write("a-file", "not a folder");
  auto r = run_troupe(fmt::format("train '{}' --set run.output_dir='\"a-file/out\"' "
                                  "--set algo.total_env_steps=1024",
                                  config_path()),
                      dir);
  CHECK(r.status == 1);
  CHECK(r.err.find("a-file/out") != std::string::npos);
  CHECK(r.err.find(std::strerror(ENOTDIR)) != std::string::npos);
}

namespace {

// Starts `troupe ARGS` with stdout to /dev/null and stderr to `err_path`.
pid_t spawn_troupe(std::vector<std::string> args, const fs::path& err_path) {
  args.insert(args.begin(), TROUPE_BINARY);
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  const int rc =
    posix_spawn(&pid, TROUPE_BINARY, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  REQUIRE(rc == 0);
  return pid;
}

// The newest checkpoint folder with a manifest (complete), empty if none.
fs::path newest_complete(const fs::path& run) {
  fs::path out;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(run / "checkpoints", ec)) {
    auto name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") == std::string::npos &&
        fs::exists(e.path() / "manifest.txt") &&
        (out.empty() || name > out.filename().string()))
      out = e.path();
  }
  return out;
}

struct progress {
  uint64_t env_steps = 0, updates = 0, episodes = 0, version = 0;
};

progress progress_of(const fs::path& ckpt) {
  auto c = read_counters(ckpt);
  progress p;
  p.env_steps = std::stoull(c.at("env_steps"));
  p.updates = std::stoull(c.at("updates"));
  p.episodes = std::stoull(c.at("episodes"));
  auto opt =
    troupe::learners::read_safetensors((ckpt / "optimizer.safetensors").string());
  REQUIRE(opt);
  auto* counters = opt->find("counters");
  REQUIRE(counters);
  p.version = static_cast<uint64_t>(counters->to_i64().at(0));
  return p;
}

} // namespace

TEST_CASE("runs killed with SIGKILL at random moments each resume from the newest "
          "complete checkpoint, with counters that never go backwards") {
  temp_folder dir("train-kill-loop");
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const auto out = (dir.path / "out").string();
  // Run 1: a fresh run, killed once its first checkpoint is complete.
  const pid_t first = start_until_first_checkpoint(out, seed % 1000);
  std::uniform_int_distribution<int> delay_ms(0, 1500);
  std::this_thread::sleep_for(
    std::chrono::milliseconds(delay_ms(gen))); // the fault's moment
  kill(first, SIGKILL);
  waitpid(first, nullptr, 0);
  const auto run = only_run(out);
  progress before = progress_of(newest_complete(run));
  const int kills = 3;
  for (int k = 0; k < kills; ++k) {
    CAPTURE(k);
    const auto newest = newest_complete(run);
    REQUIRE(!newest.empty());
    const auto err = dir.path / fmt::format("stderr-{}.txt", k);
    const pid_t pid = spawn_troupe({"train", "--resume", run.string(), "--set",
                                    "algo.total_env_steps=50000000", "--set",
                                    "run.checkpoint_every_updates=3"},
                                   err);
    // Killed at a random moment once it has chosen its checkpoint.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    bool resumed = false;
    while (!resumed && std::chrono::steady_clock::now() < deadline &&
           waitpid(pid, nullptr, WNOHANG) == 0) {
      resumed = read_file(err).find("resuming from") != std::string::npos;
      if (!resumed)
        std::this_thread::sleep_for(std::chrono::milliseconds(20)); // polling interval
    }
    if (resumed)
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(gen)));
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    const auto text = read_file(err);
    INFO(text);
    REQUIRE_MESSAGE(resumed, "no 'resuming from' line within 120 s");
    CHECK(text.find("resuming from " + newest.string()) != std::string::npos);
    const progress now = progress_of(newest_complete(run));
    CHECK(now.env_steps >= before.env_steps);
    CHECK(now.updates >= before.updates);
    CHECK(now.episodes >= before.episodes);
    CHECK(now.version >= before.version);
    before = now;
  }
  // A last resume runs to its end from where the kills left it.
  auto r = run_troupe(fmt::format("train --resume '{}' --set algo.total_env_steps={}",
                                  run.string(), before.env_steps + 4 * 512),
                      dir);
  INFO(r.err);
  REQUIRE(r.status == 0);
  const progress last = progress_of(newest_complete(run));
  CHECK(last.updates == before.updates + 4);
  CHECK(last.env_steps == before.env_steps + 4 * 512);
  CHECK(last.version >= before.version);
  CHECK(last.episodes >= before.episodes);
}

TEST_CASE("a MuJoCo run's metrics.csv ends with its reward terms' episode means and its "
          "MuJoCo counters, and keeps them across --resume") {
  temp_folder dir("train-mujoco-columns");
  const std::string config =
    std::string(TROUPE_SOURCE_DIR) + "/config/mujoco/inverted_pendulum_ppo.toml";
  // Reacher-v4: 50-step episodes, so that episodes end within each row.
  auto first = run_troupe(fmt::format("train '{}' --set run.output_dir='\"out\"' "
                                      "--set env.id='\"Reacher-v4\"' "
                                      "--set algo.total_env_steps=1024 "
                                      "--set algo.num_steps=256 "
                                      "--set run.checkpoint_every_updates=2",
                                      config),
                          dir);
  INFO(first.err);
  REQUIRE(first.status == 0);
  auto run = only_run(dir.path / "out");
  const auto header = split(lines_of(read_file(run / "metrics.csv"))[0], ',');
  const std::vector<std::string> extra = {
    "episode.reward_dist_mean", "episode.reward_ctrl_mean", "mujoco_instability_warnings",
    "mujoco_other_warnings", "mujoco_non_finite_states"};
  REQUIRE(header.size() == troupe::actors::metrics_column_count + extra.size());
  for (size_t k = 0; k < troupe::actors::metrics_column_count; ++k)
    CHECK(header[k] == troupe::actors::metrics_columns[k]);
  for (size_t k = 0; k < extra.size(); ++k)
    CHECK(header[troupe::actors::metrics_column_count + k] == extra[k]);
  auto rows = read_metrics(run);
  REQUIRE(rows.size() >= 4);
  for (auto& r : rows) {
    // 256 steps of one environment finish at least four 51-step episodes.
    const double dist = std::stod(r.at("episode.reward_dist_mean"));
    const double ctrl = std::stod(r.at("episode.reward_ctrl_mean"));
    CHECK(dist < 0);
    CHECK(ctrl < 0);
    CHECK(r.at("mujoco_instability_warnings") == "0");
  }
  check_jsonl_matches_csv(run);

  auto again = run_troupe(
    fmt::format("train --resume '{}' --set algo.total_env_steps=2048", run.string()),
    dir);
  INFO(again.err);
  REQUIRE(again.status == 0);
  CHECK(split(lines_of(read_file(run / "metrics.csv"))[0], ',') == header);
  auto resumed = read_metrics(run); // every row has the header's cell count
  REQUIRE(resumed.size() > rows.size());
  CHECK(std::stoull(resumed.back().at("env_steps")) == 2048);
  check_jsonl_matches_csv(run);
}

TEST_CASE("model.norm_update reaches the runners: step normalizes differently from "
          "batch, and each is deterministic") {
  temp_folder dir("train-norm-update");
  const std::string config = std::string(TROUPE_SOURCE_DIR) + "/config/pendulum_ppo.toml";
  auto run_with = [&](const std::string& output, const std::string& update) {
    auto r =
      run_troupe(fmt::format("train '{}' --set run.output_dir='\"{}\"' "
                             "--set algo.total_env_steps=4096 --set env.num_envs=4 "
                             "--set run.log_every_updates=1 "
                             "--set model.reward_norm=true "
                             "--set model.norm_update='\"{}\"'",
                             config, output, update),
                 dir);
    INFO(r.err);
    REQUIRE(r.status == 0);
    return read_metrics(only_run(dir.path / output));
  };
  const auto batch = run_with("batch", "batch");
  const auto again = run_with("batch-again", "batch");
  const auto step = run_with("step", "step");
  REQUIRE(batch.size() == 4);
  REQUIRE(again.size() == batch.size());
  REQUIRE(step.size() == batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    CAPTURE(i);
    CHECK(again[i].at("loss_value") == batch[i].at("loss_value"));
    CHECK(step[i].at("env_steps") == batch[i].at("env_steps"));
    // From the first batch on, the policy saw other observations and the
    // critic other rewards.
    CHECK(step[i].at("loss_value") != batch[i].at("loss_value"));
  }
}

TEST_CASE("with run.norm_diagnostics a run with per-runner normalizers reports how far "
          "its policy moves across their changes and from the global ones") {
  temp_folder dir("train-norm-diagnostics");
  const std::string config = std::string(TROUPE_SOURCE_DIR) + "/config/pendulum_ppo.toml";
  auto run_with = [&](const std::string& output, const std::string& sets) {
    auto r = run_troupe(fmt::format("train '{}' --set run.output_dir='\"{}\"' "
                                    "--set algo.total_env_steps=8192 "
                                    "--set algo.num_learners=2 --set env.num_envs=4 "
                                    "--set run.log_every_updates=1 "
                                    "--set model.reward_norm=true {}",
                                    config, output, sets),
                        dir);
    INFO(r.err);
    REQUIRE(r.status == 0);
    return read_metrics(only_run(dir.path / output));
  };
  const auto rows = run_with("local", "--set run.norm_diagnostics=true "
                                      "--set model.obs_norm_scope='\"runner\"' "
                                      "--set model.reward_norm_scope='\"runner\"'");
  REQUIRE(rows.size() == 8); // 8192 steps of 2 x 4 environments x 256
  size_t measured = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    CAPTURE(i);
    const auto& r = rows[i];
    if (r.at("obs_shift_kl") == "nan") // each runner's first batch has no earlier one
      continue;
    ++measured;
    const double shift = std::stod(r.at("obs_shift_kl"));
    const double drift = std::stod(r.at("obs_drift_kl"));
    CHECK(shift > 0.0); // a runner's own moments change after every batch
    CHECK(drift > 0.0); // and differ from the pooled ones
    CHECK(std::stod(r.at("obs_drift_kl_max")) == drift); // one batch per row
    CHECK(std::stod(r.at("return_std_shift")) >= 0.0);
    CHECK(std::isfinite(std::stod(r.at("return_std_drift"))));
  }
  CHECK(measured == rows.size() - 2);
  // Without the option nothing is measured.
  for (const auto& r : run_with("plain", "")) {
    CHECK(r.at("obs_shift_kl") == "nan");
    CHECK(r.at("obs_drift_kl") == "nan");
    CHECK(r.at("return_std_drift") == "nan");
  }
}
