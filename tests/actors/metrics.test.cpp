// The metrics actor's rows: the columns that come from the statistics
// keeper's and the parameter server's own counters (deltas_duplicate,
// gradients_rejected), so that what a lost or fenced host sent is counted
// even when no learner reports it; and the same rows as TensorBoard events.
#include <doctest/doctest.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/messages.hpp"
#include "actors/metrics.hpp"
#include "actors/parameter_server.hpp"
#include "actors/stats_keeper.hpp"
#include "tests/actors/ask.hpp"
#include "tests/file_size_limit.hpp"
#include "tests/seed.hpp"
#include "tests/temp_folder.hpp"
#include "tests/tensorboard_reader.hpp"

using namespace troupe;
using namespace troupe::actors;
using troupe::test::ask;
namespace fs = std::filesystem;

namespace {

// The cells of metrics.csv's last row, by column name.
std::map<std::string, std::string> last_row(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  REQUIRE_MESSAGE(lines.size() >= 2, "metrics.csv has no row: " << path);
  auto split = [](const std::string& s) {
    std::vector<std::string> v;
    std::stringstream ss(s);
    for (std::string c; std::getline(ss, c, ',');)
      v.push_back(c);
    return v;
  };
  auto header = split(lines.front());
  auto cells = split(lines.back());
  REQUIRE(header.size() == cells.size());
  std::map<std::string, std::string> out;
  for (size_t i = 0; i < header.size(); ++i)
    out[header[i]] = cells[i];
  return out;
}

moments_delta sequenced(const std::string& worker, uint64_t incarnation, uint64_t seq,
                        std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.5, 2.0);
  moments_delta d;
  d.stream = "obs";
  d.worker = worker;
  d.count = 3;
  d.mean = {normal(rng), normal(rng)};
  d.m2 = {1.0 + std::abs(normal(rng)), 1.0 + std::abs(normal(rng))};
  d.incarnation = incarnation;
  d.seq_first = d.seq_last = seq;
  return d;
}

gradient_update gradient(const std::string& worker, uint64_t incarnation, uint64_t seq,
                         std::vector<float> grad) {
  gradient_update g;
  g.learner = worker + ".learner0";
  g.samples = 8;
  g.learning_rate = 1e-3;
  g.grad = std::move(grad);
  g.worker = worker;
  g.incarnation = incarnation;
  g.sequence = seq;
  return g;
}

} // namespace

TEST_CASE("the final metrics row counts the keeper's duplicate deltas and the server's "
          "rejected and fenced gradients, which no learner reported") {
  caf::actor_system_config cfg;
  register_messages(cfg);
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys(cfg);
  caf::scoped_actor self(sys);
  troupe::test::temp_folder dir("troupe-metrics");
  std::mt19937_64 rng(troupe::test::fresh_seed());
  auto sink = [](const std::string&) {};

  stats_keeper_options ko;
  ko.log = sink;
  auto keeper = spawn_stats_keeper(sys, ko);
  ask<uint64_t>(self, keeper, declare_atom::value, std::string("obs"), uint64_t{2});
  // Three deltas of one sender, two of them sent twice: 2 duplicates.
  const uint64_t inc = 0x5eed;
  std::vector<moments_delta> sent;
  for (uint64_t seq = 1; seq <= 3; ++seq)
    sent.push_back(sequenced("hostA", inc, seq, rng));
  for (auto& d : sent)
    self->send(keeper, d);
  self->send(keeper, sent[0]);
  self->send(keeper, sent[2]);

  parameter_server_options so;
  so.log = sink;
  const size_t n = 16;
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<float> params(n), grad(n);
  for (auto& x : params)
    x = uni(rng);
  for (auto& x : grad)
    x = uni(rng);
  auto server = spawn_parameter_server(sys, so, params, {}, nullptr);
  CHECK(ask<weights_reply>(self, server, gradient("hostB", 7, 1, grad)).applied);
  // One non-finite gradient, then hostB fenced and two of its later gradients
  // refused: 3 rejected in all.
  auto bad = grad;
  bad[uni(rng) > 0 ? 3 : 11] = std::nanf("");
  CHECK(ask<weights_reply>(self, server, gradient("hostB", 7, 2, bad)).rejected);
  CHECK(ask<uint64_t>(self, server, fence_atom::value, std::string("hostB"),
                      uint64_t{7}) == 0);
  CHECK(ask<weights_reply>(self, server, gradient("hostB", 7, 3, grad)).fenced);
  CHECK(ask<weights_reply>(self, server, gradient("hostB", 7, 4, grad)).fenced);
  // The keeper has handled every delta before it answers this.
  ask<sync_atom>(self, keeper, sync_atom::value);
  auto totals = ask<stream_status>(self, keeper, status_atom::value);
  CHECK(totals.duplicates == 2);
  CHECK(totals.count == 9);
  CHECK(totals.duplicates_by_worker["hostA"] == 2);

  metrics_options mo;
  mo.csv_path = (dir.path / "metrics.csv").string();
  mo.quiet = true;
  mo.keeper = keeper.address();
  mo.server = server.address();
  mo.tally_interval_ms = 0; // only the final row asks
  auto metrics = spawn_metrics(sys, mo, caf::actor_cast<caf::actor>(self));
  // One learner's report, which knows of none of them.
  learner_report r;
  r.learner = "learner0";
  r.env_steps = 64;
  self->send(metrics, r);
  ask<metrics_counters>(self, metrics, row_atom::value);
  auto row = last_row(mo.csv_path);
  CHECK(row.at("deltas_duplicate") == "2");
  CHECK(row.at("gradients_rejected") == "3");
  CHECK(row.at("env_steps") == "64");
  for (auto& a : {metrics, server, keeper})
    self->send_exit(a, caf::exit_reason::user_shutdown);
}

TEST_CASE("without a keeper and a server the metrics row keeps the learners' count of "
          "rejected gradients and no duplicate deltas") {
  caf::actor_system_config cfg;
  register_messages(cfg);
  caf::actor_system sys(cfg);
  caf::scoped_actor self(sys);
  troupe::test::temp_folder dir("troupe-metrics");
  metrics_options mo;
  mo.csv_path = (dir.path / "metrics.csv").string();
  mo.quiet = true;
  auto metrics = spawn_metrics(sys, mo, caf::actor_cast<caf::actor>(self));
  learner_report r;
  r.learner = "learner0";
  r.env_steps = 32;
  r.rejected = 2;
  self->send(metrics, r);
  ask<metrics_counters>(self, metrics, row_atom::value);
  auto row = last_row(mo.csv_path);
  CHECK(row.at("gradients_rejected") == "2");
  CHECK(row.at("deltas_duplicate") == "0");
  self->send_exit(metrics, caf::exit_reason::user_shutdown);
}

// -- TensorBoard events file -------------------------------------------------

namespace {

// Header and rows of a metrics.csv, split at commas.
std::vector<std::vector<std::string>> csv_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::vector<std::string>> out;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> cells;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');)
      cells.push_back(c);
    out.push_back(std::move(cells));
  }
  return out;
}

// A learner report with random figures in every field a row shows.
learner_report random_report(std::mt19937_64& rng) {
  std::uniform_int_distribution<uint64_t> steps(1, 5000), small(0, 7), episodes(0, 3);
  std::normal_distribution<double> normal(0.0, 50.0);
  learner_report r;
  r.learner = "learner" + std::to_string(small(rng) % 2);
  r.env_steps = steps(rng);
  for (uint64_t e = episodes(rng); e > 0; --e) {
    r.episode_returns.push_back(normal(rng));
    r.episode_lengths.push_back(steps(rng));
  }
  r.policy_lag = small(rng);
  r.stats_version = steps(rng);
  r.stats_lag = small(rng);
  r.weights_version = steps(rng);
  r.loss_policy = normal(rng) * 1e-3;
  r.loss_value = std::abs(normal(rng));
  r.entropy = std::abs(normal(rng)) * 1e-2;
  r.learning_rate = std::abs(normal(rng)) * 1e-5;
  r.dropped = small(rng);
  r.rejected = small(rng);
  r.runner_restarts = small(rng);
  r.non_finite = small(rng);
  r.obs_shift_kl = std::abs(normal(rng)) * 1e-4;
  r.obs_drift_kl = std::abs(normal(rng)) * 1e-3;
  r.return_std_shift = std::abs(normal(rng)) * 1e-3;
  r.return_std_drift = normal(rng) * 1e-2;
  return r;
}

// Checks that the events of `events_path` are the rows of `csv_path` after
// the file_version event: one event per row at its env_steps, each cell but
// "nan" a scalar tagged with its column, equal to the float32 of the cell.
void check_events_match_csv(const std::string& csv_path, const fs::path& events_path) {
  const auto lines = csv_lines(csv_path);
  REQUIRE(lines.size() >= 2);
  const auto& header = lines.front();
  const auto read = troupe::test::read_tb_events_file(events_path);
  REQUIRE_MESSAGE(read.error.empty(), read.error);
  REQUIRE(read.events.size() == lines.size());
  CHECK(read.events.front().file_version == "brain.Event:2");
  CHECK(!read.events.front().has_step);
  const size_t env_steps_column =
    std::find(header.begin(), header.end(), "env_steps") - header.begin();
  REQUIRE(env_steps_column < header.size());
  for (size_t i = 1; i < lines.size(); ++i) {
    CAPTURE(i);
    const auto& cells = lines[i];
    const auto& ev = read.events[i];
    REQUIRE(cells.size() == header.size());
    CHECK(ev.has_step);
    CHECK(ev.step == static_cast<int64_t>(std::stoull(cells[env_steps_column])));
    size_t k = 0;
    for (size_t c = 0; c < header.size(); ++c) {
      if (cells[c] == "nan")
        continue;
      CAPTURE(header[c]);
      REQUIRE(k < ev.values.size());
      CHECK(ev.values[k].first == header[c]);
      CHECK(ev.values[k].second ==
            static_cast<float>(std::strtod(cells[c].c_str(), nullptr)));
      ++k;
    }
    CHECK(k == ev.values.size());
  }
}

} // namespace

TEST_CASE("every metrics row is also a TensorBoard event at its env step whose scalars "
          "are the row's cells, and a restarted metrics actor starts a new events file") {
  caf::actor_system_config cfg;
  register_messages(cfg);
  caf::actor_system sys(cfg);
  caf::scoped_actor self(sys);
  troupe::test::temp_folder dir("metrics-tensorboard");
  const uint64_t seed = troupe::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  metrics_options mo;
  mo.csv_path = (dir.path / "metrics.csv").string();
  mo.tensorboard_dir = dir.path.string();
  mo.quiet = true;
  mo.log_every_updates = 1 + rng() % 2;
  auto metrics = spawn_metrics(sys, mo, caf::actor_cast<caf::actor>(self));
  const int reports = 10 + static_cast<int>(rng() % 20);
  for (int i = 0; i < reports; ++i)
    self->send(metrics, random_report(rng));
  auto counters = ask<metrics_counters>(self, metrics, row_atom::value);
  CHECK(ask<std::string>(self, metrics, status_atom::value).empty());
  self->send_exit(metrics, caf::exit_reason::user_shutdown);
  auto files = troupe::test::tb_event_files(dir.path);
  REQUIRE(files.size() == 1);
  check_events_match_csv(mo.csv_path, files.front());
  // The first event's wall time is now's Unix time, as the file's name says.
  const auto first = troupe::test::read_tb_events_file(files.front());
  REQUIRE(first.error.empty());
  CHECK(files.front().filename().string().find(
          fmt::format(".{}.", static_cast<int64_t>(first.events.front().wall_time))) !=
        std::string::npos);

  // A resumed run: a second actor continues the counters and appends to
  // metrics.csv, and writes its rows into a file of its own.
  std::ifstream old_in(files.front(), std::ios::binary);
  const std::string old_bytes((std::istreambuf_iterator<char>(old_in)),
                              std::istreambuf_iterator<char>());
  mo.start = counters;
  auto resumed = spawn_metrics(sys, mo, caf::actor_cast<caf::actor>(self));
  for (int i = 0; i < 4; ++i)
    self->send(resumed, random_report(rng));
  ask<metrics_counters>(self, resumed, row_atom::value);
  self->send_exit(resumed, caf::exit_reason::user_shutdown);
  files = troupe::test::tb_event_files(dir.path);
  REQUIRE(files.size() == 2);
  std::ifstream again(files.front(), std::ios::binary);
  CHECK(std::string(std::istreambuf_iterator<char>(again),
                    std::istreambuf_iterator<char>()) == old_bytes);
  const auto second = troupe::test::read_tb_events_file(files.back());
  REQUIRE_MESSAGE(second.error.empty(), second.error);
  REQUIRE(second.events.size() >= 3);
  // Right after the file version: the run starts again after the checkpoint's
  // step (SessionLog START), so TensorBoard drops the first file's later points.
  CHECK(second.events[1].session_status == 1);
  CHECK(second.events[1].step == static_cast<int64_t>(counters.env_steps) + 1);
  CHECK(!second.events[1].has_summary);
  CHECK(second.events[2].step > static_cast<int64_t>(counters.env_steps));
  // A fresh run's file has none.
  for (const auto& ev : first.events)
    CHECK(ev.session_status == -1);
}

TEST_CASE("without a TensorBoard folder the metrics actor writes no events file") {
  caf::actor_system_config cfg;
  register_messages(cfg);
  caf::actor_system sys(cfg);
  caf::scoped_actor self(sys);
  troupe::test::temp_folder dir("metrics-no-tensorboard");
  std::mt19937_64 rng(troupe::test::fresh_seed());
  metrics_options mo;
  mo.csv_path = (dir.path / "metrics.csv").string();
  mo.quiet = true;
  mo.log_every_updates = 1;
  auto metrics = spawn_metrics(sys, mo, caf::actor_cast<caf::actor>(self));
  for (int i = 0; i < 3; ++i)
    self->send(metrics, random_report(rng));
  ask<metrics_counters>(self, metrics, row_atom::value);
  self->send_exit(metrics, caf::exit_reason::user_shutdown);
  CHECK(csv_lines(mo.csv_path).size() == 4);
  CHECK(troupe::test::tb_event_files(dir.path).empty());
}

TEST_CASE("an events file that cannot be created is reported with its path and the "
          "system's reason and stops the run") {
  caf::actor_system_config cfg;
  register_messages(cfg);
  caf::actor_system sys(cfg);
  caf::scoped_actor self(sys);
  troupe::test::temp_folder dir("metrics-tensorboard-unwritable");
  metrics_options mo;
  mo.csv_path = (dir.path / "metrics.csv").string();
  mo.quiet = true;
  std::string reason;
  SUBCASE("the folder does not exist") {
    mo.tensorboard_dir = (dir.path / "missing").string();
    reason = std::strerror(ENOENT);
  }
  SUBCASE("the folder is a file") {
    mo.tensorboard_dir = dir.write("not-a-folder", "text");
    reason = std::strerror(ENOTDIR);
  }
  auto metrics = spawn_metrics(sys, mo, caf::actor_cast<caf::actor>(self));
  bool stopped = false;
  self->receive([&](stop_atom) { stopped = true; },
                troupe::test::fail_after("stop_atom from the metrics actor"));
  CHECK(stopped);
  const auto status = ask<std::string>(self, metrics, status_atom::value);
  CHECK(status.find("cannot create " + mo.tensorboard_dir + "/events.out.tfevents.") !=
        std::string::npos);
  CHECK(status.find(reason) != std::string::npos);
  // Reports after the failure are taken without a crash and write nothing.
  learner_report r;
  r.learner = "learner0";
  r.env_steps = 16;
  self->send(metrics, r);
  ask<metrics_counters>(self, metrics, row_atom::value);
  self->send_exit(metrics, caf::exit_reason::user_shutdown);
}

TEST_CASE("an events file the system refuses to write to is reported with its path and "
          "the system's reason and stops the run") {
  caf::actor_system_config cfg;
  register_messages(cfg);
  caf::actor_system sys(cfg);
  caf::scoped_actor self(sys);
  troupe::test::temp_folder dir("metrics-tensorboard-full");
  std::mt19937_64 rng(troupe::test::fresh_seed());
  metrics_options mo; // no metrics.csv: the events file is the only one written
  mo.tensorboard_dir = dir.path.string();
  mo.quiet = true;
  mo.log_every_updates = 1;
  auto metrics = spawn_metrics(sys, mo, caf::actor_cast<caf::actor>(self));
  self->send(metrics, random_report(rng));
  ask<metrics_counters>(self, metrics, state_atom::value); // the row is written
  const auto files = troupe::test::tb_event_files(dir.path);
  REQUIRE(files.size() == 1);
  {
    // As a full disk: the file may not grow by a whole row.
    troupe::test::file_size_limit limit(fs::file_size(files.front()) + 8);
    REQUIRE(limit.ok());
    self->send(metrics, random_report(rng));
    bool stopped = false;
    self->receive([&](stop_atom) { stopped = true; },
                  troupe::test::fail_after("stop_atom from the metrics actor"));
    CHECK(stopped);
  }
  const auto status = ask<std::string>(self, metrics, status_atom::value);
  CHECK(status.find("cannot write " + files.front().string() + ": " +
                    std::strerror(EFBIG)) != std::string::npos);
  // Later reports are taken without a crash and add nothing to the file.
  const auto size = fs::file_size(files.front());
  self->send(metrics, random_report(rng));
  ask<metrics_counters>(self, metrics, row_atom::value);
  CHECK(fs::file_size(files.front()) == size);
  self->send_exit(metrics, caf::exit_reason::user_shutdown);
}

// -- reward terms and trouble counters ----------------------------------------

TEST_CASE("metrics.csv gets the environment's reward-term means over each row's "
          "episodes and its trouble counts since the start, after the other columns") {
  caf::actor_system_config cfg;
  register_messages(cfg);
  caf::actor_system sys(cfg);
  caf::scoped_actor self(sys);
  troupe::test::temp_folder dir("troupe-metrics");
  const uint64_t seed = troupe::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(-3.0, 10.0);
  std::uniform_int_distribution<uint64_t> small(0, 5);
  const std::vector<std::string> terms = {"reward_run", "reward_ctrl"};
  const std::vector<std::string> counters = {
    "mujoco_instability_warnings", "mujoco_other_warnings", "mujoco_non_finite_states"};
  metrics_options mo;
  mo.csv_path = (dir.path / "metrics.csv").string();
  mo.quiet = true;
  mo.log_every_updates = 2;
  mo.reward_terms = terms;
  mo.env_counters = counters;
  auto metrics = spawn_metrics(sys, mo, caf::actor_cast<caf::actor>(self));

  std::vector<uint64_t> counted(3, 0);
  auto report = [&](size_t episodes, bool whole, bool skipped) {
    learner_report r;
    r.learner = "learner0";
    r.env_steps = 64;
    r.skipped = skipped;
    for (size_t e = 0; e < episodes; ++e) {
      r.episode_returns.push_back(normal(rng));
      r.episode_lengths.push_back(10);
      for (size_t j = 0; j < terms.size(); ++j)
        r.episode_reward_terms.push_back(whole ? normal(rng) : NAN);
    }
    for (size_t j = 0; j < 3; ++j) {
      r.env_counters.push_back(small(rng));
      counted[j] += r.env_counters[j];
    }
    return r;
  };
  // Row 1 (updates 1 and 2, a skipped batch between them): 3 + 2 whole
  // episodes and one the runner did not see whole (NaN terms).
  auto r1 = report(3, true, false);
  auto skipped = report(0, true, true);
  auto r2 = report(2, true, false);
  std::vector<double> sum(2, 0.0);
  for (auto* r : {&r1, &r2})
    for (size_t k = 0; k < r->episode_reward_terms.size(); ++k)
      sum[k % 2] += r->episode_reward_terms[k];
  self->send(metrics, r1);
  self->send(metrics, skipped);
  self->send(metrics, r2);
  ask<metrics_counters>(self, metrics, state_atom::value);
  const auto counted_row1 = counted;
  // Row 2 (updates 3 and 4): only an episode without whole terms: nan.
  self->send(metrics, report(1, false, false));
  self->send(metrics, report(0, true, false));
  ask<metrics_counters>(self, metrics, state_atom::value);
  self->send_exit(metrics, caf::exit_reason::user_shutdown);

  auto lines = csv_lines(mo.csv_path);
  REQUIRE(lines.size() == 3);
  std::vector<std::string> header(metrics_columns,
                                  metrics_columns + metrics_column_count);
  header.insert(header.end(), {"episode.reward_run_mean", "episode.reward_ctrl_mean"});
  header.insert(header.end(), counters.begin(), counters.end());
  CHECK(lines[0] == header);
  CHECK(metrics_column_names(terms, counters) == header);
  auto cell = [&](size_t row, const std::string& name) {
    const size_t at =
      static_cast<size_t>(std::find(header.begin(), header.end(), name) - header.begin());
    REQUIRE(lines[row].size() == header.size());
    return lines[row][at];
  };
  for (size_t j = 0; j < 2; ++j) {
    const std::string name = "episode." + terms[j] + "_mean";
    CAPTURE(name);
    CHECK(std::strtod(cell(1, name).c_str(), nullptr) ==
          doctest::Approx(sum[j] / 5.0).epsilon(1e-8));
    CHECK(cell(2, name) == "nan");
  }
  for (size_t j = 0; j < 3; ++j) {
    CAPTURE(counters[j]);
    CHECK(cell(1, counters[j]) == std::to_string(counted_row1[j]));
    CHECK(cell(2, counters[j]) == std::to_string(counted[j]));
  }
}

TEST_CASE(
  "the normalizer diagnostics are each row's means over the batches that "
  "measured them, skipped ones too, with the drift's maximum, and nan without any") {
  caf::actor_system_config cfg;
  register_messages(cfg);
  caf::actor_system sys(cfg);
  caf::scoped_actor self(sys);
  troupe::test::temp_folder dir("troupe-metrics");
  const uint64_t seed = troupe::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  metrics_options mo;
  mo.csv_path = (dir.path / "metrics.csv").string();
  mo.quiet = true;
  mo.log_every_updates = 3;
  auto metrics = spawn_metrics(sys, mo, caf::actor_cast<caf::actor>(self));
  const char* names[] = {"obs_shift_kl", "obs_drift_kl", "return_std_shift",
                         "return_std_drift"};
  // Row 1: three learned batches and a skipped one; some left unmeasured (NaN).
  std::vector<std::vector<double>> seen(4);
  auto report = [&](bool skipped, bool measured_obs) {
    learner_report r;
    r.learner = "learner" + std::to_string(rng() % 2);
    r.env_steps = 16;
    r.skipped = skipped;
    double* fields[] = {&r.obs_shift_kl, &r.obs_drift_kl, &r.return_std_shift,
                        &r.return_std_drift};
    for (size_t j = 0; j < 4; ++j) {
      if (j < 2 && !measured_obs)
        continue; // stays NaN
      *fields[j] = j == 3 ? unit(rng) - 0.5 : unit(rng);
      seen[j].push_back(*fields[j]);
    }
    return r;
  };
  self->send(metrics, report(false, true));
  self->send(metrics, report(true, true));
  self->send(metrics, report(false, false));
  self->send(metrics, report(false, true));
  ask<metrics_counters>(self, metrics, state_atom::value);
  // Row 2: three batches that measured nothing.
  for (int k = 0; k < 3; ++k) {
    learner_report r;
    r.learner = "learner0";
    r.env_steps = 16;
    self->send(metrics, r);
  }
  ask<metrics_counters>(self, metrics, state_atom::value);
  self->send_exit(metrics, caf::exit_reason::user_shutdown);

  auto lines = csv_lines(mo.csv_path);
  REQUIRE(lines.size() == 3);
  const auto& header = lines[0];
  auto cell = [&](size_t row, const std::string& name) {
    const auto at = std::find(header.begin(), header.end(), name);
    REQUIRE(at != header.end());
    REQUIRE(lines[row].size() == header.size());
    return lines[row][static_cast<size_t>(at - header.begin())];
  };
  for (size_t j = 0; j < 4; ++j) {
    CAPTURE(names[j]);
    REQUIRE(seen[j].size() == (j < 2 ? 3u : 4u));
    long double sum = 0;
    for (double x : seen[j])
      sum += x;
    CHECK(std::strtod(cell(1, names[j]).c_str(), nullptr) ==
          doctest::Approx(static_cast<double>(sum / seen[j].size())).epsilon(1e-8));
    CHECK(cell(2, names[j]) == "nan");
  }
  CHECK(std::strtod(cell(1, "obs_drift_kl_max").c_str(), nullptr) ==
        doctest::Approx(*std::max_element(seen[1].begin(), seen[1].end())).epsilon(1e-8));
  CHECK(cell(2, "obs_drift_kl_max") == "nan");
}

TEST_CASE("without reward terms or counters metrics.csv has exactly metrics_columns") {
  caf::actor_system_config cfg;
  register_messages(cfg);
  caf::actor_system sys(cfg);
  caf::scoped_actor self(sys);
  troupe::test::temp_folder dir("troupe-metrics");
  metrics_options mo;
  mo.csv_path = (dir.path / "metrics.csv").string();
  mo.quiet = true;
  auto metrics = spawn_metrics(sys, mo, caf::actor_cast<caf::actor>(self));
  learner_report r;
  r.learner = "learner0";
  r.env_steps = 8;
  r.env_counters = {4, 5, 6}; // of no declared counter: left out
  r.episode_returns = {1.5};
  r.episode_lengths = {3};
  r.episode_reward_terms = {1.0, 0.5};
  self->send(metrics, r);
  ask<metrics_counters>(self, metrics, row_atom::value);
  self->send_exit(metrics, caf::exit_reason::user_shutdown);
  auto lines = csv_lines(mo.csv_path);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == std::vector<std::string>(metrics_columns,
                                             metrics_columns + metrics_column_count));
  CHECK(lines[1].size() == metrics_column_count);
  CHECK(metrics_column_names({}, {}) == lines[0]);
}

TEST_CASE("a host's report relay hands the metrics actor its reports in order, one "
          "message per interval, with the counters of the same reports sent one by one, "
          "and ends when the metrics actor does") {
  caf::actor_system_config cfg;
  register_messages(cfg);
  caf::actor_system sys(cfg);
  caf::scoped_actor self(sys);
  const uint64_t seed = troupe::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  metrics_options mo;
  mo.quiet = true;
  mo.log_every_updates = 1000000; // no rows: no files
  auto direct = spawn_metrics(sys, mo, caf::actor_cast<caf::actor>(self));
  auto relayed = spawn_metrics(sys, mo, caf::actor_cast<caf::actor>(self));
  auto same = [](const metrics_counters& a, const metrics_counters& b) {
    CHECK(a.env_steps == b.env_steps);
    CHECK(a.updates == b.updates);
    CHECK(a.episodes == b.episodes);
    CHECK(a.recent_returns == b.recent_returns); // their order too
    CHECK(a.recent_lengths == b.recent_lengths);
  };

  // An hour's interval: nothing reaches the metrics actor before a flush.
  auto slow = spawn_report_relay(sys, relayed, std::chrono::hours(1));
  const int n = 20 + static_cast<int>(rng() % 40);
  for (int i = 0; i < n; ++i) {
    auto r = random_report(rng);
    self->send(direct, r);
    self->send(slow, std::move(r));
  }
  CHECK(ask<metrics_counters>(self, relayed, state_atom::value).updates == 0);
  ask<flush_atom>(self, slow, flush_atom::value); // sent before it answers
  same(ask<metrics_counters>(self, direct, state_atom::value),
       ask<metrics_counters>(self, relayed, state_atom::value));

  // A 1 ms interval: the ticks send what came meanwhile, with no flush.
  auto ticking = spawn_report_relay(sys, relayed, std::chrono::milliseconds(1));
  const int m = 20 + static_cast<int>(rng() % 40);
  for (int i = 0; i < m; ++i) {
    auto r = random_report(rng);
    self->send(direct, r);
    self->send(ticking, std::move(r));
  }
  const auto want = ask<metrics_counters>(self, direct, state_atom::value);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  metrics_counters got;
  do
    got = ask<metrics_counters>(self, relayed, state_atom::value);
  while (got.updates != want.updates && std::chrono::steady_clock::now() < deadline);
  REQUIRE_MESSAGE(got.updates == want.updates, "the relayed metrics actor counted "
                                                 << got.updates << " of " << want.updates
                                                 << " updates within 30 s");
  same(want, got);

  // The relay ends with its metrics actor.
  self->monitor(ticking);
  self->send_exit(relayed, caf::exit_reason::user_shutdown);
  bool ended = false;
  self->receive([&](const caf::down_msg& d) { ended = d.source == ticking.address(); },
                caf::after(std::chrono::seconds(30)) >> [] {});
  CHECK_MESSAGE(ended, "the relay did not end within 30 s of its metrics actor");
  self->send_exit(slow, caf::exit_reason::user_shutdown);
  self->send_exit(direct, caf::exit_reason::user_shutdown);
}

namespace {

// The cells of one CSV line, a quoted cell unquoted (its doubled quotes made one).
std::vector<std::string> csv_cells(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
      out.back() += '"';
      ++i;
    } else if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

} // namespace

TEST_CASE("hosts.csv has, with each metrics row, a row per host of its learners' steps, "
          "updates, episodes, lag and return since the last row, as a float64 reference "
          "counts them") {
  caf::actor_system_config cfg;
  register_messages(cfg);
  caf::actor_system sys(cfg);
  caf::scoped_actor self(sys);
  const uint64_t seed = troupe::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  troupe::test::temp_folder dir("troupe-metrics");
  metrics_options mo;
  mo.csv_path = (dir.path / "metrics.csv").string();
  mo.hosts_csv_path = (dir.path / "hosts.csv").string();
  mo.quiet = true;
  mo.log_every_updates = 3;
  auto metrics = spawn_metrics(sys, mo, caf::actor_cast<caf::actor>(self));
  // A coordinator's own learner, two of host w1 and one of a host whose name
  // needs quoting.
  const std::vector<std::string> learners = {"learner0", "w1.learner0", "w1.learner1",
                                             "w,2.learner0"};
  CHECK(host_of_learner("learner0") == "coordinator");
  CHECK(host_of_learner("w1.learner1") == "w1");
  CHECK(host_of_learner("w,2.learner0") == "w,2");

  struct tally {
    uint64_t steps = 0, updates = 0, episodes = 0;
    double lag_sum = 0, return_sum = 0;
    uint64_t lag_n = 0, return_n = 0;
  };
  std::map<std::string, tally> hosts; // the reference, by host (sorted as the file)
  uint64_t run_steps = 0, run_updates = 0;
  std::vector<std::vector<std::string>> expected; // without wall_time_s and host_sps
  auto row = [&] {
    for (auto& [name, h] : hosts) {
      expected.push_back(
        {std::to_string(run_steps), name, std::to_string(h.steps),
         std::to_string(h.updates), std::to_string(h.episodes),
         h.lag_n ? fmt::format("{:.17g}", h.lag_sum / static_cast<double>(h.lag_n)) : "",
         h.return_n
           ? fmt::format("{:.17g}", h.return_sum / static_cast<double>(h.return_n))
           : ""});
      h.lag_sum = h.return_sum = 0;
      h.lag_n = h.return_n = 0;
    }
  };
  const int n = 30 + static_cast<int>(rng() % 30);
  for (int i = 0; i < n; ++i) {
    auto r = random_report(rng);
    r.learner = learners[rng() % learners.size()];
    r.skipped = rng() % 5 == 0;
    auto& h = hosts[host_of_learner(r.learner)];
    h.steps += r.env_steps;
    run_steps += r.env_steps;
    if (!r.skipped) {
      h.updates += 1;
      h.episodes += r.episode_returns.size();
      h.lag_sum += static_cast<double>(r.policy_lag);
      h.lag_n += 1;
      for (double x : r.episode_returns) {
        h.return_sum += x;
        h.return_n += 1;
      }
      run_updates += 1;
    }
    const bool rows_now = !r.skipped && run_updates % mo.log_every_updates == 0;
    self->send(metrics, std::move(r));
    if (rows_now)
      row();
  }
  const bool final_row = run_updates % mo.log_every_updates != 0;
  ask<metrics_counters>(self, metrics, row_atom::value);
  if (final_row)
    row();
  self->send_exit(metrics, caf::exit_reason::user_shutdown);

  std::ifstream in(mo.hosts_csv_path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  REQUIRE(!lines.empty());
  CHECK(csv_cells(lines[0]) ==
        std::vector<std::string>(hosts_columns, hosts_columns + hosts_column_count));
  REQUIRE(lines.size() == expected.size() + 1);
  const bool quoted = std::any_of(lines.begin(), lines.end(), [](const std::string& l) {
    return l.find(",\"w,2\",") != std::string::npos;
  });
  CHECK(quoted == (hosts.count("w,2") == 1));
  for (size_t i = 0; i < expected.size(); ++i) {
    CAPTURE(i);
    const auto cells = csv_cells(lines[i + 1]);
    REQUIRE(cells.size() == hosts_column_count);
    const auto& want = expected[i];
    CHECK(cells[1] == want[0]); // the run's env_steps
    CHECK(cells[2] == want[1]);
    CHECK(cells[3] == want[2]);
    CHECK(cells[4] == want[3]);
    CHECK(cells[5] == want[4]);
    CHECK(std::strtod(cells[6].c_str(), nullptr) >= 0.0); // host_sps
    for (size_t k : {7, 8}) {
      const auto& w = want[k - 2];
      if (w.empty()) {
        CHECK(cells[k].empty());
      } else {
        REQUIRE(!cells[k].empty());
        const double got = std::strtod(cells[k].c_str(), nullptr);
        const double ref = std::strtod(w.c_str(), nullptr);
        CHECK(std::abs(got - ref) <= 1e-8 * std::max(1.0, std::abs(ref)));
      }
    }
  }
  // Every metrics row has its host rows: as many rows per metrics row as hosts
  // seen by then, the run's env_steps the same.
  const auto metric_lines = csv_lines(mo.csv_path);
  std::set<std::string> steps_of_rows;
  for (size_t i = 1; i < metric_lines.size(); ++i)
    steps_of_rows.insert(metric_lines[i][1]);
  for (const auto& w : expected)
    CHECK(steps_of_rows.count(w[0]) == 1);
}
